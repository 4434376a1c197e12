/**
 * PgInspect, the CLI's read models, against a migrated schema: rows written by plain SQL (as any program may write
 * them) come back decoded, and a stored value kairos cannot use is described rather than failing the read.
 * Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as PgInspect from "../../src/adapters/postgres/PgInspect.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"

/** The inspector, the client and a table-name helper, on emptied tables. */
const setup = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const schema = yield* TestSchema
  const t = (name: string) => sql(`${schema}.${name}`)
  yield* sql`TRUNCATE ${t("queue_items")}, ${t("queue_leases")}, ${t("processed_items")}, ${t("job_runs")},
                     ${t("scheduled_jobs")}, ${t("scheduler_workers")}`
  // One live worker handling `a` and `report`; one whose heartbeat was recent but whose `live_until` has passed.
  yield* sql`INSERT INTO ${t("scheduler_workers")} (id, task_types, heartbeat_at, live_until) VALUES
               ('w-live', '{a,report}', now(), now() + interval '1 minute'),
               ('w-gone', '{b,cleanup}', now(), now() - interval '1 second')`
  const inspect = yield* PgInspect.make({ schema })
  return { sql, schema, t, inspect }
})

layer(PgMigrated("inspect"), { timeout: "60 seconds", excludeTestServices: true })("PgInspect", (it) => {
  it.effect("queue: claim order, runs left, handled only when a live worker lists the task type", () =>
    Effect.gen(function* () {
      const { sql, t, inspect } = yield* setup
      yield* sql`INSERT INTO ${t("queue_items")} (task_type, payload, priority, max_runs, thread, run_after, unique_key)
                 VALUES ('a', NULL, 0, -1, 1, NULL, NULL), ('b', 'x', 5, 3, 0, '2030-01-01T00:00:00Z', 'b-key'),
                        ('nobody', '', 0, 1, 0, NULL, NULL)`
      // One of b's three runs done, and its next run failed once (retried under its own policy).
      yield* sql`UPDATE ${t("queue_items")} SET runs_done = 2, max_runs = 2, failures = 1, retry_attempts = 3
                 WHERE task_type = 'b'`
      const items = yield* inspect.queue()
      expect(items.map(({ createdAt: _, id: __, ...rest }) => rest)).toEqual([
        {
          taskType: "b",
          status: "pending",
          priority: 5,
          runsLeft: 2,
          thread: 0,
          runAfter: new Date("2030-01-01T00:00:00Z"),
          uniqueKey: "b-key",
          failures: 1,
          retryAttempts: 3,
          handled: false
        },
        {
          taskType: "a",
          status: "pending",
          priority: 0,
          runsLeft: -1,
          thread: 1,
          runAfter: null,
          uniqueKey: null,
          failures: 0,
          retryAttempts: null,
          handled: true
        },
        {
          taskType: "nobody",
          status: "pending",
          priority: 0,
          runsLeft: 1,
          thread: 0,
          runAfter: null,
          uniqueKey: null,
          failures: 0,
          retryAttempts: null,
          handled: false
        }
      ])
      expect(items.every((item) => item.createdAt instanceof Date && /^\d+$/.test(item.id))).toBe(true)
    })
  )

  it.effect("processed: newest first by numeric id (10 before 9), a NULL payload read as null", () =>
    Effect.gen(function* () {
      const { sql, schema, t, inspect } = yield* setup
      // Ids 95..104 cross a digit boundary: ordering by the text of the id would put 99 first.
      yield* sql`SELECT setval(pg_get_serial_sequence(${`${schema}.processed_items`}, 'id'), 94)`
      yield* sql`
        INSERT INTO ${t("processed_items")}
          (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
        SELECT i, 'send', CASE WHEN i % 2 = 0 THEN NULL ELSE 'p' || i END, CASE WHEN i = 10 THEN 'error' ELSE 'ok' END,
               CASE WHEN i = 10 THEN 'boom' ELSE '' END, now(), now(), i
        FROM generate_series(1, 10) i`
      const recent = yield* inspect.processed(3)
      expect(recent.map((p) => p.id)).toEqual(["104", "103", "102"])
      expect(recent[0]).toMatchObject({
        queueItemId: "10",
        taskType: "send",
        payload: null,
        status: "error",
        errorMsg: "boom",
        durationMs: 10
      })
      expect(recent[1]).toMatchObject({ queueItemId: "9", payload: "p9", status: "ok", errorMsg: "" })
      expect(recent[0]!.startedAt).toBeInstanceOf(Date)
      expect((yield* inspect.processed(100)).length).toBe(10)
      expect(yield* inspect.processed(-5)).toEqual([])
    })
  )

  it.effect("jobs: by name, a schedule that does not decode listed as invalid, handled by live workers only", () =>
    Effect.gen(function* () {
      const { sql, t, inspect } = yield* setup
      yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule, enabled, next_run_at) VALUES
        ('a-valid', 'report', '{"_tag":"Interval","everyMillis":300000}', true, '2030-01-01T00:00:00Z'),
        ('b-unknown-tag', 'cleanup', '{"_tag":"Hourly","minute":5}', true, NULL),
        ('c-not-an-object', 'nobody', '42', false, NULL)`
      const jobs = yield* inspect.jobs()
      expect(jobs.map(({ id: _, ...rest }) => rest)).toEqual([
        {
          name: "a-valid",
          taskType: "report",
          schedule: {
            _tag: "Valid",
            stored: { _tag: "Interval", everyMillis: 300000 },
            schedule: { _tag: "Interval", everyMillis: 300000 }
          },
          enabled: true,
          nextRunAt: new Date("2030-01-01T00:00:00Z"),
          handled: true
        },
        {
          name: "b-unknown-tag",
          taskType: "cleanup",
          schedule: { _tag: "Invalid", stored: { _tag: "Hourly", minute: 5 }, reason: expect.any(String) },
          enabled: true,
          nextRunAt: null,
          // Its only worker's live_until has passed.
          handled: false
        },
        {
          name: "c-not-an-object",
          taskType: "nobody",
          schedule: { _tag: "Invalid", stored: 42, reason: expect.any(String) },
          enabled: false,
          nextRunAt: null,
          handled: false
        }
      ])
    })
  )

  it.effect("runs: newest first by numeric id, with the job's name", () =>
    Effect.gen(function* () {
      const { sql, schema, t, inspect } = yield* setup
      yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule)
                 VALUES ('nightly', 'cleanup', '{"_tag":"Daily","hour":3,"minute":0}')`
      yield* sql`SELECT setval(pg_get_serial_sequence(${`${schema}.job_runs`}, 'id'), 8)`
      yield* sql`
        INSERT INTO ${t("job_runs")} (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
        SELECT (SELECT id FROM ${t("scheduled_jobs")} WHERE name = 'nightly'),
               '2030-01-01T03:00:00Z'::timestamptz + (i || ' days')::interval, 1,
               CASE WHEN i = 3 THEN 'failed' ELSE 'success' END, now(), now(), CASE WHEN i = 3 THEN 'boom' END
        FROM generate_series(1, 3) i`
      const runs = yield* inspect.runs(2)
      expect(runs.map(({ startedAt: _, finishedAt: __, ...rest }) => rest)).toEqual([
        {
          id: "11",
          job: "nightly",
          scheduledFor: new Date("2030-01-04T03:00:00Z"),
          attempt: 1,
          status: "failed",
          error: "boom"
        },
        {
          id: "10",
          job: "nightly",
          scheduledFor: new Date("2030-01-03T03:00:00Z"),
          attempt: 1,
          status: "success",
          error: null
        }
      ])
      expect(runs[0]!.startedAt).toBeInstanceOf(Date)
    })
  )

  it.effect("workers: only those whose live_until lies ahead; a NULL task type written by hand is dropped", () =>
    Effect.gen(function* () {
      const { sql, t, inspect } = yield* setup
      yield* sql`INSERT INTO ${t("scheduler_workers")} (id, task_types, live_until)
                 VALUES ('w-odd', ARRAY['x', NULL], now() + interval '1 minute')`
      const workers = yield* inspect.workers()
      expect(workers.map((w) => ({ id: w.id, taskTypes: w.taskTypes }))).toEqual([
        { id: "w-live", taskTypes: ["a", "report"] },
        { id: "w-odd", taskTypes: ["x"] }
      ])
      expect(workers.every((w) => w.liveUntil.getTime() > Date.now() - 60_000 && w.heartbeatAt instanceof Date)).toBe(
        true
      )
    })
  )

  it.effect("liveWorker and handledByLiveWorker judge against a given time too", () =>
    Effect.gen(function* () {
      const { sql, schema, t } = yield* setup
      const at = (now: Date) =>
        sql<{ id: string; handles_b: boolean }>`
          SELECT w.id, ${PgInspect.handledByLiveWorker(sql, schema, sql`'b'`, now)} AS handles_b
          FROM ${t("scheduler_workers")} w WHERE ${PgInspect.liveWorker(sql, "w", now)} ORDER BY w.id`
      expect(yield* at(new Date(Date.now() - 3_600_000))).toEqual([
        { id: "w-gone", handles_b: true },
        { id: "w-live", handles_b: true }
      ])
      expect(yield* at(new Date(Date.now() + 3_600_000))).toEqual([])
    })
  )

  it.effect("truncate empties items, leases, executions and runs; jobs and workers stay", () =>
    Effect.gen(function* () {
      const { sql, t, inspect } = yield* setup
      yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule)
                 VALUES ('keep', 'report', '{"_tag":"Interval","everyMillis":1000}')`
      yield* sql`INSERT INTO ${t("job_runs")} (job_id, scheduled_for, attempt, status)
                 SELECT id, now(), 1, 'pending' FROM ${t("scheduled_jobs")}`
      yield* sql`INSERT INTO ${t("queue_items")} (task_type) VALUES ('a')`
      yield* sql`INSERT INTO ${t("queue_leases")} (item_id, token, owner, started_at, lease_until)
                 SELECT id, 'token', 'w-live', now(), now() + interval '1 minute' FROM ${t("queue_items")}`
      yield* sql`INSERT INTO ${t("processed_items")} (queue_item_id, task_type, status, started_at, finished_at, duration_ms)
                 VALUES (1, 'a', 'ok', now(), now(), 1)`
      yield* inspect.truncate()
      const [counts] = yield* sql<Record<string, number>>`
        SELECT (SELECT count(*)::int FROM ${t("queue_items")}) AS items,
               (SELECT count(*)::int FROM ${t("queue_leases")}) AS leases,
               (SELECT count(*)::int FROM ${t("processed_items")}) AS processed,
               (SELECT count(*)::int FROM ${t("job_runs")}) AS runs,
               (SELECT count(*)::int FROM ${t("scheduled_jobs")}) AS jobs,
               (SELECT count(*)::int FROM ${t("scheduler_workers")}) AS workers`
      expect(counts).toEqual({ items: 0, leases: 0, processed: 0, runs: 0, jobs: 1, workers: 2 })
    })
  )

  it.effect("a schema without kairos's tables: NotMigrated, with Postgres's code under the SqlError cause", () =>
    Effect.gen(function* () {
      const { schema } = yield* setup
      const missing = yield* PgInspect.make({ schema: `${schema}_none` })
      const reads: ReadonlyArray<Effect.Effect<unknown, PgInspect.InspectError>> = [
        missing.queue(),
        missing.processed(1),
        missing.jobs(),
        missing.runs(1),
        missing.workers()
      ]
      for (const read of reads) {
        const result = yield* Effect.either(read)
        expect(Either.isLeft(result)).toBe(true)
        if (Either.isLeft(result)) {
          expect(result.left).toBeInstanceOf(PgInspect.InspectError)
          expect(result.left.reason).toBe("NotMigrated")
          expect(result.left.cause._tag).toBe("SqlError")
          expect((result.left.cause.cause as { code?: string }).code).toBe("42P01")
        }
      }
    })
  )
})
