/**
 * Transactional handlers on Postgres, in-process with the real clock (integration: a real Postgres): a handler's
 * writes to a table of the user's and kairos's record of its execution commit together or not at all — whether it
 * succeeds, throws, loses its lease, times out, or loses its connection; for queue items and scheduled jobs; with
 * an Effect handler (its `SqlClient` is the transaction) and a Promise one (`tx.query`).
 *
 * The stores run on a client whose own limits are tight (statements and idle time in a transaction: 1 s), to show
 * that a transactional handler runs under limits of its own, set from its timeout.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Layer } from "effect"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgSemaphore from "../../src/adapters/postgres/PgSemaphore.js"
import * as PgSettings from "../../src/adapters/postgres/PgSettings.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import * as PgWorkerRegistry from "../../src/adapters/postgres/PgWorkerRegistry.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { QueueStore, Runner, Schedule } from "../../src/index.js"
import type { ExecutionReport } from "../../src/runtime/Runner.js"
import { databaseUrl, TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"

/** What the runner reported of each execution (the CLI prints these lines). */
const reports: Array<ExecutionReport> = []

/** kairos's own client for the stores, its limits tight: a transactional handler must not be bound by them. */
const Tight = Layer.suspend(() =>
  PgKairos.clientLayer({
    url: databaseUrl(),
    maxConnections: 8,
    applicationName: "kairos-txtest",
    statementTimeout: "1 second",
    idleInTransactionTimeout: "1 second"
  })
)

const Stores = Layer.unwrapEffect(
  Effect.map(TestSchema, (schema) =>
    Layer.mergeAll(
      PgJobStore.layer({ schema }),
      PgQueueStore.layer({ schema }),
      PgSettings.layer({ schema }),
      PgSemaphore.layer({ schema }),
      PgWorkerRegistry.layer({ schema }),
      PgWakeUps.layer({ schema })
    ).pipe(Layer.provide(Tight))
  )
)

const Live = Runner.layer({
  workers: 6,
  interval: "200 millis",
  // Short enough that a long handler outlives it, long enough that a renewal slowed by a loaded machine (renewals
  // give up after a sixth of the lease) does not lose a lease this file expects kept.
  leaseDuration: "4 seconds",
  onExecution: (report) => void reports.push(report)
}).pipe(Layer.provideMerge(Stores), Layer.provideMerge(PgMigrated("txpg")))

/** The user's table, in the test's schema. */
const effects = Effect.map(TestSchema, (schema) => `"${schema}".effects`)

/** Polls `query` until `done` holds of its rows (at most twenty seconds), and returns them. */
const until = <A, R>(query: Effect.Effect<ReadonlyArray<A>, unknown, R>, done: (rows: ReadonlyArray<A>) => boolean) =>
  Effect.gen(function* () {
    let rows = yield* query
    for (let i = 0; i < 400 && !done(rows); i++) {
      yield* Effect.sleep("50 millis")
      rows = yield* query
    }
    return rows
  })

interface Processed {
  readonly queue_item_id: string
  readonly status: string
  readonly error_msg: string
}

/** The execution log of one task type, oldest first. */
const processedOf = (taskType: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* TestSchema
    return yield* sql<Processed>`
      SELECT queue_item_id::text AS queue_item_id, status, error_msg FROM ${sql(`${schema}.processed_items`)}
      WHERE task_type = ${taskType} ORDER BY id`
  })

/** The user's rows written by one task type's handler, oldest first. */
const effectsOf = (task: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const table = yield* effects
    return yield* sql<{ item: string; note: string }>`
      SELECT item, note FROM ${sql.literal(table)} WHERE task = ${task} ORDER BY id`
  })

const enqueue = (taskType: string, payload = "") =>
  Effect.flatMap(QueueStore, (queue) => queue.enqueue({ taskType, payload }, new Date()))

