/**
 * Failover to a promoted standby, under load. A primary and a streaming standby from the machine's PostgreSQL
 * binaries (Debian's postgresql-15; the embedded package lacks `pg_basebackup` and `pg_ctl promote`), three worker
 * processes reaching the database through a TCP proxy (as through a virtual IP or a DNS name a failover manager
 * moves), a backlog of queue items and three interval jobs. Mid-drain the primary crashes (SIGKILL to its
 * processes), the standby is promoted, the proxy switched to it; the workers must carry on by themselves.
 *
 * - Synchronous replication (`synchronous_standby_names = '*'`): nothing is lost, every item runs exactly once.
 * - Asynchronous, over a replication link that lags a second behind: what the primary committed in its last second
 *   is lost with it (results, claims); each such execution runs again — a queue item once its lease expires, a
 *   scheduled run at once, let go by its live owner — and the final counts are exact.
 * In both, every worker's backoff ends within a second of the standby accepting writes and the workers execute
 * again: items enqueued as it accepts writes start within 1.5 s (the standby is promoted 3 s after the crash, so that
 * every worker's ticks fail and back off first), and no run is left to expire as "owner lost" while its owner was
 * alive. Also: a worker pointed at the standby by mistake says so in one line.
 *
 * Measured (2 cores, other tests running): each worker's backoff ended 0.2–0.5 s after the standby accepted writes
 * and it executed again 0.6–0.9 s after; before the backoff stopped being cut short by finishing handlers (and was
 * ended by the listener's reconnect instead), ~3 s in this test (3.9 s in the issue's). Asynchronous: 220–530 items
 * ran twice, 3–6 scheduled runs let go at once by their owner; before, such runs stayed `running` for their whole
 * lease and were then blamed on a lost owner. The items enqueued at the failover started 0.35–0.6 s after it. With
 * the backlog already drained at the crash (forced, to check why loaded runs failed when the fleet's first execution
 * after the failover was the measure), workers back at 0.3 s ran nothing until a job's slot or an expired lease, up
 * to 18.7 s later.
 *
 * 1,500 items of 40 ms (the issue measured 5,000) keep the file to under a minute. Skipped, saying why, where the
 * binaries are missing; `KAIROS_REQUIRE_STANDBY=1` (CI) makes that a failure.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { migrate, STANDBY } from "../../src/adapters/postgres/migrations.js"
import { Schedule } from "../../src/index.js"
import { kairos } from "../support/cli.js"
import { uniqueSchemaName } from "../support/database.js"
import { type Proxy, startProxy } from "../support/proxy.js"
import { type Cluster, postgresBinaries, startCluster } from "../support/standby.js"
import { killAll, sleep, startProcess, startWorker, type TestDb, until, type Worker } from "../support/workers.js"
import { assertInvariants, type Enqueued } from "./invariants.js"

const bindir = postgresBinaries()
const required = process.env["KAIROS_REQUIRE_STANDBY"] === "1"
const ITEMS = 1500
const PROMOTE_AFTER_MS = 3000
/** Items enqueued as soon as the promoted standby accepts writes. */
const FRESH = 30

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const f of cleanups.reverse()) await f().catch(() => undefined)
})

/** A migrated schema reached at `url`, through a pool whose connections may die (a failover). */
const schemaOn = async (url: string): Promise<TestDb> => {
  const schema = uniqueSchemaName("failover")
  await Effect.runPromise(
    migrate({ schema }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
  )
  const pool = new pg.Pool({ connectionString: url, max: 2 })
  pool.on("error", () => undefined)
  const query = async <R>(text: string, values?: ReadonlyArray<unknown>) =>
    (await pool.query(text.replaceAll("$schema", `"${schema}"`), values as Array<unknown>)).rows as Array<R>
  return {
    schema,
    url,
    // Retried while the database is away (the failover): the test's own reads must not fail for it.
    query: async <R>(text: string, values?: ReadonlyArray<unknown>) => {
      for (let i = 0; ; i++) {
        try {
          return await query<R>(text, values)
        } catch (e) {
          if (i >= 100) throw e
          await sleep(100)
        }
      }
    },
    close: () => pool.end()
  }
}

/** One query on a server directly (not through the proxy). */
const direct = async <R>(url: string, text: string): Promise<Array<R>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text)).rows as Array<R>
  } finally {
    await client.end()
  }
}

