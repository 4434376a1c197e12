/**
 * A long backlog: `items` no-op queue items (concurrent, thread 1) queued at once, then drained by one kairos worker
 * process (bench/kairos-worker.ts: `PgKairos.layer` with `workers` / `batchSize` / `maxConnections`, as
 * `kairos worker --concurrency 20 --batch 20` runs it) at full speed, with whatever autovacuum the server has.
 *
 * The items are inserted by SQL (`INSERT ... SELECT generate_series`, as a producer may) and the table vacuumed and
 * analyzed once before the drain, so every run starts from the same clean table and an autovacuum of the insert
 * does not land in the drain by chance. The drain is timed from the worker's start; each tenth's rate is taken
 * where the worker's count of handled items crosses it. Also measured, over each tenth: the mean time of the
 * worker's queue claims (kairos's own `kairos_claim_duration_ms` histogram; a claim along with a write of results
 * counts the write too), and, at its start, the pages one claim's index walk reads (an `EXPLAIN (ANALYZE,
 * BUFFERS)` of the claim's scan from the admin connection), the dead rows Postgres counts in `queue_items` and the
 * vacuums it has seen of it. Checks that every item left exactly one `processed_items` row.
 */
import os from "node:os"
import type { Context, Figures } from "../lib/types.js"
import { machineBusyMs, now, quoteIdent, serverCpuMs, sleep, waitFor } from "../lib/util.js"
import { DEFAULTS, queueEmpty, withKairos } from "./kairos.js"
import { spawnWorker, stopWorker } from "./kairos-only.js"

export interface BacklogOptions {
  readonly items: number
  readonly workers: number
  readonly batchSize: number
  readonly maxConnections: number
  /** Statements run on the migrated schema before the items are queued (a candidate's settings); `{{schema}}`
   * stands for the quoted schema. */
  readonly setup?: ReadonlyArray<string> | undefined
  /** Extra environment for the worker process. */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** The benchmark itself vacuums queue_items whenever Postgres counts more dead rows in it than this (a candidate
   * tried without kairos doing it); undefined: never. */
  readonly benchVacuumAt?: number | undefined
  /** The longest the drain may take before it is cut (ms). */
  readonly capMs: number
}

export interface Tenth {
  /** Items per second over this tenth. */
  readonly rate: number
  readonly seconds: number
  /** Mean milliseconds of the worker's claims over this tenth (NaN when it made none). */
  readonly claimMs: number
  readonly claims: number
  /** At the start of the tenth: index and heap pages one claim's scan read, and its time (ms). */
  readonly probePages: number
  readonly probeMs: number
  /** At the start of the tenth: dead rows in queue_items and vacuums of it so far (manual, auto), as Postgres
   * counts them (its statistics lag by up to a second). */
  readonly deadRows: number
  readonly vacuums: number
  readonly autovacuums: number
  /** Over this tenth, per item: the CPU time of the Postgres server's processes (all of them, vacuums included;
   * NaN when the server is not on this machine) and of the worker process, in ms. The claims' walk shows up in
   * the server's, whatever else the machine runs. */
  readonly serverCpu: number
  readonly workerCpu: number
}

export interface BacklogOutcome {
  readonly items: number
  readonly enqueueSeconds: number
  readonly tenths: ReadonlyArray<Tenth>
  /** From the worker's start until the queue was empty. */
  readonly seconds: number
  /** Last tenth's rate over the first's. */
  readonly ratio: number
  readonly vacuums: number
  readonly autovacuums: number
  /** Machine CPU busy over the drain, in cores (both: Postgres, the worker and anything else running). */
  readonly busyCores: number | undefined
  readonly loadBefore: number
  readonly capped: boolean
  readonly check: string
}

interface Sample {
  readonly t: number
  readonly ok: number
  readonly cpuMs: number
  readonly claimCount: number
  readonly claimSum: number
}

const claimTotals = (m: Record<string, unknown>): { count: number; sum: number } => {
  const claims = (m["claims"] ?? {}) as Record<string, { count: number; sum: number }>
  let count = 0
  let sum = 0
  for (const v of Object.values(claims)) {
    count += v.count
    sum += v.sum
  }
  return { count, sum }
}

/** The time at which `ok` crossed `target`, interpolated between the samples around it. */
const crossing = (samples: ReadonlyArray<Sample>, target: number): number => {
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1]!
    const b = samples[i]!
    if (b.ok >= target) return b.ok === a.ok ? b.t : a.t + ((target - a.ok) / (b.ok - a.ok)) * (b.t - a.t)
  }
  return samples[samples.length - 1]!.t
}

/** The sample nearest `t`. */
const at = (samples: ReadonlyArray<Sample>, t: number): Sample =>
  samples.reduce((best, s) => (Math.abs(s.t - t) < Math.abs(best.t - t) ? s : best), samples[0]!)

