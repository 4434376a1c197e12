/**
 * Bad rows written by SQL: what other programs may put in the tables. Each bad row is either refused at insert with
 * a clear database error, or run and recorded (as an error where it cannot run); the runner keeps going (work inserted
 * after the bad rows runs), nothing is silently dropped, nothing runs forever.
 * Integration: an in-process runner on the Postgres stores, a real Postgres, the real clock.
 */
import { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Runner, Schedule } from "../../src/index.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

const Live = Runner.layer({ workers: 4, interval: "200 millis", retryAttempts: 0 }).pipe(
  Layer.provideMerge(PgStores("badrows"))
)

// Quotes, emoji, a right-to-left mark, control characters and an ANSI escape: every one must round-trip.
const HOSTILE = `it's "quoted" \\ ; DROP TABLE x; -- 😀 \u200f \u0001\u0007\t\r\n \u001b[31mred\u001b[0m 終`

/** Polls `check` every 50 ms (real time) until it holds. */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, what: string, timeoutMs = 30_000) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (yield* check) return
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.die(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`))
  })

/** The SQLSTATE of a statement that fails, or "ok". */
const sqlState = <A, R>(statement: Effect.Effect<A, SqlError, R>) =>
  Effect.map(Effect.either(statement), (r) =>
    r._tag === "Right" ? "ok" : String((r.left.cause as { code?: unknown } | undefined)?.code)
  )

layer(Live, { timeout: "120 seconds", excludeTestServices: true })("bad rows written by SQL", (it) => {
  it.effect("queue_items: every bad value is refused at insert or run and recorded once; later items run", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const items = sql(`${schema}.queue_items`)
      const runner = yield* Runner.Runner
      // The handler parses its payload: an unparsable one is the handler's error, recorded with its message.
      yield* runner.register("work", (job) => {
        JSON.parse(job.payload)
        return undefined
      })
      yield* runner.register(HOSTILE, () => undefined)
      yield* runner.start

      // Refused at insert, with the database's reason.
      expect(yield* sqlState(sql`INSERT INTO ${items} (task_type) VALUES (NULL)`)).toBe("23502")
      // Timestamps no Date holds.
      expect(yield* sqlState(sql`INSERT INTO ${items} (task_type, created_at) VALUES ('work', '-infinity')`)).toBe(
        "23514"
      )
      expect(yield* sqlState(sql`INSERT INTO ${items} (task_type, run_after) VALUES ('work', 'infinity')`)).toBe(
        "23514"
      )
      expect(yield* sqlState(sql`INSERT INTO ${items} (task_type, payload) VALUES ('work', ${"a\u0000b"})`)).toBe(
        "22021"
      )

      const big = JSON.stringify("x".repeat(10 * 1024 * 1024))
      const insert = (label: string, values: Effect.Effect<ReadonlyArray<{ id: string }>, SqlError>) =>
        Effect.map(values, (rows) => [label, rows[0]!.id] as const)
      const inserted = yield* Effect.all([
        insert("null payload", sql`INSERT INTO ${items} (task_type, payload) VALUES ('work', NULL) RETURNING id::text`),
        insert("bad json", sql`INSERT INTO ${items} (task_type, payload) VALUES ('work', '{"a":') RETURNING id::text`),
        insert(
          "max_runs 0",
          sql`INSERT INTO ${items} (task_type, payload, max_runs) VALUES ('work', '1', 0) RETURNING id::text`
        ),
        insert(
          "max_runs -5 thread 1",
          sql`INSERT INTO ${items} (task_type, payload, max_runs, thread) VALUES ('work', '1', -5, 1) RETURNING id::text`
        ),
        insert(
          "thread 7",
          sql`INSERT INTO ${items} (task_type, payload, thread) VALUES ('work', '1', 7) RETURNING id::text`
        ),
        insert(
          "priority max",
          sql`INSERT INTO ${items} (task_type, payload, priority) VALUES ('work', '1', 2147483647) RETURNING id::text`
        ),
        insert(
          "priority min",
          sql`INSERT INTO ${items} (task_type, payload, priority) VALUES ('work', '1', -2147483648) RETURNING id::text`
        ),
        insert("10 MB", sql`INSERT INTO ${items} (task_type, payload) VALUES ('work', ${big}) RETURNING id::text`),
        insert(
          "hostile",
          sql`INSERT INTO ${items} (task_type, payload) VALUES (${HOSTILE}, ${HOSTILE}) RETURNING id::text`
        ),
        insert(
          "nulls",
          sql`INSERT INTO ${items} (task_type, payload, status, priority, max_runs, thread, created_at, updated_at, run_after)
              VALUES ('work', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) RETURNING id::text`
        ),
        insert(
          "unknown type",
          sql`INSERT INTO ${items} (task_type, payload) VALUES ('nobody-handles-this', '1') RETURNING id::text`
        )
      ])
      const ids = Object.fromEntries(inserted)
      // Inserted after all of them: proof that the runner kept going.
      const [after] = yield* sql<{ id: string }>`
        INSERT INTO ${items} (task_type, payload, priority) VALUES ('work', '"after"', -2147483648) RETURNING id::text`
      const processed = sql<{
        queue_item_id: string
        task_type: string
        payload: string | null
        status: string
        error_msg: string
      }>`
        SELECT queue_item_id::text, task_type, payload, status, error_msg FROM ${sql(`${schema}.processed_items`)} ORDER BY id`
      yield* eventually(
        Effect.map(processed, (rows) => rows.some((r) => r.queue_item_id === after!.id)),
        "the item inserted after the bad ones to run"
      )
      // Every runnable item is gone from the queue; the unknown type waits for a worker that handles it.
      yield* eventually(
        Effect.map(sql<{ id: string }>`SELECT id::text FROM ${items}`, (rows) => rows.length === 1),
        "the queue to drain"
      )
      expect(yield* sql<{ id: string; status: string }>`SELECT id::text, status FROM ${items}`).toEqual([
        { id: ids["unknown type"], status: "pending" }
      ])
      const rows = yield* processed
      const of = (label: string) => rows.filter((r) => r.queue_item_id === ids[label])
      // Each ran exactly once (max_runs 0 and -5 read as 1).
      for (const label of Object.keys(ids).filter((l) => l !== "unknown type"))
        expect([label, of(label).length]).toEqual([label, 1])
      expect(of("null payload")[0]).toMatchObject({ status: "error", payload: null })
      expect(of("nulls")[0]).toMatchObject({ status: "error", payload: null })
      expect(of("bad json")[0]!.status).toBe("error")
      expect(of("bad json")[0]!.error_msg).toMatch(/JSON/)
      for (const label of ["max_runs 0", "max_runs -5 thread 1", "thread 7", "priority max", "priority min", "10 MB"]) {
        expect([label, of(label)[0]!.status]).toEqual([label, "ok"])
      }
      expect(of("10 MB")[0]!.payload).toBe(big)
      expect(of("hostile")[0]).toMatchObject({ status: "ok", task_type: HOSTILE, payload: HOSTILE })
    })
  )

  it.effect("scheduled_jobs: bad schedules fail once and disable their job; other bad values run; later jobs run", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const jobs = sql(`${schema}.scheduled_jobs`)
      const runner = yield* Runner.Runner
      yield* runner.register("job", (job) => ({ payload: job.payload }))
      yield* runner.register(HOSTILE, () => undefined)
      yield* runner.start
      const hourly = Schedule.encodeJson(Schedule.interval({ every: "1 hour" }))
      const past = new Date(Date.now() - 1000)

      // Refused at insert, with the database's reason.
      const refused = {
        "null schedule": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule) VALUES ('n1', 'job', NULL)`
        ),
        "not json": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule) VALUES ('n2', 'job', '{"_tag":')`
        ),
        "null name": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule) VALUES (NULL, 'job', ${hourly}::jsonb)`
        ),
        "bad missed_slots": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule, missed_slots) VALUES ('n3', 'job', ${hourly}::jsonb, 'all')`
        ),
        "bad overlap": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule, overlap) VALUES ('n4', 'job', ${hourly}::jsonb, NULL)`
        ),
        // No Date holds these: one such row used to fail every tick.
        "-infinity": yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at) VALUES ('n5', 'job', ${hourly}::jsonb, '-infinity')`
        ),
        infinity: yield* sqlState(
          sql`INSERT INTO ${jobs} (name, task_type, schedule, created_at) VALUES ('n6', 'job', ${hourly}::jsonb, 'infinity')`
        )
      }
      expect(refused).toEqual({
        "null schedule": "23502",
        "not json": "22P02",
        "null name": "23502",
        "bad missed_slots": "23514",
        "bad overlap": "23502",
        "-infinity": "23514",
        infinity: "23514"
      })

      // Schedules that do not decode (or compute): one failed run each, the job disabled.
      const garbage: Record<string, string> = {
        string: `"hello"`,
        "json null": "null",
        array: "[]",
        "unknown tag": `{"_tag":"Monthly","day":1}`,
        "cron minute 61": `{"_tag":"Cron","expression":"61 * * * *"}`,
        "cron 31 February": `{"_tag":"Cron","expression":"0 0 31 2 *"}`,
        "hour 25": `{"_tag":"Daily","hour":25,"minute":0}`,
        "hour fraction": `{"_tag":"Daily","hour":9.5,"minute":0}`,
        "weekday 9": `{"_tag":"Weekly","weekday":9,"hour":1,"minute":0}`,
        "no such zone": `{"_tag":"Daily","hour":1,"minute":0,"tz":"Mars/Olympus"}`,
        "every 0": `{"_tag":"Interval","everyMillis":0}`,
        "every -1": `{"_tag":"Interval","everyMillis":-1}`,
        "every 1e300": `{"_tag":"Interval","everyMillis":1e300}`,
        "every as text": `{"_tag":"Interval","everyMillis":"1000"}`
      }
      for (const [name, schedule] of Object.entries(garbage)) {
        yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at) VALUES (${name}, 'job', ${schedule}::jsonb, ${past})`
      }
      // Values that are odd but valid: they run (when due).
      yield* sql`INSERT INTO ${jobs} (name, task_type, payload, schedule, next_run_at, missed_slots, created_at, updated_at)
        VALUES ('nulls', 'job', NULL, ${hourly}::jsonb, NULL, NULL, DEFAULT, DEFAULT)`
      yield* sql`INSERT INTO ${jobs} (name, task_type, payload, schedule, next_run_at)
        VALUES (${HOSTILE}, ${HOSTILE}, ${HOSTILE}, ${hourly}::jsonb, ${past})`
      // Slots decades and centuries old: one run for the latest missed slot, found without walking every slot since.
      yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at)
        VALUES ('hourly since 1970', 'job', '{"_tag":"Interval","everyMillis":3600000}'::jsonb, '1970-01-01T00:00:00Z')`
      yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at)
        VALUES ('daily since year 1', 'job', '{"_tag":"Daily","hour":3,"minute":0}'::jsonb, '0001-01-01T00:00:00Z')`
      yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at)
        VALUES ('cron since year 1', 'job', '{"_tag":"Cron","expression":"0 3 * * *"}'::jsonb, '0001-01-01T03:00:00Z')`
      yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at, payload)
        VALUES ('big payload', 'job', ${hourly}::jsonb, ${past}, ${"y".repeat(1024 * 1024)})`
      // Inserted after all of them: proof that the runner kept going.
      yield* sql`INSERT INTO ${jobs} (name, task_type, schedule, next_run_at) VALUES ('after', 'job', ${hourly}::jsonb, ${past})`

      const runs = sql<{ name: string; status: string; error: string | null; enabled: boolean }>`
        SELECT j.name, r.status, r.error, j.enabled FROM ${sql(`${schema}.job_runs`)} r
        JOIN ${jobs} j ON j.id = r.job_id ORDER BY r.id`
      yield* eventually(
        Effect.map(runs, (rows) => rows.some((r) => r.name === "after" && r.status === "success")),
        "the job inserted after the bad ones to run"
      )
      yield* eventually(
        Effect.map(runs, (rows) => rows.filter((r) => r.name in garbage).length === Object.keys(garbage).length),
        "a failed run for every bad schedule"
      )
      // A few more ticks: nothing runs again.
      yield* Effect.sleep("1 second")
      const rows = yield* runs
      const of = (name: string) => rows.filter((r) => r.name === name)
      for (const name of Object.keys(garbage)) {
        expect([name, of(name).map((r) => [r.status, r.enabled])]).toEqual([name, [["failed", false]]])
        expect(of(name)[0]!.error).toContain("the job was disabled")
      }
      // No next_run_at: its first slot is an hour after its creation, so it has not run yet (but has a slot).
      expect(of("nulls")).toEqual([])
      for (const name of [
        HOSTILE,
        "hourly since 1970",
        "daily since year 1",
        "cron since year 1",
        "big payload",
        "after"
      ]) {
        expect([name, of(name).map((r) => r.status)]).toEqual([name, ["success"]])
      }
      const state = yield* sql<{ name: string; enabled: boolean; next_run_at: Date | null }>`
        SELECT name, enabled, next_run_at FROM ${jobs} ORDER BY name`
      const job = (name: string) => state.find((j) => j.name === name)!
      for (const name of ["nulls", "hourly since 1970", "daily since year 1", "cron since year 1", "after"]) {
        expect([name, new Date(job(name).next_run_at!).getTime() > Date.now() - 1000]).toEqual([name, true])
      }
    })
  )
})
