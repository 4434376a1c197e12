/**
 * PgReadModel, the one read model of the CLI's listings, `kairos stats` and the dashboard, against a migrated schema:
 * rows written by plain SQL (as any program may write them) come back decoded, a stored value kairos cannot use is
 * described rather than failing the read, and each read's parameters (filters, order, page, cut) do what the CLI and
 * the dashboard ask of them. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as PgReadModel from "../../src/adapters/postgres/PgReadModel.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"

/** The read model, the client and a table-name helper, on emptied tables. */
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
  const reads = yield* PgReadModel.make({ schema })
  return { sql, schema, t, reads }
})

layer(PgMigrated("readmodel"), { timeout: "60 seconds", excludeTestServices: true })("PgReadModel", (it) => {
  it.effect(
    "items (kairos queue): all of them in claim order, runs left, handled only when a live worker lists the task type",
    () =>
      Effect.gen(function* () {
        const { sql, t, reads } = yield* setup
        yield* sql`INSERT INTO ${t("queue_items")} (task_type, payload, priority, max_runs, thread, run_after, unique_key)
                 VALUES ('a', NULL, 0, -1, 1, NULL, NULL), ('b', 'x', 5, 3, 0, '2030-01-01T00:00:00Z', 'b-key'),
                        ('nobody', '', 0, 1, 0, NULL, NULL)`
        // One of b's three runs done, and its next run failed once (retried under its own policy).
        yield* sql`UPDATE ${t("queue_items")} SET runs_done = 2, max_runs = 2, failures = 1, retry_attempts = 3
                 WHERE task_type = 'b'`
        const { rows: items, hasMore } = yield* reads.items({})
        expect(hasMore).toBe(false)
        expect(items.map(({ createdAt: _, id: __, ...rest }) => rest)).toEqual([
          {
            taskType: "b",
            payload: "x",
            status: "pending",
            priority: 5,
            runsLeft: 2,
            runsDone: 2,
            thread: 0,
            runAfter: new Date("2030-01-01T00:00:00Z"),
            uniqueKey: "b-key",
            failures: 1,
            retryAttempts: 3,
            handled: false,
            groupKey: null
          },
          {
            taskType: "a",
            payload: null,
            status: "pending",
            priority: 0,
            runsLeft: -1,
            runsDone: 0,
            thread: 1,
            runAfter: null,
            uniqueKey: null,
            failures: 0,
            retryAttempts: null,
            handled: true,
            groupKey: null
          },
          {
            taskType: "nobody",
            payload: "",
            status: "pending",
            priority: 0,
            runsLeft: 1,
            runsDone: 0,
            thread: 0,
            runAfter: null,
            uniqueKey: null,
            failures: 0,
            retryAttempts: null,
            handled: false,
            groupKey: null
          }
        ])
        expect(items.every((item) => item.createdAt instanceof Date && /^\d+$/.test(item.id))).toBe(true)
      })
  )

  it.effect(
    "executions (kairos processed): newest first by numeric id (10 before 9), a NULL payload read as null",
    () =>
      Effect.gen(function* () {
        const { sql, schema, t, reads } = yield* setup
        // Ids 95..104 cross a digit boundary: ordering by the text of the id would put 99 first.
        yield* sql`SELECT setval(pg_get_serial_sequence(${`${schema}.processed_items`}, 'id'), 94)`
        yield* sql`
        INSERT INTO ${t("processed_items")}
          (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
        SELECT i, 'send', CASE WHEN i % 2 = 0 THEN NULL ELSE 'p' || i END, CASE WHEN i = 10 THEN 'error' ELSE 'ok' END,
               CASE WHEN i = 10 THEN 'boom' ELSE '' END, now(), now(), i
        FROM generate_series(1, 10) i`
        const processed = (n: number) => Effect.map(reads.executions({ order: "id", limit: n }), (page) => page.rows)
        const recent = yield* processed(3)
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
        expect((yield* processed(100)).length).toBe(10)
        expect(yield* processed(-5)).toEqual([])
      })
  )

  it.effect(
    "jobs (kairos jobs): by name, a schedule that does not decode listed as invalid, handled by live workers only",
    () =>
      Effect.gen(function* () {
        const { sql, t, reads } = yield* setup
        yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule, enabled, next_run_at) VALUES
        ('a-valid', 'report', '{"_tag":"Interval","everyMillis":300000}', true, '2030-01-01T00:00:00Z'),
        ('b-unknown-tag', 'cleanup', '{"_tag":"Hourly","minute":5}', true, NULL),
        ('c-not-an-object', 'nobody', '42', false, NULL)`
        const jobs = yield* reads.jobs({})
        expect(jobs.map(({ id: _, ...rest }) => rest)).toEqual([
          {
            name: "a-valid",
            taskType: "report",
            payload: "",
            schedule: {
              _tag: "Valid",
              stored: { _tag: "Interval", everyMillis: 300000 },
              schedule: { _tag: "Interval", everyMillis: 300000 }
            },
            enabled: true,
            nextRunAt: new Date("2030-01-01T00:00:00Z"),
            handled: true,
            lastRuns: []
          },
          {
            name: "b-unknown-tag",
            taskType: "cleanup",
            payload: "",
            schedule: { _tag: "Invalid", stored: { _tag: "Hourly", minute: 5 }, reason: expect.any(String) },
            enabled: true,
            nextRunAt: null,
            // Its only worker's live_until has passed.
            handled: false,
            lastRuns: []
          },
          {
            name: "c-not-an-object",
            taskType: "nobody",
            payload: "",
            schedule: { _tag: "Invalid", stored: 42, reason: expect.any(String) },
            enabled: false,
            nextRunAt: null,
            handled: false,
            lastRuns: []
          }
        ])
      })
  )

  it.effect("runs (kairos runs): newest first by numeric id, with the job's name", () =>
    Effect.gen(function* () {
      const { sql, schema, t, reads } = yield* setup
      yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule)
                 VALUES ('nightly', 'cleanup', '{"_tag":"Daily","hour":3,"minute":0}')`
      yield* sql`SELECT setval(pg_get_serial_sequence(${`${schema}.job_runs`}, 'id'), 8)`
      yield* sql`
        INSERT INTO ${t("job_runs")} (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
        SELECT (SELECT id FROM ${t("scheduled_jobs")} WHERE name = 'nightly'),
               '2030-01-01T03:00:00Z'::timestamptz + (i || ' days')::interval, 1,
               CASE WHEN i = 3 THEN 'failed' ELSE 'success' END, now(), now(), CASE WHEN i = 3 THEN 'boom' END
        FROM generate_series(1, 3) i`
      const { rows: runs } = yield* reads.runs({ limit: 2 })
      expect(runs.map(({ startedAt: _, finishedAt: __, ...rest }) => rest)).toEqual([
        {
          id: "11",
          jobId: expect.stringMatching(/^\d+$/),
          job: "nightly",
          scheduledFor: new Date("2030-01-04T03:00:00Z"),
          attempt: 1,
          status: "failed",
          error: "boom"
        },
        {
          id: "10",
          jobId: expect.stringMatching(/^\d+$/),
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
      const { sql, t, reads } = yield* setup
      yield* sql`INSERT INTO ${t("scheduler_workers")} (id, task_types, live_until)
                 VALUES ('w-odd', ARRAY['x', NULL], now() + interval '1 minute')`
      const workers = yield* reads.workers()
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
          SELECT w.id, ${PgReadModel.handledByLiveWorker(sql, schema, sql`'b'`, now)} AS handles_b
          FROM ${t("scheduler_workers")} w WHERE ${PgReadModel.liveWorker(sql, "w", now)} ORDER BY w.id`
      expect(yield* at(new Date(Date.now() - 3_600_000))).toEqual([
        { id: "w-gone", handles_b: true },
        { id: "w-live", handles_b: true }
      ])
      expect(yield* at(new Date(Date.now() + 3_600_000))).toEqual([])
    })
  )

  it.effect("truncate empties items, leases, executions and runs; jobs and workers stay", () =>
    Effect.gen(function* () {
      const { sql, t, reads } = yield* setup
      yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, schedule)
                 VALUES ('keep', 'report', '{"_tag":"Interval","everyMillis":1000}')`
      yield* sql`INSERT INTO ${t("job_runs")} (job_id, scheduled_for, attempt, status)
                 SELECT id, now(), 1, 'pending' FROM ${t("scheduled_jobs")}`
      yield* sql`INSERT INTO ${t("queue_items")} (task_type) VALUES ('a')`
      yield* sql`INSERT INTO ${t("queue_leases")} (item_id, token, owner, started_at, lease_until)
                 SELECT id, 'token', 'w-live', now(), now() + interval '1 minute' FROM ${t("queue_items")}`
      yield* sql`INSERT INTO ${t("processed_items")} (queue_item_id, task_type, status, started_at, finished_at, duration_ms)
                 VALUES (1, 'a', 'ok', now(), now(), 1)`
      yield* reads.truncate()
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

  it.effect(
    "items (the dashboard's queue page): filters, a page with hasMore, one by id, payloads cut; unbounded without a limit",
    () =>
      Effect.gen(function* () {
        const { sql, t, reads } = yield* setup
        yield* sql`INSERT INTO ${t("queue_items")} (task_type, payload, priority, run_after)
                 VALUES ('a', 'first-payload', 9, NULL), ('a', 'second', 0, '2030-01-01T00:00:00Z'),
                        ('b', NULL, 0, '2030-06-01T00:00:00Z')`
        yield* sql`INSERT INTO ${t("queue_items")} (task_type, payload) SELECT 'bulk', 'p' || i FROM generate_series(1, 250) i`
        yield* sql`UPDATE ${t("queue_items")} SET status = 'processing' WHERE payload = 'second'`
        const payloads = (page: PgReadModel.Page<PgReadModel.Item>) => page.rows.map((i) => i.payload)
        // No limit: every item, more than a dashboard page holds (the CLI's listing is whole).
        const all = yield* reads.items({})
        expect(all.rows.length).toBe(253)
        expect(all.hasMore).toBe(false)
        expect(all.rows[0]!.payload).toBe("first-payload")
        const first = yield* reads.items({ limit: 2, cut: 5 })
        expect(payloads(first)).toEqual(["first", "secon"])
        expect(first.hasMore).toBe(true)
        const last = yield* reads.items({ offset: 252, limit: 2 })
        expect(last.rows.length).toBe(1)
        expect(last.hasMore).toBe(false)
        expect(payloads(yield* reads.items({ taskType: "b" }))).toEqual([null])
        expect(payloads(yield* reads.items({ status: "processing" }))).toEqual(["second"])
        expect(payloads(yield* reads.items({ priority: 9 }))).toEqual(["first-payload"])
        const window = { runAfterFrom: new Date("2030-01-01T00:00:00Z"), runAfterTo: new Date("2030-06-01T00:00:00Z") }
        expect(payloads(yield* reads.items(window))).toEqual(["second"])
        const id = all.rows[1]!.id
        expect((yield* reads.items({ id })).rows.map((i) => i.id)).toEqual([id])
        expect((yield* reads.items({ id: "999999999" })).rows).toEqual([])
      })
  )

  it.effect(
    "executions: newest by when recorded (the log) or by id (the CLI), each paged by its own key; filters; cut",
    () =>
      Effect.gen(function* () {
        const { sql, t, reads } = yield* setup
        // Recorded out of id order, as concurrent transactions record them: p1 last, p2 first.
        yield* sql`
        INSERT INTO ${t("processed_items")}
          (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms, created_at)
        VALUES (1, 'a', 'p1', 'ok', '', now(), now(), 1, '2030-01-01T00:00:03Z'),
               (1, 'a', 'p2', 'error', 'boom, at length', now(), now(), 2, '2030-01-01T00:00:01Z'),
               (2, 'b', 'p3', 'ok', '', now(), now(), 3, '2030-01-01T00:00:02Z')`
        const payloads = (page: PgReadModel.Page<PgReadModel.Execution>) => page.rows.map((p) => p.payload)
        const ids = new Map((yield* reads.executions({})).rows.map((p) => [p.payload, p.id]))
        const id = (payload: string) => ids.get(payload)!

        expect(payloads(yield* reads.executions({}))).toEqual(["p1", "p3", "p2"])
        expect(payloads(yield* reads.executions({ order: "id" }))).toEqual(["p3", "p2", "p1"])

        const recorded = yield* reads.executions({ limit: 1 })
        expect([payloads(recorded), recorded.hasMore]).toEqual([["p1"], true])
        const older = yield* reads.executions({ before: id("p1"), limit: 1 })
        expect([payloads(older), older.hasMore]).toEqual([["p3"], true])
        const newer = yield* reads.executions({ after: id("p2"), limit: 1 })
        expect([payloads(newer), newer.hasMore]).toEqual([["p3"], true])

        const byId = yield* reads.executions({ order: "id", before: id("p3"), limit: 1 })
        expect([payloads(byId), byId.hasMore]).toEqual([["p2"], true])
        const newerById = yield* reads.executions({ order: "id", after: id("p1"), limit: 5 })
        expect([payloads(newerById), newerById.hasMore]).toEqual([["p3", "p2"], false])

        expect(payloads(yield* reads.executions({ order: "id", queueItemId: "1" }))).toEqual(["p2", "p1"])
        expect(payloads(yield* reads.executions({ status: "error" }))).toEqual(["p2"])
        expect(payloads(yield* reads.executions({ taskType: "b" }))).toEqual(["p3"])
        const at = new Date("2030-01-01T00:00:02Z")
        expect(payloads(yield* reads.executions({ from: at }))).toEqual(["p1", "p3"])
        expect(payloads(yield* reads.executions({ to: at }))).toEqual(["p2"])
        const [cut] = (yield* reads.executions({ status: "error", cut: 4 })).rows
        expect([cut!.payload, cut!.errorMsg]).toEqual(["p2", "boom"])
        expect((yield* reads.executions({ status: "error" })).rows[0]!.errorMsg).toBe("boom, at length")

        // The CLI's count is not a dashboard page: 300 asked, every one of 253 returned.
        yield* sql`
        INSERT INTO ${t("processed_items")} (queue_item_id, task_type, status, started_at, finished_at, duration_ms)
        SELECT i, 'bulk', 'ok', now(), now(), 1 FROM generate_series(1, 250) i`
        expect((yield* reads.executions({ order: "id", limit: 300 })).rows.length).toBe(253)
      })
  )

  it.effect(
    "runs and jobs (the dashboard's job pages): a job's runs newest slot first, paged; each job's last runs; by name or id",
    () =>
      Effect.gen(function* () {
        const { sql, t, reads } = yield* setup
        yield* sql`INSERT INTO ${t("scheduled_jobs")} (name, task_type, payload, schedule) VALUES
        ('x', 'report', 'x-payload', '{"_tag":"Interval","everyMillis":1000}'),
        ('y', 'report', 'y-payload', '{"_tag":"Interval","everyMillis":1000}')`
        const [x, y] = (yield* reads.jobs({})).map((job) => job.id)
        // x's slot 2 is written last (a run-now, a retry), so its id order is not its slot order.
        yield* sql`INSERT INTO ${t("job_runs")} (job_id, scheduled_for, attempt, status, error) VALUES
        (${x}::bigint, '2030-01-01T00:00:01Z', 1, 'success', NULL),
        (${x}::bigint, '2030-01-01T00:00:03Z', 1, 'failed', 'boom, at length'),
        (${y}::bigint, '2030-01-01T00:00:05Z', 1, 'success', NULL),
        (${x}::bigint, '2030-01-01T00:00:02Z', 1, 'failed', 'first try'),
        (${x}::bigint, '2030-01-01T00:00:02Z', 2, 'success', NULL)`
        const slots = (runs: ReadonlyArray<PgReadModel.Run>) =>
          runs.map((r) => `${r.job} ${r.scheduledFor.toISOString().slice(17, 19)}#${r.attempt}`)

        expect(slots((yield* reads.runs({})).rows)).toEqual(["x 02#2", "x 02#1", "y 05#1", "x 03#1", "x 01#1"])
        const page1 = yield* reads.runs({ jobId: x, order: "slot", limit: 2 })
        expect([slots(page1.rows), page1.hasMore]).toEqual([["x 03#1", "x 02#2"], true])
        const page2 = yield* reads.runs({ jobId: x, order: "slot", offset: 2, limit: 2 })
        expect([slots(page2.rows), page2.hasMore]).toEqual([["x 02#1", "x 01#1"], false])
        expect((yield* reads.runs({ jobId: x, order: "slot", limit: 1, cut: 4 })).rows[0]!.error).toBe("boom")
        expect((yield* reads.runs({ jobId: x, order: "slot", limit: 1 })).rows[0]!.error).toBe("boom, at length")

        const listed = yield* reads.jobs({ lastRuns: 2, cut: 4 })
        expect(listed.map((job) => [job.name, job.payload, slots(job.lastRuns)])).toEqual([
          ["x", "x-pa", ["x 03#1", "x 02#2"]],
          ["y", "y-pa", ["y 05#1"]]
        ])
        expect(listed[0]!.lastRuns[0]!.error).toBe("boom")
        expect((yield* reads.jobs({ name: "y" })).map((job) => [job.id, job.payload, job.lastRuns])).toEqual([
          [y, "y-payload", []]
        ])
        expect((yield* reads.jobs({ id: x! })).map((job) => job.name)).toEqual(["x"])
        expect(yield* reads.jobs({ name: "nope" })).toEqual([])
        expect((yield* reads.jobs({ limit: 1 })).map((job) => job.name)).toEqual(["x"])
      })
  )

  it.effect("a schema without kairos's tables: NotMigrated, with Postgres's code under the SqlError cause", () =>
    Effect.gen(function* () {
      const { schema } = yield* setup
      const missing = yield* PgReadModel.make({ schema: `${schema}_none` })
      const all: ReadonlyArray<Effect.Effect<unknown, PgReadModel.ReadModelError>> = [
        missing.items({}),
        missing.executions({ limit: 1 }),
        missing.jobs({ lastRuns: 1 }),
        missing.runs({ limit: 1 }),
        missing.workers()
      ]
      for (const read of all) {
        const result = yield* Effect.either(read)
        expect(Either.isLeft(result)).toBe(true)
        if (Either.isLeft(result)) {
          expect(result.left).toBeInstanceOf(PgReadModel.ReadModelError)
          expect(result.left.reason).toBe("NotMigrated")
          expect(result.left.cause._tag).toBe("SqlError")
          expect((result.left.cause.cause as { code?: string }).code).toBe("42P01")
        }
      }
    })
  )
})