layer(Live, { timeout: "120 seconds", excludeTestServices: true })("transactional handlers on Postgres", (it) => {
  it.effect("setup: the user's table, and the runner started", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE ${sql.literal(yield* effects)} (id serial PRIMARY KEY, task text, item text, note text)`
      yield* (yield* Runner.Runner).start
      expect(yield* effectsOf("none")).toEqual([])
    })
  )

  it.effect("an Effect handler's writes (through its SqlClient) and its record commit together", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const table = yield* effects
      yield* runner.register(
        "fx-ok",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('fx-ok', ${job.id}, 'effect')`
          }),
        { transactional: true }
      )
      const items = yield* Effect.forEach([1, 2, 3, 4, 5], () => enqueue("fx-ok"))
      const done = yield* until(processedOf("fx-ok"), (rows) => rows.length >= 5)
      expect(done.map((r) => r.status)).toEqual(["ok", "ok", "ok", "ok", "ok"])
      const rows = yield* effectsOf("fx-ok")
      expect(rows.map((r) => r.item).sort()).toEqual(items.map((i) => i.id).sort())
      expect(reports.filter((r) => r.job.taskType === "fx-ok").map((r) => r.outcome)).toEqual([
        "ok",
        "ok",
        "ok",
        "ok",
        "ok"
      ])
    })
  )

  it.effect("a Promise handler's tx.query runs in the transaction: it reads its own writes, which commit with it", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const table = yield* effects
      const seen: Array<number> = []
      yield* runner.register(
        "tx-ok",
        async (job, tx) => {
          await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('tx-ok', $1, $2)`, [job.id, "promise"])
          const { rows } = await tx.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE item = $1`, [
            job.id
          ])
          seen.push(rows[0]!.n)
          return { aborted: tx.signal.aborted }
        },
        { transactional: true }
      )
      const item = yield* enqueue("tx-ok")
      const done = yield* until(processedOf("tx-ok"), (rows) => rows.length >= 1)
      expect(done.map((r) => [r.queue_item_id, r.status])).toEqual([[item.id, "ok"]])
      expect(seen).toEqual([1])
      expect((yield* effectsOf("tx-ok")).map((r) => [r.item, r.note])).toEqual([[item.id, "promise"]])
    })
  )

  it.effect("a handler that throws: its writes roll back; the failure is recorded and retried per its policy", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const table = yield* effects
      yield* runner.register(
        "tx-flaky",
        async (job, tx) => {
          await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('tx-flaky', $1, $2)`, [
            job.id,
            `attempt ${job.attempt}`
          ])
          if (job.attempt < 3) throw new Error(`no luck on attempt ${job.attempt}`)
        },
        { transactional: true, retry: { attempts: 3, backoff: "100 millis" } }
      )
      const item = yield* enqueue("tx-flaky")
      const done = yield* until(processedOf("tx-flaky"), (rows) => rows.some((r) => r.status === "ok"))
      expect(done.map((r) => [r.status, r.error_msg])).toEqual([
        ["error", "no luck on attempt 1"],
        ["error", "no luck on attempt 2"],
        ["ok", ""]
      ])
      // Only the successful attempt's write is there.
      expect((yield* effectsOf("tx-flaky")).map((r) => [r.item, r.note])).toEqual([[item.id, "attempt 3"]])
    })
  )

  it.effect("a lease taken over while the handler runs: its writes vanish with the refused record", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      const table = yield* effects
      const wrote = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      yield* runner.register(
        "tx-lost",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('tx-lost', ${job.id}, 'lost')`
            yield* Deferred.succeed(wrote, undefined)
            yield* Deferred.await(release)
          }),
        { transactional: true }
      )
      const item = yield* enqueue("tx-lost")
      yield* Deferred.await(wrote)
      // Another instance took the execution over: the item's lease is someone else's now.
      const [taken] = yield* sql<{ n: number }>`
        WITH u AS (UPDATE ${sql(`${schema}.queue_items`)} SET lease_token = 'taken-over', lease_owner = 'other'
          WHERE id = ${item.id}::bigint AND lease_token IS NOT NULL RETURNING 1)
        SELECT count(*)::int AS n FROM u`
      expect(taken!.n).toBe(1)
      yield* Deferred.succeed(release, undefined)
      yield* until(
        Effect.sync(() => reports.filter((r) => r.job.taskType === "tx-lost")),
        (rows) => rows.length >= 1
      )
      expect(reports.filter((r) => r.job.taskType === "tx-lost").map((r) => r.outcome)).toEqual(["lost"])
      expect(yield* effectsOf("tx-lost")).toEqual([])
      expect(yield* processedOf("tx-lost")).toEqual([])
      // The item is the other owner's, untouched.
      const [row] = yield* sql<{ lease_token: string; status: string }>`
        SELECT lease_token, status FROM ${sql(`${schema}.queue_items`)} WHERE id = ${item.id}::bigint`
      expect(row).toEqual({ lease_token: "taken-over", status: "processing" })
      yield* sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE id = ${item.id}::bigint`
    })
  )

  it.effect("a lease found lost by the lease keeper interrupts the handler and rolls its transaction back", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      const table = yield* effects
      const wrote = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      yield* runner.register(
        "tx-renewal-lost",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('tx-renewal-lost', ${job.id}, 'x')`
            yield* Deferred.succeed(wrote, undefined)
            yield* Effect.sleep("30 seconds")
          }).pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))),
        { transactional: true }
      )
      const item = yield* enqueue("tx-renewal-lost")
      yield* Deferred.await(wrote)
      yield* sql`UPDATE ${sql(`${schema}.queue_items`)} SET lease_token = 'taken-over', lease_owner = 'other'
        WHERE id = ${item.id}::bigint`
      // The next renewal (every third of the 4 s lease) finds the lease gone and aborts the handler.
      yield* Deferred.await(interrupted).pipe(Effect.timeout("10 seconds"))
      yield* until(
        Effect.sync(() => reports.filter((r) => r.job.taskType === "tx-renewal-lost")),
        (rows) => rows.length >= 1
      )
      expect(reports.filter((r) => r.job.taskType === "tx-renewal-lost").map((r) => r.outcome)).toEqual(["lost"])
      expect(yield* effectsOf("tx-renewal-lost")).toEqual([])
      expect(yield* processedOf("tx-renewal-lost")).toEqual([])
      yield* sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE id = ${item.id}::bigint`
    })
  )

  it.effect("a timeout cancels the statement in flight and rolls back; the failure is recorded", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const runner = yield* Runner.Runner
      const table = yield* effects
      // The sleeps name this file's schema: another run's on the same server (a second copy of this file) is not ours.
      const marker = `${yield* TestSchema}:slow-marker`
      yield* runner.register(
        "fx-slow",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('fx-slow', ${job.id}, 'slow')`
            yield* sql`SELECT pg_sleep(30), ${sql.literal(`'fx-${marker}'`)}`
          }),
        { transactional: true, timeout: "1 second" }
      )
      yield* runner.register(
        "tx-slow",
        async (job, tx) => {
          await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('tx-slow', $1, 'slow')`, [job.id])
          await tx.query(`SELECT pg_sleep(30), 'tx-${marker}'`)
        },
        { transactional: true, timeout: "1 second" }
      )
      const started = Date.now()
      yield* enqueue("fx-slow")
      yield* enqueue("tx-slow")
      const fx = yield* until(processedOf("fx-slow"), (rows) => rows.length >= 1)
      const tx = yield* until(processedOf("tx-slow"), (rows) => rows.length >= 1)
      expect(fx.map((r) => [r.status, r.error_msg])).toEqual([
        ["error", "timed out after 1s: the handler was interrupted"]
      ])
      expect(tx.map((r) => [r.status, r.error_msg])).toEqual([
        ["error", "timed out after 1s: the handler was interrupted"]
      ])
      // Recorded well before the 30 s sleeps would have ended: the statements were cancelled, not waited for.
      expect(Date.now() - started).toBeLessThan(20_000)
      expect(yield* effectsOf("fx-slow")).toEqual([])
      expect(yield* effectsOf("tx-slow")).toEqual([])
      const sleeping = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE ${`%-${marker}%`} AND pid <> pg_backend_pid()`
      expect(sleeping[0]!.n).toBe(0)
    })
  )

  it.effect("a long handler keeps its lease, idle in its transaction past the client's own limits", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const table = yield* effects
      yield* runner.register(
        "fx-long",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('fx-long', ${job.id}, 'long')`
            // Idle in the transaction for longer than the lease (4 s) and the client's idle limit (1 s)...
            yield* Effect.sleep("4500 millis")
            // ...and a statement longer than the client's statement timeout (1 s).
            yield* sql`SELECT pg_sleep(1.5)`
          }),
        { transactional: true, timeout: "20 seconds" }
      )
      const item = yield* enqueue("fx-long")
      const done = yield* until(processedOf("fx-long"), (rows) => rows.length >= 1)
      expect(done.map((r) => [r.queue_item_id, r.status, r.error_msg])).toEqual([[item.id, "ok", ""]])
      expect((yield* effectsOf("fx-long")).map((r) => r.item)).toEqual([item.id])
      expect(reports.filter((r) => r.job.taskType === "fx-long").map((r) => r.outcome)).toEqual(["ok"])
    })
  )

  it.effect("a connection killed under the handler: its write is gone, the failure recorded, the retry commits", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const runner = yield* Runner.Runner
      const table = yield* effects
      const pids: Array<number> = []
      const wrote = yield* Deferred.make<void>()
      const killed = yield* Deferred.make<void>()
      yield* runner.register(
        "tx-killed",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note)
              VALUES ('tx-killed', ${job.id}, ${`attempt ${job.attempt}`})`
            if (job.attempt === 1) {
              const [row] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
              pids.push(row!.pid)
              yield* Deferred.succeed(wrote, undefined)
              yield* Deferred.await(killed)
              yield* sql`SELECT 1`
            }
          }),
        { transactional: true, retry: { attempts: 2, backoff: "100 millis" } }
      )
      const item = yield* enqueue("tx-killed")
      yield* Deferred.await(wrote)
      yield* sql`SELECT pg_terminate_backend(${pids[0]!})`
      yield* Effect.sleep("100 millis")
      yield* Deferred.succeed(killed, undefined)
      const done = yield* until(processedOf("tx-killed"), (rows) => rows.some((r) => r.status === "ok"))
      expect(done.map((r) => r.status)).toEqual(["error", "ok"])
      expect((yield* effectsOf("tx-killed")).map((r) => [r.item, r.note])).toEqual([[item.id, "attempt 2"]])
    })
  )

  it.effect("an item enqueued by the handler (kairos's QueueStore) commits with it, or vanishes with it", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      yield* runner.register("tx-child", () => undefined)
      yield* runner.register(
        "tx-parent",
        (job) =>
          Effect.gen(function* () {
            yield* enqueue("tx-child", `from attempt ${job.attempt}`)
            if (job.attempt === 1) return yield* Effect.fail("first attempt fails")
          }),
        { transactional: true, retry: { attempts: 2, backoff: "100 millis" } }
      )
      yield* enqueue("tx-parent")
      const parents = yield* until(processedOf("tx-parent"), (rows) => rows.some((r) => r.status === "ok"))
      expect(parents.map((r) => r.status)).toEqual(["error", "ok"])
      const children = yield* until(processedOf("tx-child"), (rows) => rows.length >= 1)
      yield* Effect.sleep("500 millis")
      expect((yield* processedOf("tx-child")).length).toBe(1)
      expect(children.map((r) => r.status)).toEqual(["ok"])
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const [child] = yield* sql<{ payload: string }>`
        SELECT payload FROM ${sql(`${schema}.processed_items`)} WHERE task_type = 'tx-child'`
      expect(child!.payload).toBe("from attempt 2")
    })
  )

  it.effect(
    "a failed statement aborts the transaction: caught and ignored, the record fails; in a savepoint, it does not",
    () =>
      Effect.gen(function* () {
        const runner = yield* Runner.Runner
        const table = yield* effects
        const insert = (task: string, item: string, note: string) =>
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) => sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES (${task}, ${item}, ${note})`
          )
        // A statement that fails: a division by zero.
        const failing = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1 / 0`)
        yield* runner.register(
          "fx-swallowed",
          (job) =>
            Effect.gen(function* () {
              yield* insert("fx-swallowed", job.id, "before")
              yield* Effect.ignore(failing)
            }),
          { transactional: true }
        )
        yield* runner.register(
          "fx-savepoint",
          (job) =>
            Effect.gen(function* () {
              const sql = yield* SqlClient.SqlClient
              yield* insert("fx-savepoint", job.id, "before")
              // A nested transaction is a savepoint: its failure rolls back to it, and the transaction goes on.
              yield* Effect.ignore(
                sql.withTransaction(Effect.zipRight(insert("fx-savepoint", job.id, "inside"), failing))
              )
              yield* insert("fx-savepoint", job.id, "after")
            }),
          { transactional: true }
        )
        yield* runner.register(
          "tx-savepoint",
          async (job, tx) => {
            await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('tx-savepoint', $1, 'before')`, [job.id])
            await tx.query("SAVEPOINT s")
            await tx.query("SELECT 1 / 0").catch(() => tx.query("ROLLBACK TO SAVEPOINT s"))
            await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('tx-savepoint', $1, 'after')`, [job.id])
          },
          { transactional: true }
        )
        for (const type of ["fx-swallowed", "fx-savepoint", "tx-savepoint"]) yield* enqueue(type)
        const swallowed = yield* until(processedOf("fx-swallowed"), (rows) => rows.length >= 1)
        expect(swallowed.map((r) => r.status)).toEqual(["error"])
        expect(swallowed[0]!.error_msg).toMatch(/^the handler's transaction failed: current transaction is aborted/)
        expect(yield* effectsOf("fx-swallowed")).toEqual([])
        for (const type of ["fx-savepoint", "tx-savepoint"]) {
          expect((yield* until(processedOf(type), (rows) => rows.length >= 1)).map((r) => r.status)).toEqual(["ok"])
          expect((yield* effectsOf(type)).map((r) => r.note)).toEqual(["before", "after"])
        }
      })
  )

  it.effect("scheduled jobs: a run's writes and its success commit together; a failed run's writes roll back", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      const table = yield* effects
      yield* runner.register(
        "job-tx",
        async (job, tx) => {
          await tx.query(`INSERT INTO ${table} (task, item, note) VALUES ('job-tx', $1, $2)`, [job.name, "run"])
          return { slot: job.scheduledFor.toISOString() }
        },
        { transactional: true }
      )
      yield* runner.register(
        "job-tx-fails",
        (job) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`INSERT INTO ${sql.literal(table)} (task, item, note) VALUES ('job-tx-fails', ${job.name}, 'run')`
            return yield* Effect.fail(new Error("the job failed"))
          }),
        { transactional: true }
      )
      const past = new Date(Date.now() - 1000)
      yield* sql`INSERT INTO ${sql(`${schema}.scheduled_jobs`)} (name, task_type, schedule, next_run_at) VALUES
        ('tx-job', 'job-tx', ${Schedule.encodeJson(Schedule.interval({ every: "1 hour" }))}::jsonb, ${past}),
        ('tx-job-fails', 'job-tx-fails', ${Schedule.encodeJson(Schedule.interval({ every: "1 hour" }))}::jsonb, ${past})`
      yield* runner.wake
      const runs = yield* until(
        sql<{ name: string; status: string; output: unknown; error: string | null }>`
          SELECT j.name, r.status, r.output, r.error FROM ${sql(`${schema}.job_runs`)} r
          JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id
          WHERE j.name LIKE 'tx-job%' AND r.attempt = 1 ORDER BY j.name`,
        (rows) => rows.length === 2 && rows.every((r) => r.status !== "running")
      )
      expect(runs.map((r) => [r.name, r.status])).toEqual([
        ["tx-job", "success"],
        ["tx-job-fails", "failed"]
      ])
      expect(runs[0]!.output).toMatchObject({ slot: expect.any(String) })
      expect(runs[1]!.error).toBe("the job failed")
      expect((yield* effectsOf("job-tx")).map((r) => r.item)).toEqual(["tx-job"])
      expect(yield* effectsOf("job-tx-fails")).toEqual([])
    })
  )
})