export const drainBacklog = (ctx: Context, options: BacklogOptions): Promise<BacklogOutcome> =>
  withKairos(ctx, DEFAULTS, async () => {
    const s = quoteIdent(ctx.schema)
    const n = options.items
    for (const statement of options.setup ?? []) await ctx.admin.query(statement.replaceAll("{{schema}}", s))
    const te = now()
    for (let done = 0; done < n; done += 100_000) {
      await ctx.admin.query(
        `INSERT INTO ${s}.queue_items (task_type, payload, thread)
         SELECT 'noop', '{"n":' || g || '}', 1 FROM generate_series($1::int, $2::int) g`,
        [done + 1, Math.min(n, done + 100_000)]
      )
    }
    await ctx.admin.query(`VACUUM ANALYZE ${s}.queue_items`)
    const enqueueSeconds = (now() - te) / 1000
    ctx.log(`  ${n.toLocaleString("en-US")} items queued and the table vacuumed in ${enqueueSeconds.toFixed(1)} s`)

    const tableStats = async () => {
      const { rows } = await ctx.admin.query<{ dead: string; vacuums: string; autovacuums: string }>(
        `SELECT n_dead_tup AS dead, vacuum_count AS vacuums, autovacuum_count AS autovacuums
         FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'queue_items'`,
        [ctx.schema]
      )
      const r = rows[0]
      return { dead: Number(r?.dead ?? 0), vacuums: Number(r?.vacuums ?? 0), autovacuums: Number(r?.autovacuums ?? 0) }
    }
    // The claim's scan of queue_items_claimable, as kairos_claim makes it for one type (without its row locks).
    const probe = async (): Promise<{ pages: number; ms: number }> => {
      const { rows } = await ctx.admin.query<{ "QUERY PLAN": Array<{ Plan: Record<string, number> }> }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
         SELECT i.id FROM ${s}.queue_items i
         WHERE i.task_type = 'noop' AND i.thread = 1
           AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
           AND coalesce(i.run_after, '-infinity'::timestamptz) <= now()
         ORDER BY i.priority DESC, i.seq LIMIT 20`
      )
      const plan = rows[0]!["QUERY PLAN"][0]!.Plan
      return {
        pages: (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0),
        ms: plan["Actual Total Time"] ?? Number.NaN
      }
    }

    const child = await spawnWorker(
      ctx,
      {
        name: "backlog",
        workers: options.workers,
        batchSize: options.batchSize,
        maxConnections: options.maxConnections
      },
      ctx.schema,
      options.env
    )
    try {
      const sample = async (): Promise<Sample> => {
        child.send("stats")
        const m = await child.next("stats")
        const c = claimTotals(m)
        return { t: now(), ok: Number(m["ok"]), cpuMs: Number(m["cpuMs"]), claimCount: c.count, claimSum: c.sum }
      }
      const loadBefore = os.loadavg()[0]!
      const busy0 = machineBusyMs()
      interface Look {
        readonly pages: number
        readonly ms: number
        readonly dead: number
        readonly vacuums: number
        readonly autovacuums: number
        readonly server: number | undefined
        readonly sample: Sample
      }
      const atStart: Array<Look> = []
      const look = async (at: Sample): Promise<Look> => ({
        sample: at,
        server: await serverCpuMs(ctx.admin),
        ...(await probe()),
        ...(await tableStats())
      })
      let draining = true
      const benchVacuums = (async () => {
        if (options.benchVacuumAt === undefined) return
        while (draining) {
          await sleep(200)
          if ((await tableStats()).dead > options.benchVacuumAt!)
            await ctx.admin.query(`VACUUM (INDEX_CLEANUP ON) ${s}.queue_items`)
        }
      })()
      const first = await sample()
      atStart.push(await look(first))
      const t0 = now()
      child.send("start")
      const samples: Array<Sample> = [{ ...first, t: t0 }]
      let capped = false
      while (true) {
        await sleep(100)
        const got = await sample()
        samples.push(got)
        // A look at the start of each tenth (the probe itself walks the index once, as a claim would).
        while (atStart.length < 10 && got.ok >= (atStart.length * n) / 10) atStart.push(await look(got))
        if (got.ok >= n) break
        if (now() - t0 > options.capMs) {
          capped = true
          break
        }
      }
      const emptied = !capped && (await waitFor(() => queueEmpty(ctx), 60_000, 20))
      const seconds = (now() - t0) / 1000
      draining = false
      await benchVacuums
      const busy = machineBusyMs()
      const end = await tableStats()
      const ended = await look(await sample())
      const bounds = Array.from({ length: 11 }, (_, k) => (k === 0 ? t0 : crossing(samples, (k * n) / 10)))
      const last = samples[samples.length - 1]!
      const tenths: Array<Tenth> = []
      for (let k = 0; k < 10; k++) {
        if (last.ok < ((k + 1) * n) / 10) break
        const a = k === 0 ? samples[0]! : at(samples, bounds[k]!)
        const b = at(samples, bounds[k + 1]!)
        const secs = (bounds[k + 1]! - bounds[k]!) / 1000
        const look = atStart[k]!
        const next = atStart[k + 1] ?? ended
        const done = next.sample.ok - look.sample.ok
        tenths.push({
          serverCpu:
            look.server === undefined || next.server === undefined ? Number.NaN : (next.server - look.server) / done,
          workerCpu: (next.sample.cpuMs - look.sample.cpuMs) / done,
          rate: n / 10 / secs,
          seconds: secs,
          claims: b.claimCount - a.claimCount,
          claimMs: (b.claimSum - a.claimSum) / (b.claimCount - a.claimCount),
          probePages: look.pages,
          probeMs: look.ms,
          deadRows: look.dead,
          vacuums: look.vacuums,
          autovacuums: look.autovacuums
        })
      }
      const { rows } = await ctx.admin.query<{ n: number; d: number }>(
        `SELECT count(*)::int AS n, count(DISTINCT queue_item_id)::int AS d FROM ${s}.processed_items`
      )
      const check =
        rows[0]!.n === n && rows[0]!.d === n
          ? "every item once"
          : `processed_items rows ${rows[0]!.n}, distinct ${rows[0]!.d} for ${n} items`
      return {
        items: n,
        enqueueSeconds,
        tenths,
        seconds,
        ratio: tenths.length === 10 ? tenths[9]!.rate / tenths[0]!.rate : Number.NaN,
        vacuums: end.vacuums - atStart[0]!.vacuums,
        autovacuums: end.autovacuums - atStart[0]!.autovacuums,
        busyCores: busy0 === undefined || busy === undefined ? undefined : (busy - busy0) / 1000 / seconds,
        loadBefore,
        capped: capped || !emptied,
        check
      }
    } finally {
      await stopWorker(child)
    }
  })

/** The outcome as lines of a Markdown table, a tenth a row. */
export const tenthsTable = (o: BacklogOutcome): string => {
  const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "—")
  const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "—")
  const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "—")
  const lines = [
    "| tenth | items/s | s | claims | ms/claim | server CPU ms/item | worker CPU ms/item | pages/claim scan at start | dead rows at start | vacuums (manual / auto) at start |",
    "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
  ]
  o.tenths.forEach((t, k) =>
    lines.push(
      `| ${k + 1} | ${f0(t.rate)} | ${t.seconds.toFixed(1)} | ${f0(t.claims)} | ${f2(t.claimMs)} | ` +
        `${f3(t.serverCpu)} | ${f3(t.workerCpu)} | ${f0(t.probePages)} ` +
        `(${f2(t.probeMs)} ms) | ${f0(t.deadRows)} | ${t.vacuums} / ${t.autovacuums} |`
    )
  )
  return lines.join("\n")
}

/** One line: first and last tenth, their ratio, the total. */
export const summary = (o: BacklogOutcome): string => {
  const first = o.tenths[0]
  const last = o.tenths[o.tenths.length - 1]
  const r = (x: number | undefined) => (x === undefined ? "—" : Math.round(x).toLocaleString("en-US"))
  return (
    `${o.items.toLocaleString("en-US")} items: first tenth ${r(first?.rate)}/s (${first?.claimMs.toFixed(2) ?? "—"} ms/claim), ` +
    `last tenth ${r(last?.rate)}/s (${last?.claimMs.toFixed(2) ?? "—"} ms/claim), last/first ${o.ratio.toFixed(2)}, ` +
    `${o.seconds.toFixed(1)} s in all (${r(o.items / o.seconds)}/s)${o.capped ? " CUT AT THE CAP" : ""}; ` +
    (Number.isFinite(first?.serverCpu ?? Number.NaN)
      ? `server CPU ${first!.serverCpu.toFixed(3)} → ${last!.serverCpu.toFixed(3)} ms/item; `
      : "") +
    `vacuums of queue_items during the drain: ${o.vacuums} manual, ${o.autovacuums} auto; ${o.check}; ` +
    `machine ${o.busyCores === undefined ? "?" : o.busyCores.toFixed(2)} cores busy, load ${o.loadBefore.toFixed(2)} before`
  )
}

const tenthDetail = (t: Tenth | undefined): string | undefined =>
  t === undefined
    ? undefined
    : `${t.claimMs.toFixed(2)} ms/claim` +
      (Number.isFinite(t.serverCpu) ? `, server CPU ${t.serverCpu.toFixed(3)} ms/item` : "")

/** The figures `npm run bench` keeps. */
export const figures = (o: BacklogOutcome): Figures => {
  const first = o.tenths[0]
  const last = o.tenths[o.tenths.length - 1]
  const detail = `${o.vacuums} manual / ${o.autovacuums} auto vacuums; ${o.check}`
  return {
    "backlog.first": {
      value: first?.rate ?? Number.NaN,
      detail: tenthDetail(first)
    },
    "backlog.last": {
      value: last?.rate ?? Number.NaN,
      capped: o.capped,
      detail: tenthDetail(last)
    },
    "backlog.ratio": { value: o.ratio, capped: o.capped },
    "backlog.seconds": { value: o.seconds, capped: o.capped, detail }
  }
}
