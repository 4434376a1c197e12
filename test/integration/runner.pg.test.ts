/**
 * The runner on the Postgres stores in-process, with the real clock (integration: a real Postgres).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { DateTime } from "luxon"
import { Runner, Schedule } from "../../src/index.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

const Live = Runner.layer({ workers: 4 }).pipe(Layer.provideMerge(PgStores("runnerpg")))

/** Until no handler runs and every run is recorded (results are written in batches, after the handler returns). */
const waitIdle = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  const sql = yield* SqlClient.SqlClient
  const schema = yield* TestSchema
  const recording = sql<{ n: number }>`
    SELECT count(*)::int AS n FROM ${sql(`${schema}.job_runs`)} WHERE status = 'running'`
  for (let i = 0; i < 250; i++) {
    if ((yield* runner.running) === 0 && (yield* recording)[0]!.n === 0) return
    yield* Effect.sleep("20 millis")
  }
})

layer(Live, { timeout: "60 seconds", excludeTestServices: true })("Runner on Postgres", (it) => {
  it.effect("a stored schedule that no longer decodes fails that job's run clearly; other jobs keep running", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      yield* runner.register("work", () => ({ done: true }))
      const past = new Date(Date.now() - 1000)
      yield* sql`INSERT INTO ${sql(`${schema}.scheduled_jobs`)} (name, task_type, schedule, next_run_at) VALUES
        ('good', 'work', ${Schedule.encodeJson(Schedule.interval({ every: "1 hour" }))}::jsonb, ${past}),
        ('bad', 'work', ${`{"_tag":"Daily","hour":25,"minute":0}`}::jsonb, ${past}),
        ('worse', 'work', ${`{"_tag":"Monthly","day":1}`}::jsonb, ${past})`
      yield* runner.tick
      yield* waitIdle
      yield* runner.tick
      yield* waitIdle
      const rows = yield* sql<{
        name: string
        enabled: boolean
        status: string
        error: string | null
        output: unknown
      }>`
        SELECT j.name, j.enabled, r.status, r.error, r.output
        FROM ${sql(`${schema}.job_runs`)} r JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id
        ORDER BY j.name, r.id`
      expect(rows.map((r) => [r.name, r.status, r.enabled])).toEqual([
        ["bad", "failed", false],
        ["good", "success", true],
        ["worse", "failed", false]
      ])
      expect(rows[0]!.error).toContain("hour must be an integer from 0 to 23")
      expect(rows[0]!.error).toContain("the job was disabled")
      expect(rows[1]!.output).toEqual({ done: true })
    })
  )

  it.effect("a job inserted by SQL without next_run_at gets its first slot from its creation time", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      yield* sql`INSERT INTO ${sql(`${schema}.scheduled_jobs`)} (name, task_type, schedule, created_at) VALUES
        ('by-sql', 'work', ${Schedule.encodeJson(Schedule.daily({ hour: 9, minute: 0 }))}::jsonb, '2026-01-01T12:00:00Z')`
      yield* runner.tick
      yield* waitIdle
      const [job] = yield* sql<{ next_run_at: Date }>`
        SELECT next_run_at FROM ${sql(`${schema}.scheduled_jobs`)} WHERE name = 'by-sql'`
      // Its first slot (2026-01-02 09:00) has passed, so it ran once (the latest missed slot) and moved on.
      const runs = yield* sql<{ scheduled_for: Date }>`
        SELECT r.scheduled_for FROM ${sql(`${schema}.job_runs`)} r
        JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id WHERE j.name = 'by-sql'`
      expect(runs.length).toBe(1)
      expect(new Date(job!.next_run_at).getTime()).toBeGreaterThan(Date.now())
      expect(new Date(runs[0]!.scheduled_for).getUTCHours()).toBe(9)
    })
  )

  it.effect("a cron job is defined, stored as the contract's JSON, and its next_run_at is the next matching time", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      const schedule = Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" })
      const before = new Date()
      yield* runner.defineJobs([{ name: "cron-weekdays", taskType: "work", schedule }])
      const after = new Date()
      const [row] = yield* sql<{ schedule: unknown; tag: string; next_run_at: Date }>`
        SELECT schedule, schedule->>'_tag' AS tag, next_run_at
        FROM ${sql(`${schema}.scheduled_jobs`)} WHERE name = 'cron-weekdays'`
      expect(row!.tag).toBe("Cron")
      expect(row!.schedule).toEqual({ _tag: "Cron", expression: "0 9 * * MON-FRI", tz: "Europe/Paris" })
      expect(Schedule.decode(row!.schedule)).toEqual(Either.right(schedule))
      // The first slot is next() from the definition time (between `before` and `after`).
      const next = new Date(row!.next_run_at)
      expect([Schedule.next(schedule, before).getTime(), Schedule.next(schedule, after).getTime()]).toContain(
        next.getTime()
      )
      const paris = DateTime.fromJSDate(next, { zone: "Europe/Paris" })
      expect([paris.hour, paris.minute, paris.weekday <= 5]).toEqual([9, 0, true])
    })
  )

  it.effect("a cron job written by plain SQL in the contract's JSON decodes, runs its latest slot and moves on", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      yield* runner.register("cron-work", () => ({ ok: true }))
      yield* sql`INSERT INTO ${sql(`${schema}.scheduled_jobs`)} (name, task_type, schedule, created_at) VALUES
        ('cron-by-sql', 'cron-work', ${`{"_tag":"Cron","expression":"*/5 * * * *"}`}::jsonb, now() - interval '1 hour')`
      yield* runner.tick
      yield* waitIdle
      const [job] = yield* sql<{ next_run_at: Date; enabled: boolean }>`
        SELECT next_run_at, enabled FROM ${sql(`${schema}.scheduled_jobs`)} WHERE name = 'cron-by-sql'`
      const runs = yield* sql<{ scheduled_for: Date; status: string }>`
        SELECT r.scheduled_for, r.status FROM ${sql(`${schema}.job_runs`)} r
        JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id WHERE j.name = 'cron-by-sql'`
      expect(job!.enabled).toBe(true)
      // One run, for the latest five-minute mark already passed; the next slot is the following mark.
      expect(runs.map((r) => r.status)).toEqual(["success"])
      const ran = new Date(runs[0]!.scheduled_for)
      const next = new Date(job!.next_run_at)
      expect(ran.getTime() % (5 * 60_000)).toBe(0)
      expect(next.getTime() - ran.getTime()).toBe(5 * 60_000)
      expect(next.getTime()).toBeGreaterThan(Date.now() - 5_000)
    })
  )
})