/**
 * Samples the primary directly, twice a second until `stop`: transactions open for over 3 s, and running runs whose
 * lease ended over 2 s ago (which any worker's next claim takes back). Each distinct sight once, with its time.
 */
const watchPrimary = (url: string, schema: string) => {
  const seen: Array<string> = []
  const known = new Set<string>()
  let stopped = false
  const client = new pg.Client({ connectionString: url })
  client.on("error", () => undefined)
  const done = (async () => {
    await client.connect()
    while (!stopped) {
      const at = new Date().toISOString()
      const rows = [
        ...(
          await client.query(
            `SELECT 'xact' AS what, pid::text AS key, state, wait_event_type AS wait,
                    round(extract(epoch FROM now() - xact_start)::numeric, 1) AS open_s, left(query, 160) AS query
               FROM pg_stat_activity
              WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                AND xact_start < now() - interval '3 seconds'`
          )
        ).rows,
        ...(
          await client.query(
            `SELECT 'run' AS what, id::text AS key, owner, lease_until, started_at, attempt
               FROM "${schema}".job_runs WHERE status = 'running' AND lease_until < now() - interval '2 seconds'`
          )
        ).rows
      ] as Array<{ what: string; key: string }>
      for (const row of rows) {
        if (known.has(`${row.what}:${row.key}`)) continue
        known.add(`${row.what}:${row.key}`)
        seen.push(`  ${at} ${JSON.stringify(row)}`)
      }
      await sleep(500)
    }
  })().catch((e: unknown) => seen.push(`  the watch ended: ${String(e)}`))
  return {
    seen,
    stop: async () => {
      stopped = true
      await done
      await client.end().catch(() => undefined)
    }
  }
}

interface Figures {
  readonly mode: string
  /** From the crash to the standby accepting writes (promoted, proxy switched). */
  readonly writableAfterMs: number
  /** How long the crash (until the primary's postmaster is gone) and the promotion (`pg_ctl promote -w`) took. */
  readonly crashTookMs: number
  readonly promoteTookMs: number
  /** Per worker, from writable to its first execution started after it. */
  readonly resumedAfterMs: ReadonlyArray<number>
  /** From writable to the fresh items committed, and to the first of them started. */
  readonly freshEnqueuedAfterMs: number
  readonly freshStartedAfterMs: number
  /** The worker that started the first of them. */
  readonly freshStartedBy: number
  /** Per worker, from writable to its line saying the database is reachable again (its first tick that succeeded). */
  readonly backAfterMs: ReadonlyArray<number>
  /** Per worker, how long that first successful tick took (fresh connections to the promoted standby). */
  readonly firstTickMs: ReadonlyArray<number>
  readonly itemsRunTwice: number
  /** The queue items left just before the crash, and how many of them were not claimed. */
  readonly backlogAtCrash: { readonly left: number; readonly pending: number }
  readonly lostRunsLetGo: number
  readonly skippedSlotsAfter: number
}

