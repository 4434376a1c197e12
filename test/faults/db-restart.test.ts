/**
 * The database restarts mid-drain: the postmaster of a Postgres of this test's own is killed with SIGKILL while
 * three workers run a mixed load (interval jobs, sequential and concurrent items, some run three times), and comes
 * back on the same data and port five seconds later. The workers say so in a bounded number of lines, reconnect by
 * themselves and finish everything; the invariants hold; they stop with exit code 0.
 * Integration: a real embedded Postgres, real worker processes and signals, the real clock.
 */
import { Effect, Redacted } from "effect"
import { PgClient } from "@effect/sql-pg"
import fs from "node:fs/promises"
import path from "node:path"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { type EmbeddedServer, postmasterPid, startEmbedded } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { Schedule } from "../../src/index.js"
import { uniqueSchemaName } from "../support/database.js"
import { serverTempDir } from "../support/process.js"
import { killAll, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"
import { assertInvariants, type Enqueued } from "./invariants.js"

const cleanups: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const f of cleanups.reverse()) await f().catch(() => undefined)
})

/** A migrated schema on `url`, through a pool that survives the server going away (its idle clients then error). */
const schemaOn = async (url: string): Promise<TestDb> => {
  const schema = uniqueSchemaName("dbrestart")
  await Effect.runPromise(
    migrate({ schema }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
  )
  const pool = new pg.Pool({ connectionString: url, max: 2 })
  pool.on("error", () => undefined)
  return {
    schema,
    url,
    query: async <R>(text: string, values?: ReadonlyArray<unknown>) =>
      (await pool.query(text.replaceAll("$schema", `"${schema}"`), values as Array<unknown>)).rows as Array<R>,
    close: () => pool.end()
  }
}

/** Retries a query while the server is away. */
const eventually = async <A>(f: () => Promise<A>): Promise<A> => {
  for (let i = 0; ; i++) {
    try {
      return await f()
    } catch (e) {
      if (i >= 100) throw e
      await sleep(200)
    }
  }
}

describe("the database restarts", () => {
  it(
    "postmaster killed mid-drain and back after 5 s: three workers log it briefly, reconnect and finish everything",
    { timeout: 120_000 },
    async () => {
      // A persistent cluster (durable settings), so a restart on the same folder finds the data as it was.
      const base = await serverTempDir("kairos-dbrestart-")
      const dataDir = path.join(base, "data")
      cleanups.push(() => fs.rm(base, { recursive: true, force: true }))
      let server: EmbeddedServer = await startEmbedded({ dataDir, persistent: true })
      cleanups.push(() => server.stop())
      const db = await schemaOn(server.url)
      cleanups.push(() => db.close())

      // Interval jobs every 1 and 2 seconds from two seconds on; they stop when disabled at the end.
      const every = (ms: number) => Schedule.encodeJson(Schedule.interval({ every: ms }))
      await db.query(
        `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule, next_run_at)
         SELECT 'every-1s-' || i, 'noop', $1::jsonb, now() + interval '2 seconds' FROM generate_series(1, 3) i
         UNION ALL
         SELECT 'every-2s-' || i, 'noop', $2::jsonb, now() + interval '2 seconds' FROM generate_series(1, 3) i`,
        [every(1000), every(2000)]
      )
      const config = { workers: 8, batchSize: 20, interval: "1 second", leaseDuration: "4 seconds" }
      const workers: Array<Worker> = [0, 1, 2].map(() => startWorker(db, { config }))
      cleanups.push(async () => killAll(workers))
      await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready")))

      // About ten seconds of work for the three: 60 sequential items of 100 ms, 300 concurrent ones of 200 ms, a
      // third of each kind run three times.
      const enqueued = await db.query<Enqueued>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread, max_runs)
         SELECT 'sleepy', '100', 0, CASE WHEN g % 3 = 0 THEN 3 ELSE 1 END FROM generate_series(1, 40) g
         UNION ALL
         SELECT 'sleepy', '200', 1, CASE WHEN g % 3 = 0 THEN 3 ELSE 1 END FROM generate_series(1, 300) g
         RETURNING id::text AS id, max_runs, thread`
      )
      const count = (sql: string) => db.query<{ n: number }>(sql).then((rows) => rows[0]!.n)
      await until(
        async () => (await count(`SELECT count(*)::int AS n FROM $schema.processed_items`)) >= 60,
        30_000,
        "the drain to be under way"
      )

      // kill -9 the postmaster: its backends die with it, the workers' connections break mid-statement.
      const pid = await postmasterPid(dataDir)
      expect(pid).toBeDefined()
      const logsBefore = workers.map((w) => w.events.filter((e) => e.event === "log").length)
      const killedAt = Date.now()
      process.kill(pid!, "SIGKILL")
      await until(async () => (await postmasterPid(dataDir)) === undefined, 10_000, "the postmaster to be gone")
      await sleep(5000 - (Date.now() - killedAt))
      // No worker gave up.
      for (const w of workers) expect(w.child.exitCode).toBeNull()
      server = await startEmbedded({ dataDir, persistent: true, port: server.port })
      const restartedAt = Date.now()

      await eventually(() =>
        until(
          async () => (await count(`SELECT count(*)::int AS n FROM $schema.queue_items`)) === 0,
          60_000,
          "the queue to drain after the restart"
        )
      )
      // Scheduled work resumed too: every job ran a slot after the restart.
      await until(
        async () =>
          (await count(
            `SELECT count(DISTINCT job_id)::int AS n FROM $schema.job_runs
             WHERE status = 'success' AND started_at > to_timestamp(${restartedAt / 1000})`
          )) === 6,
        20_000,
        "every job to run again"
      )
      // Every worker reconnects and takes work after the restart. A worker backing off resumes when its listener
      // reconnects (it tries every second), by which time the other two may have drained the queue: the jobs, still
      // firing every second or two, leave it work to take until then.
      const tookWork = (w: Worker) => w.events.some((e) => e.event === "start" && Number(e.at) > restartedAt)
      await until(async () => workers.every(tookWork), 20_000, "every worker to take work after the restart")
      await db.query(`UPDATE $schema.scheduled_jobs SET enabled = false`)
      await until(
        async () => (await count(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'running'`)) === 0,
        20_000,
        "running slots to finish"
      )
      const stats = await assertInvariants(db, { enqueued, drained: true, leaseSlackMs: 3000 })
      expect(stats.processed).toBe(40 + 300 + 2 * (13 + 100))

      expect(workers.map(tookWork)).toEqual([true, true, true])
      // The outage was logged, in a bounded number of lines: not one per item or per retry of each statement.
      const outageLogs = workers.map((w, i) =>
        w.events
          .filter((e) => e.event === "log")
          .slice(logsBefore[i])
          .map((e) => `+${Number(e.at) - killedAt}ms ${String(e.message).slice(0, 120)}`)
      )
      const shown = JSON.stringify(outageLogs, null, 1)
      for (const logs of outageLogs) expect(logs.length).toBeGreaterThan(0)
      expect(Math.max(...outageLogs.map((l) => l.length)), shown).toBeLessThanOrEqual(40)

      const exits = await Promise.all(workers.map((w) => w.stop()))
      expect(exits.map((e) => e.code)).toEqual([0, 0, 0])
      await assertInvariants(db, { enqueued, drained: true })
      // Failed ticks back off (1 s, 2 s, 4 s...): over a five-to-seven-second outage, a handful, however many handlers
      // finish meanwhile (each finished handler wakes the loop; a wake-up must not cut a failure's backoff short, only
      // the database coming back does).
      const failedTicks = outageLogs.map((l) => l.filter((m) => / tick failed/.test(m)).length)
      expect(Math.max(...failedTicks), shown).toBeLessThanOrEqual(5)
    }
  )
})