/** A pool of three connections: transactional executions may hold one of them, the other two are the runner's. */
const SmallPool = Layer.suspend(() =>
  PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 3, applicationName: "kairos-txtest-small" })
)

const smallReports: Array<ExecutionReport> = []

const SmallLive = Runner.layer({
  workers: 4,
  interval: "200 millis",
  leaseDuration: "2 seconds",
  onExecution: (report) => void smallReports.push(report)
}).pipe(
  Layer.provideMerge(
    Layer.unwrapEffect(
      Effect.map(TestSchema, (schema) =>
        Layer.mergeAll(
          PgJobStore.layer({ schema }),
          PgQueueStore.layer({ schema }),
          PgSettings.layer({ schema }),
          PgWorkerRegistry.layer({ schema }),
          PgWakeUps.layer({ schema })
        ).pipe(Layer.provide(SmallPool))
      )
    )
  ),
  Layer.provideMerge(PgMigrated("txsmall"))
)

layer(SmallLive, { timeout: "60 seconds", excludeTestServices: true })(
  "transactional handlers on a small pool",
  (it) => {
    it.effect("they hold all but two of the pool's connections: the leases of long ones are still renewed", () =>
      Effect.gen(function* () {
        const runner = yield* Runner.Runner
        let running = 0
        let most = 0
        yield* runner.register(
          "fx-hold",
          () =>
            Effect.gen(function* () {
              const sql = yield* SqlClient.SqlClient
              yield* sql`SELECT 1`
              most = Math.max(most, ++running)
              // Longer than the lease (2 s): renewed meanwhile, on the connections left.
              yield* Effect.sleep("2500 millis")
              running--
            }),
          { transactional: true }
        )
        yield* runner.start
        // Concurrent items (thread 1): nothing but the pool keeps them from running side by side.
        yield* Effect.forEach([1, 2, 3], () =>
          Effect.flatMap(QueueStore, (queue) =>
            queue.enqueue({ taskType: "fx-hold", payload: "", thread: 1 }, new Date())
          )
        )
        const done = yield* until(processedOf("fx-hold"), (rows) => rows.length >= 3)
        expect(done.map((r) => r.status)).toEqual(["ok", "ok", "ok"])
        // A transactional execution is reported after its commit, which the row above may show first.
        const reports = yield* until(
          Effect.sync(() => smallReports),
          (r) => r.length >= 3
        )
        expect(reports.map((r) => r.outcome)).toEqual(["ok", "ok", "ok"])
        // One at a time: the pool's three connections less the two left to the runner.
        expect(most).toBe(1)
      })
    )
  }
)
