/**
 * Measures of kairos alone (no peer has the feature, or they are about kairos's own costs): many interval jobs
 * due at one instant, the claim cost against a large `processed_items`, worker memory over a long drain, and the
 * drain with several worker processes on one database.
 */
import { type ChildProcess, spawn } from "node:child_process"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { QueueStore, Runner, Schedule, Semaphore } from "../../src/index.js"
import type { QueueClaim, RecurringJob } from "../../src/index.js"
import type { Context, Figures } from "../lib/types.js"
import { latch, machineBusyMs, median, now, quoteIdent, sleep, waitFor, within } from "../lib/util.js"
import { DEFAULTS, type KairosConfig, TUNED, enqueueAll, noopInputs, queueEmpty, withKairos } from "./kairos.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const root = path.resolve(here, "..", "..")

/**
 * `count` jobs on `Schedule.interval({ every: "1 hour" })` defined with one `defineJobs` call (in chunks of 1,000
 * when one call fails, the failure noted), all made due at one instant 2 s ahead (`UPDATE scheduled_jobs SET
 * next_run_at`), the runner started before it. Times from that instant until every job has a `job_runs` row
 * (`fired`) and until every handler ran (`ran`).
 */
export const intervalJobs = (ctx: Context, config: KairosConfig, count: number, capMs: number): Promise<Figures> =>
  withKairos(ctx, config, async (rt) => {
    const runner = await rt.runPromise(Runner.Runner)
    let ran = 0
    const all = latch()
    await rt.runPromise(
      runner.register("tick", () => {
        if (++ran === count) all.resolve()
      })
    )
    const jobs: Array<RecurringJob> = Array.from({ length: count }, (_, i) => ({
      name: `bench-${i}`,
      taskType: "tick",
      schedule: Schedule.interval({ every: "1 hour" })
    }))
    const notes: Array<string> = []
    let t = now()
    const defined = await rt.runPromise(Effect.either(runner.defineJobs(jobs)))
    if (defined._tag === "Left") {
      notes.push(`defineJobs(${count} jobs) in one call failed: ${String(defined.left.message).slice(0, 200)}`)
      for (let i = 0; i < count; i += 1_000) await rt.runPromise(runner.defineJobs(jobs.slice(i, i + 1_000)))
    }
    const defineSeconds = (now() - t) / 1000
    const s = quoteIdent(ctx.schema)
    const dueAt = Date.now() + 2_000
    await ctx.admin.query(`UPDATE ${s}.scheduled_jobs SET next_run_at = $1`, [new Date(dueAt)])
    await rt.runPromise(runner.start)
    await sleep(Math.max(0, dueAt - Date.now()))
    t = now()
    const fired = await waitFor(
      async () => {
        const { rows } = await ctx.admin.query<{ n: number }>(
          `SELECT count(DISTINCT job_id)::int AS n FROM ${s}.job_runs`
        )
        return rows[0]!.n >= count
      },
      capMs,
      20
    )
    const firedSeconds = (now() - t) / 1000
    const done = await within(all.promise, Math.max(0, capMs - (now() - t)))
    const ranSeconds = (now() - t) / 1000
    await rt.runPromise(runner.stop)
    const detail = [config.name, ...notes].join("; ")
    return {
      "cron.fired": { value: firedSeconds, capped: !fired, detail },
      "cron.ran": { value: ranSeconds, capped: !done, detail: done ? undefined : `${ran} of ${count} ran` },
      "cron.define": { value: defineSeconds, detail: defined._tag === "Left" ? "in chunks of 1,000" : "one call" }
    }
  })

/**
 * The claim cost: medians of `claimBatch` of 20 and of `recordResults` of those 20, in three schemas side by side:
 * one with an empty `processed_items` and a short queue, one with `rows` rows in `processed_items`, and one with
 * `backlogRows` more items queued (a backlog: before migration 0010, a backlog of tens of thousands made the
 * claim's generic plan scan the whole queue). They are measured in turns (A B C, C B A, ...), so caches, checkpoints and
 * the machine's other load weigh on all alike.
 */
