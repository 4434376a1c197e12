/**
 * Handlers that return a `Result` on the Postgres stores, in-process with the real clock: a returned
 * `Result.failure(…)` is recorded as a failure with its message (an `error` row, a `failed` run) and retried as a
 * throw would be; a returned `Result.success(x)` records `x`.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import { type HandlerOptions, QueueStore, Result, Runner, Schedule } from "../../src/index.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

const Live = Runner.layer({ workers: 4, interval: "1 second", retryAttempts: 1, retryBackoff: "200 millis" }).pipe(
  Layer.provideMerge(Layer.unwrapEffect(Effect.map(TestSchema, (schema) => PgQueueStore.layer({ schema })))),
  Layer.provideMerge(PgStores("returnedresult"))
)

const KINDS = ["plain", "async", "effect"] as const

/** Registers, under `prefix`, a plain, an async and an Effect handler returning a failed Result, and one succeeding. */
const registerAll = (prefix: string, retry?: HandlerOptions["retry"]) =>
  Effect.gen(function* () {
    const runner = yield* Runner.Runner
    const options: HandlerOptions = { retry }
    yield* runner.register(`${prefix}plain`, (job) => Result.failure(new Error(`plain no ${job.attempt}`)), options)
    yield* runner.register(`${prefix}async`, async (job) => Result.failure(`async no ${job.attempt}`), options)
    yield* runner.register(
      `${prefix}effect`,
      (job) => Effect.succeed(Result.failure({ reason: "bad" }, `effect no ${job.attempt}`)),
      options
    )
    yield* runner.register(`${prefix}fine`, () => Effect.succeed(Result.success({ a: 1 })), options)
  })

/** Polls `query` until `done` holds of its rows (at most ten seconds), and returns them. */
const until = <A>(query: Effect.Effect<ReadonlyArray<A>, unknown>, done: (rows: ReadonlyArray<A>) => boolean) =>
  Effect.gen(function* () {
    let rows = yield* query
    for (let i = 0; i < 200 && !done(rows); i++) {
      yield* Effect.sleep("50 millis")
      rows = yield* query
    }
    return rows
  })

/**
 * What a runner that seems stuck holds (its counts and running executions), what the schema's connections are doing
 * in Postgres, and what one explicit tick does within 5 s: for a failure's message.
 */
const runnerState = (runner: Runner.Runner["Type"], schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const stats = yield* runner.stats
    const running = yield* runner.running
    const activity = yield* sql`
      SELECT pid, state, wait_event_type, wait_event, now() - xact_start AS in_transaction, left(query, 100) AS query
      FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND query LIKE ${`%${schema}%`}`
    const tick = yield* runner.tick.pipe(
      Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "no answer in 5 s" }),
      Effect.either
    )
    return { stats, running, activity, tick }
  }).pipe(Effect.catchAllCause((cause) => Effect.succeed({ failed: String(cause) })))

layer(Live, { timeout: "60 seconds", excludeTestServices: true })("handlers returning a Result, on Postgres", (it) => {
  it.effect("queue items: an error row with the Result's message, retried by the task type's policy", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      yield* registerAll("q-", { attempts: 2, backoff: "100 millis" })
      yield* runner.start
      for (const kind of [...KINDS, "fine"]) yield* queue.enqueue({ taskType: `q-${kind}`, payload: kind }, new Date())
      const rows = yield* until(
        sql<{ task_type: string; status: string; error_msg: string }>`
          SELECT task_type, status, error_msg FROM ${sql(`${schema}.processed_items`)}
          WHERE task_type LIKE 'q-%' ORDER BY task_type, id`,
        (rows) => rows.length >= 7
      )
      expect(rows.map((r) => [r.task_type, r.status, r.error_msg])).toEqual([
        ["q-async", "error", "async no 1"],
        ["q-async", "error", "async no 2"],
        ["q-effect", "error", "effect no 1"],
        ["q-effect", "error", "effect no 2"],
        ["q-fine", "ok", ""],
        ["q-plain", "error", "plain no 1"],
        ["q-plain", "error", "plain no 2"]
      ])
      // Both attempts spent: given up, nothing left queued.
      const left = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_items`)} WHERE task_type LIKE 'q-%'`
      expect(left[0]!.n).toBe(0)
    })
  )

  it.effect("scheduled jobs: a failed run with the Result's message, retried; a success records its output", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      yield* registerAll("s-")
      const past = new Date(Date.now() - 1000)
      const schedule = Schedule.encodeJson(Schedule.interval({ every: "1 hour" }))
      for (const kind of [...KINDS, "fine"]) {
        yield* sql`INSERT INTO ${sql(`${schema}.scheduled_jobs`)} (name, task_type, schedule, next_run_at)
          VALUES (${`s-${kind}`}, ${`s-${kind}`}, ${schedule}::jsonb, ${past})`
      }
      yield* runner.start
      const runs = yield* until(
        sql<{ name: string; attempt: number; status: string; error: string | null; output: unknown }>`
          SELECT j.name, r.attempt, r.status, r.error, r.output
          FROM ${sql(`${schema}.job_runs`)} r JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id
          WHERE j.name LIKE 's-%' AND r.status IN ('success', 'failed') ORDER BY j.name, r.attempt`,
        (rows) => rows.length >= 7
      )
      // Every run as it stands, with the database's time: said when the retries do not come. They did not, now and
      // then on a loaded machine (due 0.2 s after the first attempts, not started 10 s later): the runner had looked
      // at the job tables while the failures were being written, and put its next look off until the other runs'
      // leases expired, 30 s on. Fixed in ScheduledSource (`changes`); Runner.failures.test replays it on the fake clock.
      const all = yield* sql`
        SELECT j.name, r.attempt, r.status, r.due_at, r.started_at, r.finished_at, r.owner, r.lease_until,
               clock_timestamp() AS db_now
        FROM ${sql(`${schema}.job_runs`)} r JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id
        WHERE j.name LIKE 's-%' ORDER BY j.name, r.attempt`
      // And what the runner holds, what its connections wait on, and what one more tick does.
      const state = runs.length < 7 ? yield* runnerState(runner, schema) : {}
      // retryAttempts 1: each failing slot runs twice.
      expect(
        runs.map((r) => [r.name, r.attempt, r.status, r.error]),
        JSON.stringify({ runs: all, runner: state })
      ).toEqual([
        ["s-async", 1, "failed", "async no 1"],
        ["s-async", 2, "failed", "async no 2"],
        ["s-effect", 1, "failed", "effect no 1"],
        ["s-effect", 2, "failed", "effect no 2"],
        ["s-fine", 1, "success", null],
        ["s-plain", 1, "failed", "plain no 1"],
        ["s-plain", 2, "failed", "plain no 2"]
      ])
      expect(runs.find((r) => r.name === "s-fine")!.output).toEqual({ a: 1 })
    })
  )
})