const scenario = async (mode: "synchronous" | "asynchronous"): Promise<Figures> => {
  const sync = mode === "synchronous"
  // Asynchronous: the standby streams through a link a second behind, so the primary's last second dies with it.
  let lagging: Proxy | undefined
  const cluster: Cluster = await startCluster({
    bindir: bindir!,
    primarySettings: sync ? { synchronous_standby_names: "'*'" } : {},
    ...(sync
      ? {}
      : {
          replicateThrough: async (port: number) => {
            lagging = await startProxy(port, { delayMs: 1000 })
            return lagging.port
          }
        })
  })
  cleanups.push(() => cluster.destroy())
  if (lagging !== undefined) cleanups.push(lagging.close)
  await until(
    async () =>
      (await direct<{ state: string }>(cluster.primary.url, "SELECT sync_state AS state FROM pg_stat_replication"))
        .length > 0,
    30_000,
    "the standby to stream"
  )
  const proxy = await startProxy(cluster.primary.port)
  cleanups.push(proxy.close)
  const url = `postgres://postgres@127.0.0.1:${proxy.port}/postgres`
  const db = await schemaOn(url)
  cleanups.push(() => db.close())

  // Three no-op jobs every second, and three every two seconds whose first attempts take 1.5 s (a run claimed well before the
  // crash may finish just before it: its success is what an asynchronous failover loses).
  const every = (ms: number) => Schedule.encodeJson(Schedule.interval({ every: ms }))
  await db.query(
    `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule, payload, next_run_at)
     SELECT 'every-1s-' || i, 'noop', $1::jsonb, '', now() + interval '2 seconds' FROM generate_series(1, 3) i
     UNION ALL
     SELECT 'long-' || i, 'slow', $2::jsonb, '', now() + interval '2 seconds' FROM generate_series(1, 3) i`,
    [every(1000), every(2000)]
  )
  const enqueued: Array<Enqueued> = await db.query<Enqueued>(
    `INSERT INTO $schema.queue_items (task_type, payload, thread)
     SELECT 'sleepy', '40', 1 FROM generate_series(1, ${ITEMS})
     RETURNING id::text AS id, max_runs, thread`
  )
  // The backlog is on the standby before anything runs: the failover may lose executions, not the items.
  await until(
    async () =>
      (
        await direct<{ n: number }>(
          cluster.standby.url,
          `SELECT count(*)::int AS n FROM "${db.schema}".queue_items`
        ).catch(() => [{ n: 0 }])
      )[0]!.n === ITEMS,
    30_000,
    "the standby to have the backlog"
  )

  // A worker pointed at the standby by mistake: one line that says so, and it exits; before it, a worker built by
  // `PgKairos.layer` (as `Kairos.create` is) fails with that line too.
  if (sync) {
    const cli = await kairos([
      "worker",
      "--database-url",
      cluster.standby.url,
      "--schema",
      db.schema,
      "--tasks",
      "test/fixtures/cli-tasks.ts"
    ])
    expect(cli.code).not.toBe(0)
    expect(cli.stderr.trim().split("\n")).toEqual([`kairos: ${STANDBY}`])
    const mistaken = startProcess("test/fixtures/start-worker.ts", [], { DATABASE_URL: cluster.standby.url })
    cleanups.push(async () => killAll([mistaken]))
    await mistaken.waitFor((e) => e.event === "loaded", 60_000)
    mistaken.send({ start: { schema: db.schema, define: [] } })
    const failed = await mistaken.waitFor((e) => e.event === "failed" || e.event === "ready", 30_000)
    expect(String(failed["message"]).split("\n")[0]).toBe(`kairos/MigrationError: ${STANDBY}`)
    killAll([mistaken])
  }

  const config = { workers: 8, batchSize: 20, interval: "1 second", leaseDuration: "10 seconds" }
  const workers: Array<Worker> = [0, 1, 2].map(() => startWorker(db, { config, slowMs: 1500, debug: true }))
  cleanups.push(async () => killAll(workers))
  await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready")))
  // What the failure below (no run blamed on a lost owner) would need to be explained: long transactions on the
  // primary and running runs left past their lease, sampled twice a second until the crash.
  const watch = watchPrimary(cluster.primary.url, db.schema)
  cleanups.push(watch.stop)
  const processed = async () =>
    (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.processed_items`))[0]!.n
  await until(async () => (await processed()) >= ITEMS / 4, 60_000, "a quarter of the backlog to drain")
  // The crash comes a moment after a long run ended: its success is committed on the primary, within the second
  // the lagging standby has not received yet.
  const from = workers.map((w) => w.events.length)
  await Promise.race(
    workers.map((w, i) => w.waitFor((e) => e.event === "end" && String(e.job).startsWith("long-"), 10_000, from[i]))
  )
  if (sync) await sleep(300)
  else {
    // Asynchronous: the crash comes while a long run's success is on the primary and still in the lagging link, which
    // then goes dead (`freeze`, as the link to a crashing primary does). Its success finished within 400 ms of the
    // primary's clock, found within 300 ms: committed well inside the second the link holds it. A fixed wait after
    // the run's `end` line was not enough on a loaded machine: the line or the result's write came late, the success
    // had reached the standby, and nothing was lost (CI: no run let go).
    await until(
      async () => {
        const asked = Date.now()
        const fresh = await db.query(
          `SELECT 1 FROM $schema.job_runs r JOIN $schema.scheduled_jobs j ON j.id = r.job_id
           WHERE j.name LIKE 'long-%' AND r.status = 'success' AND r.finished_at > now() - interval '400 milliseconds'`
        )
        return fresh.length > 0 && Date.now() - asked < 300
      },
      30_000,
      "a long run's success committed on the primary within the last 400 ms"
    )
    lagging!.freeze()
  }
  const [atCrash] = await db.query<{ left: number; pending: number }>(
    `SELECT count(*)::int AS left, count(*) FILTER (WHERE status = 'pending')::int AS pending FROM $schema.queue_items`
  )

  // The failover.
  await watch.stop()
  const crashedAt = Date.now()
  await cluster.crash(cluster.primary)
  const crashTookMs = Date.now() - crashedAt
  // A failover manager takes a moment to decide: long enough for every worker's ticks to fail and back off.
  await sleep(PROMOTE_AFTER_MS)
  const promotedFrom = Date.now()
  await cluster.promote(cluster.standby)
  const promoteTookMs = Date.now() - promotedFrom
  proxy.switchTo(cluster.standby.port)
  const writableAt = Date.now()
  // Work that arrives as the standby accepts writes, ahead of the backlog (priority): what remains of the backlog
  // depends on how far the drain got before the crash (a loaded run crashed with all of it done, or the rest under
  // leases from before the crash, and the fleet's next execution waited for a long job's slot, 2.5-10 s later); these
  // are due and unclaimed whatever the backlog's state, so the first execution after the failover is the workers'
  // reaction.
  const fresh = await db.query<Enqueued>(
    `INSERT INTO $schema.queue_items (task_type, payload, thread, priority)
     SELECT 'sleepy', '40', 1, 1 FROM generate_series(1, ${FRESH})
     RETURNING id::text AS id, max_runs, thread`
  )
  const freshAt = Date.now()
  enqueued.push(...fresh)
  for (const w of workers) expect(w.child.exitCode).toBeNull()

  const resumedAt = (w: Worker) => {
    const e = w.events.find((e) => e.event === "start" && Number(e.at) >= writableAt)
    return e === undefined ? undefined : Number(e.at)
  }
  /** What worker `w` logged (its debug lines too) and ran from the crash to `until`, relative to writability. */
  const since = (w: Worker, until: number) =>
    w.events
      .filter((e) => e.event !== "text" && Number(e.at) >= crashedAt && Number(e.at) <= until)
      .map(
        (e) =>
          `${Number(e.at) - writableAt}ms ${e.event === "log" ? String(e.message).split("\n")[0]!.slice(0, 160) : JSON.stringify(e)}`
      )
  // Every worker back executes at its next tick if there is work to take: more comes, a few items at a time, whenever
  // nothing is left to claim (the fresh items and the backlog may all be taken, or held under leases from before the
  // crash, by the workers back first; the job slots then went to whichever won the race for them: a CI run saw one
  // worker of three run nothing for 30 s).
  const more = async () => {
    const [queued] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.queue_items WHERE status = 'pending' AND in_flight = 0`
    )
    if (queued!.n > 0) return
    enqueued.push(
      ...(await db.query<Enqueued>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread, priority)
         SELECT 'sleepy', '40', 1, 1 FROM generate_series(1, 10)
         RETURNING id::text AS id, max_runs, thread`
      ))
    )
  }
  const allBack = async () => {
    if (workers.every((w) => resumedAt(w) !== undefined)) return true
    await more()
    return false
  }
  // Seen once in CI (the machine's Postgres pass, synchronous mode): on a timeout, say what each worker that did not
  // run did, and what the queue held.
  await until(allBack, 30_000, "every worker to run again", async () => {
    const [queue] = await db.query(
      `SELECT count(*)::int AS left, count(*) FILTER (WHERE status = 'pending')::int AS pending,
                count(*) FILTER (WHERE in_flight > 0)::int AS running, min(run_after) AS first_run_after
         FROM $schema.queue_items`
    )
    const idle = workers.flatMap((w, i) =>
      resumedAt(w) !== undefined
        ? []
        : [
            `worker ${i} (exit ${w.child.exitCode ?? w.child.signalCode}):\n${since(w, Date.now()).slice(-150).join("\n")}`
          ]
    )
    return `the queue: ${JSON.stringify(queue)}\n${idle.join("\n")}`
  })
  await until(
    async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
    90_000,
    "the backlog to drain after the failover"
  )
  await db.query(`UPDATE $schema.scheduled_jobs SET enabled = false`)
  await until(
    async () =>
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'running'`))[0]!
        .n === 0,
    30_000,
    "running slots to finish"
  )
  const stats = await assertInvariants(db, { enqueued, drained: true, leaseSlackMs: 3000 })
  expect(stats.processed).toBe(enqueued.length)

  // Executions started per item, over all workers (a worker may run an item whose result it then cannot record).
  const starts = new Map<string, number>()
  for (const w of workers)
    for (const e of w.events)
      if (e.event === "start" && e.item !== undefined) starts.set(String(e.item), (starts.get(String(e.item)) ?? 0) + 1)
  expect(starts.size).toBe(enqueued.length)
  const itemsRunTwice = [...starts.values()].filter((n) => n > 1).length
  const errors = await db.query<{ error: string; finished_at: Date }>(
    `SELECT error, finished_at FROM $schema.job_runs WHERE status = 'failed' AND error IS NOT NULL`
  )
  const letGo = errors.filter((r) => r.error.includes("no longer runs it"))
  const lostRunsLetGo = letGo.length
  // Let go as soon as their owners reached the promoted standby, not when their leases expired.
  for (const r of letGo) expect(r.finished_at.getTime() - writableAt).toBeLessThan(2000)
  // No worker died: a run left to expire as "owner lost" would be a live owner blamed. Seen once in CI (asynchronous):
  // on a failure, say what those runs were and what their owner printed about them.
  const blamed = await db.query<{ id: string; error: string }>(
    `SELECT r.id::text AS id, j.name, r.scheduled_for, r.attempt, r.started_at, r.finished_at, r.lease_until, r.owner,
            r.error
       FROM $schema.job_runs r JOIN $schema.scheduled_jobs j ON j.id = r.job_id
      WHERE r.status = 'failed' AND r.error LIKE 'owner lost:%'`
  )
  if (blamed.length > 0) {
    const ids = new Set(blamed.map((r) => r.id))
    const iso = (ms: number) => new Date(ms).toISOString()
    const about = workers.map(
      (w, i) =>
        `worker ${i} (${String(w.events.find((e) => e.event === "ready")?.["owner"])}):\n` +
        w.events
          .filter(
            (e) =>
              ids.has(String(e["runId"])) ||
              (e.event === "log" && [...ids].some((id) => String(e.message).includes(id))) ||
              (e.event === "log" && String(e["level"]) !== "DEBUG" && Number(e.at) >= crashedAt - 5000)
          )
          .map((e) => `  ${iso(Number(e.at))} ${JSON.stringify({ ...e, at: undefined }).slice(0, 400)}`)
          .join("\n")
    )
    const tail = async (server: Cluster["primary"]) => (await cluster.log(server)).split("\n").slice(-40).join("\n")
    expect.fail(
      `runs blamed on a lost owner (crashed ${iso(crashedAt)}, writable ${iso(writableAt)}; the crash took ` +
        `${crashTookMs} ms, the promotion ${promoteTookMs} ms):\n` +
        `${blamed.map((r) => `  ${JSON.stringify(r)}`).join("\n")}\n${about.join("\n")}\n` +
        `on the primary before the crash (transactions open over 3 s; running runs 2 s past their lease):\n` +
        `${watch.seen.slice(-200).join("\n") || "  (none)"}\n` +
        `the primary's log:\n${await tail(cluster.primary)}\nthe standby's log:\n${await tail(cluster.standby)}`
    )
  }
  const [after] = await db.query<{ skipped: number }>(
    `SELECT count(*)::int AS skipped FROM $schema.job_runs
     WHERE status = 'skipped' AND scheduled_for >= to_timestamp(${writableAt / 1000})`
  )
  /** The first start of any of `items`: when, and by which worker. */
  const firstStart = (items: ReadonlySet<string>) =>
    workers
      .flatMap((w, by) =>
        w.events.filter((e) => e.event === "start" && items.has(String(e.item))).map((e) => ({ at: Number(e.at), by }))
      )
      .reduce((a, b) => (b.at < a.at ? b : a), { at: Number.POSITIVE_INFINITY, by: -1 })
  const freshStart = firstStart(new Set(fresh.map((e) => e.id)))
  const backLines = workers.map((w) =>
    w.events.find((e) => e.event === "log" && /the database is reachable again: ticked after/.test(String(e.message)))
  )
  const figures: Figures = {
    mode,
    writableAfterMs: writableAt - crashedAt,
    crashTookMs,
    promoteTookMs,
    resumedAfterMs: workers.map((w) => resumedAt(w)! - writableAt),
    freshEnqueuedAfterMs: freshAt - writableAt,
    freshStartedAfterMs: freshStart.at - writableAt,
    freshStartedBy: freshStart.by,
    backAfterMs: backLines.map((e) => (e === undefined ? Number.NaN : Number(e.at) - writableAt)),
    firstTickMs: backLines.map((e) =>
      e === undefined ? Number.NaN : Number(/this tick took (\d+) ms/.exec(String(e.message))?.[1] ?? Number.NaN)
    ),
    itemsRunTwice,
    lostRunsLetGo,
    backlogAtCrash: atCrash!,
    skippedSlotsAfter: after!.skipped
  }
  console.log(`failover (${mode}): ${JSON.stringify(figures)}`)
  // What a worker that was slow to resume logged (its debug lines too) and ran, relative to the standby accepting
  // writes.
  workers.forEach((w, i) => {
    if (figures.resumedAfterMs[i]! < 1500 && !(figures.backAfterMs[i]! >= 1500)) return
    const lines = since(w, writableAt + figures.resumedAfterMs[i]! + 1000)
    console.log(
      `worker ${i} was back ${figures.backAfterMs[i]} ms and executed again ${figures.resumedAfterMs[i]} ms after ` +
        `writable:\n${lines.slice(-300).join("\n")}`
    )
  })

  // The tick failures of the outage are a handful per worker, each saying when it retries.
  for (const w of workers) {
    const failed = w.events.filter((e) => e.event === "log" && /tick failed/.test(String(e.message)))
    expect(failed.length, JSON.stringify(failed)).toBeLessThanOrEqual(5)
  }
  const exits = await Promise.all(workers.map((w) => w.stop()))
  expect(exits.map((e) => e.code)).toEqual([0, 0, 0])
  await cluster.destroy()
  return figures
}