export const claimCost = (ctx: Context, rows: number, backlogRows: number, claims = 100): Promise<Figures> => {
  const full = { ...ctx, schema: `${ctx.schema}_full` }
  const backlog = { ...ctx, schema: `${ctx.schema}_backlog` }
  return withKairos(ctx, DEFAULTS, (rtEmpty) =>
    withKairos(full, DEFAULTS, (rtFull) =>
      withKairos(backlog, DEFAULTS, async (rtBacklog) => {
        const warmUp = 20
        for (const [rt, c] of [
          [rtEmpty, ctx],
          [rtFull, full],
          [rtBacklog, backlog]
        ] as const) {
          await enqueueAll(rt, noopInputs((claims + warmUp) * 20, 1))
          await c.admin.query(`ANALYZE ${quoteIdent(c.schema)}.queue_items`)
        }
        const tb = now()
        await ctx.admin.query(
          `INSERT INTO ${quoteIdent(backlog.schema)}.queue_items (task_type, payload, thread)
         SELECT 'noop', '{}', 1 FROM generate_series(1, $1::int)`,
          [backlogRows]
        )
        await ctx.admin.query(`VACUUM ANALYZE ${quoteIdent(backlog.schema)}.queue_items`)
        ctx.log(`  ${backlogRows.toLocaleString("en-US")} more items queued in ${((now() - tb) / 1000).toFixed(1)} s`)
        const t = now()
        await ctx.admin.query(
          `INSERT INTO ${quoteIdent(full.schema)}.processed_items
           (queue_item_id, task_type, payload, status, started_at, finished_at, duration_ms)
         SELECT g, 'noop', '{}', 'ok', now(), now(), 0 FROM generate_series(1, $1::int) g`,
          [rows]
        )
        await ctx.admin.query(`VACUUM ANALYZE ${quoteIdent(full.schema)}.processed_items`)
        await ctx.admin.query("CHECKPOINT").catch(() => undefined)
        ctx.log(`  ${rows.toLocaleString("en-US")} processed_items rows in ${((now() - t) / 1000).toFixed(1)} s`)
        const cycle = (rt: typeof rtEmpty) =>
          rt.runPromise(
            Effect.gen(function* () {
              const queue = yield* QueueStore
              const at = new Date()
              const t0 = now()
              const got: ReadonlyArray<QueueClaim> = yield* queue.claimBatch({
                limit: 20,
                taskTypes: ["noop"],
                owner: "bench",
                leaseUntil: new Date(at.getTime() + 600_000),
                now: at,
                repeatAfter: at
              })
              const t1 = now()
              yield* queue.recordResults(
                got.map((claim) => ({ claim, result: { startedAt: at, finishedAt: new Date() } }))
              )
              const t2 = now()
              if (got.length !== 20) return yield* Effect.die(new Error(`claimBatch returned ${got.length} of 20`))
              return { claim: t1 - t0, record: t2 - t1 }
            })
          )
        const times = {
          empty: { claim: [] as Array<number>, record: [] as Array<number> },
          full: { claim: [] as Array<number>, record: [] as Array<number> },
          backlog: { claim: [] as Array<number>, record: [] as Array<number> }
        }
        const runtimes = { empty: rtEmpty, full: rtFull, backlog: rtBacklog }
        for (let i = 0; i < claims + warmUp; i++) {
          const order = i % 2 === 0 ? (["empty", "full", "backlog"] as const) : (["backlog", "full", "empty"] as const)
          for (const which of order) {
            const got = await cycle(runtimes[which])
            // The first rounds warm up (prepared statements, caches).
            if (i >= warmUp) {
              times[which].claim.push(got.claim)
              times[which].record.push(got.record)
            }
          }
        }
        const rowsText = `${rows.toLocaleString("en-US")} rows`
        return {
          "claim.empty": { value: median(times.empty.claim) },
          "claim.full": { value: median(times.full.claim), detail: rowsText },
          "record.empty": { value: median(times.empty.record) },
          "record.full": { value: median(times.full.record), detail: rowsText },
          "claim.backlog": {
            value: median(times.backlog.claim),
            detail: `${backlogRows.toLocaleString("en-US")} queued`
          }
        }
      })
    )
  )
}

/** A child process running bench/kairos-worker.ts. */
export interface Child {
  readonly proc: ChildProcess
  readonly next: (event: string) => Promise<Record<string, unknown>>
  readonly send: (cmd: string) => void
}

export const spawnWorker = async (
  ctx: Context,
  config: KairosConfig,
  schema: string,
  env: Readonly<Record<string, string>> = {}
): Promise<Child> => {
  // The compiled worker beside this compiled file (npm run bench), else the sources through tsx.
  const compiled = import.meta.url.endsWith(".js")
  const args = compiled
    ? ["--expose-gc", path.join(here, "..", "kairos-worker.js")]
    : ["--expose-gc", "--import", "tsx", path.join(here, "..", "kairos-worker.ts")]
  const proc = spawn(process.execPath, args, {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    env: {
      ...process.env,
      KAIROS_URL: ctx.url,
      KAIROS_SCHEMA: schema,
      KAIROS_WORKERS: String(config.workers ?? ""),
      KAIROS_BATCH: String(config.batchSize ?? ""),
      KAIROS_POOL: String(config.maxConnections ?? ""),
      ...env
    }
  })
  const waiting = new Map<string, Array<(m: Record<string, unknown>) => void>>()
  proc.on("message", (m: Record<string, unknown>) => {
    const list = waiting.get(String(m["event"]))
    list?.shift()?.(m)
  })
  const exited = new Promise<never>((_, reject) =>
    proc.on("exit", (code) => reject(new Error(`kairos-worker exited (code ${code})`)))
  )
  exited.catch(() => undefined)
  const next = (event: string) =>
    Promise.race([
      new Promise<Record<string, unknown>>((resolve) => {
        const list = waiting.get(event) ?? []
        list.push(resolve)
        waiting.set(event, list)
      }),
      exited
    ])
  const child: Child = { proc, next, send: (cmd) => void proc.send({ cmd }) }
  await child.next("ready")
  return child
}

export const stopWorker = async (child: Child) => {
  if (child.proc.exitCode !== null) return
  const gone = new Promise<void>((resolve) => child.proc.on("exit", () => resolve()))
  child.send("stop")
  if (!(await within(gone, 15_000))) child.proc.kill("SIGKILL")
}

/** Worker RSS (after a forced GC) once `first` items are drained, and again once `total` are. */
export const memory = (ctx: Context, first: number, total: number): Promise<Figures> =>
  withKairos(ctx, DEFAULTS, async (rt) => {
    const config = TUNED[0]!
    const child = await spawnWorker(ctx, config, ctx.schema)
    try {
      await enqueueAll(rt, noopInputs(first, 1))
      child.send("start")
      await child.next("started")
      await waitFor(() => queueEmpty(ctx), 600_000, 50)
      child.send("memory")
      const a = await child.next("memory")
      for (let done = first; done < total; done += 20_000) {
        await enqueueAll(rt, noopInputs(Math.min(20_000, total - done), 1))
        await waitFor(() => queueEmpty(ctx), 600_000, 50)
      }
      child.send("memory")
      const b = await child.next("memory")
      const mb = (x: unknown) => Number(x) / 1024 / 1024
      const parts = (s: Record<string, unknown>) =>
        ["rss", "heapTotal", "heapUsed", "external", "arrayBuffers"]
          .map((k) => `${k} ${mb(s[k]).toFixed(1)}`)
          .join(", ")
      ctx.log(`  kairos memory after ${first}: ${parts(a)}; after ${total}: ${parts(b)} (MB)`)
      return {
        "rss.first": {
          value: mb(a["rss"]),
          detail: `${first.toLocaleString("en-US")} items, heap ${mb(a["heapUsed"]).toFixed(1)} MB`
        },
        "rss.total": {
          value: mb(b["rss"]),
          detail: `${total.toLocaleString("en-US")} items, heap ${mb(b["heapUsed"]).toFixed(1)} MB, ok ${String(b["ok"])}`
        }
      }
    } finally {
      await stopWorker(child)
    }
  })