/**
 * Every worker ticked again soon after the standby accepted writes: its listener, retrying twice a second, reconnected
 * and ended its backoff, and its first tick through a fresh connection began within 1.5 s (under 1 s on a quiet
 * machine, well short of the 4 s backoff each sat in) and succeeded. How long that tick took is the machine's load, not
 * the backoff (2.2 s with half the CPU and four other test files), so it is not part of the bound. The fleet executed
 * again within 1.5 s: the first of the items enqueued as the standby accepted writes started by then (so did whatever
 * else started first), not counting the first tick of the worker that started it, for the same reason (CI on a slow
 * machine: every first tick began within 0.8 s and took 0.9-1.9 s, the first fresh item started at 1.68 s, right as its
 * worker's first tick ended). When each worker executes again is bounded only by the scenario's 30 s: one may find
 * nothing left to take (its peers claimed the fresh items and the rest of the backlog, batch and buffer, in their first
 * ticks; a loaded run saw two workers of three run nothing until the next slot of a job, 3 and 5 s later, though both
 * had ticked at 0.2 s) until the scenario enqueues more.
 */
const resumedInTime = (figures: Figures) => {
  // The log line comes when the first tick has succeeded: its start is that line less the tick's length.
  figures.backAfterMs.forEach((ms, i) => expect(ms - figures.firstTickMs[i]!, `worker ${i}`).toBeLessThan(1500))
  expect(figures.freshStartedAfterMs - figures.firstTickMs[figures.freshStartedBy]!).toBeLessThan(1500)
  expect(Math.min(...figures.resumedAfterMs)).toBeLessThanOrEqual(figures.freshStartedAfterMs)
}