/**
 * The drain of `items` no-op items by `procs` worker processes (each `TUNED[0]`) once they are warm, as the workers
 * of a long-running fleet are: each process first drains its share of `warm` items from a cold start (V8 compiling
 * the hot path, the pool opening its connections — a fixed cost per process that a one-second drain would otherwise
 * count as if it were a cost per item); the semaphore is then set red, `items` are enqueued, and the drain is timed
 * from the moment the semaphore turns green until the queue is empty. The cold drain's rate is shown beside it.
 * Checks that every item left exactly one `processed_items` row.
 */
export const scaleOut = (ctx: Context, procs: number, items: number, warm: number): Promise<Figures> =>
  withKairos(ctx, DEFAULTS, async (rt) => {
    const setGreen = (green: boolean) =>
      rt.runPromise(Effect.flatMap(Semaphore, (semaphore) => (green ? semaphore.setGreen : semaphore.setRed)))
    await enqueueAll(rt, noopInputs(warm, 1))
    const children = await Promise.all(Array.from({ length: procs }, () => spawnWorker(ctx, TUNED[0]!, ctx.schema)))
    const stats = () =>
      Promise.all(
        children.map(async (c) => {
          c.send("stats")
          const m = await c.next("stats")
          return { ok: Number(m["ok"]), cpuMs: Number(m["cpuMs"]) }
        })
      )
    try {
      let t0 = now()
      for (const c of children) c.send("start")
      const warmed = await waitFor(() => queueEmpty(ctx), ctx.sizes.drainCapMs * 2, 10)
      const coldRate = warm / ((now() - t0) / 1000)
      await setGreen(false)
      await enqueueAll(rt, noopInputs(items, 1))
      const before = await stats()
      const busy0 = machineBusyMs()
      t0 = now()
      await setGreen(true)
      const done = warmed && (await waitFor(() => queueEmpty(ctx), ctx.sizes.drainCapMs * 2, 10))
      const seconds = (now() - t0) / 1000
      const busy = machineBusyMs()
      const { rows } = await ctx.admin.query<{ n: number; d: number }>(
        `SELECT count(*)::int AS n, count(DISTINCT queue_item_id)::int AS d FROM ${quoteIdent(ctx.schema)}.processed_items`
      )
      const after = await stats()
      const per = after.map((a, i) => a.ok - before[i]!.ok)
      const timed = per.reduce((sum, n) => sum + n, 0)
      const cpuMs = after.reduce((sum, a, i) => sum + a.cpuMs - before[i]!.cpuMs, 0)
      const check =
        rows[0]!.n === warm + items && rows[0]!.d === warm + items
          ? ""
          : `; processed_items rows ${rows[0]!.n}, distinct ${rows[0]!.d} for ${warm + items} items`
      return {
        [`scale.${procs}`]: {
          value: timed / seconds,
          capped: !done,
          detail:
            `per process ${per.join(" / ")}, worker CPU ${(cpuMs / Math.max(1, timed)).toFixed(3)} ms/item` +
            // The whole machine's (Postgres's too, when it runs here): where added processes cost more per item.
            (busy0 !== undefined && busy !== undefined
              ? `, machine CPU ${((busy - busy0) / Math.max(1, timed)).toFixed(3)} ms/item`
              : "") +
            "; " +
            `cold start ${Math.round(coldRate).toLocaleString("en-US")}/s over ${warm.toLocaleString("en-US")}${check}`
        }
      }
    } finally {
      await Promise.all(children.map(stopWorker))
    }
  })