describe.skipIf(bindir === undefined && !required)("failover to a promoted standby", () => {
  it.runIf(bindir === undefined)("needs PostgreSQL's server binaries (KAIROS_REQUIRE_STANDBY=1)", () => {
    throw new Error(
      "no PostgreSQL server binaries with pg_basebackup and pg_ctl (pg_config --bindir): install postgresql-15"
    )
  })

  it.runIf(bindir !== undefined)(
    "synchronous replication: nothing lost, every item exactly once, workers back within a second",
    { timeout: 180_000 },
    async () => {
      const figures = await scenario("synchronous")
      expect(figures.itemsRunTwice).toBe(0)
      resumedInTime(figures)
    }
  )

  it.runIf(bindir !== undefined)(
    "asynchronous replication a second behind: what was lost runs again, counts exact, workers back within a second",
    { timeout: 180_000 },
    async () => {
      const figures = await scenario("asynchronous")
      resumedInTime(figures)
      // A long run's success was lost: its live owner let it go at once (within 2 s of the standby accepting
      // writes, checked in `scenario`), not when its lease expired.
      expect(figures.lostRunsLetGo).toBeGreaterThanOrEqual(1)
    }
  )
})

if (bindir === undefined && !required)
  console.warn(
    "failover.test.ts skipped: no PostgreSQL server binaries with pg_basebackup and pg_ctl (install postgresql-15; " +
      "KAIROS_REQUIRE_STANDBY=1 makes this a failure)"
  )
