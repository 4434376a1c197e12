/**
 * Concurrent start: five processes released at the same instant on a fresh schema (not even created) each migrate
 * and define the same 50 jobs, each in an order of its own. Every one starts, none logs a failure, each job has
 * exactly one row, and its `next_run_at` is its schedule's first slot after the start. Several rounds, each on a
 * fresh schema, because a deadlock between two upserts shows up in a few tries out of many.
 * Integration: real processes, a real Postgres, wall time.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import pg from "pg"
import { afterEach, describe, expect, it } from "vitest"
import { migrate, migrations as allMigrations } from "../../src/adapters/postgres/migrations.js"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as Schedule from "../../src/domain/Schedule.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"
import { exited } from "../support/process.js"
import { killAll, startProcess, until, type Worker } from "../support/workers.js"

const PROCESSES = 5
const ROUNDS = 5
const JOBS = 50

const procs: Array<Worker> = []
afterEach(() => killAll(procs.splice(0)))

/** A deterministic shuffle (mulberry32), so a failing order can be reproduced from its seed. */
const shuffled = <A>(items: ReadonlyArray<A>, seed: number): Array<A> => {
  let state = seed >>> 0
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

// Daily and weekly slots at least two hours from now (a slot passing mid-round would make "right" ambiguous), and
// intervals, whose first slot depends on which process inserted the row first.
const definitions = (now: Date): Array<{ name: string; taskType: string; schedule: Schedule.Schedule }> => {
  const zones = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
  const hour = (now.getUTCHours() + 12) % 24
  return Array.from({ length: JOBS }, (_, i) => {
    const name = `job-${String(i).padStart(2, "0")}`
    const taskType = `type-${i % 3}`
    const schedule =
      i % 3 === 0
        ? Schedule.daily({ hour: (hour + (i % 5)) % 24, minute: i, tz: zones[i % zones.length] })
        : i % 3 === 1
          ? Schedule.weekly({ weekday: 1 + (i % 7), hour, minute: i })
          : Schedule.interval({ every: `${i + 1} hours` })
    return { name, taskType, schedule }
  })
}

describe("concurrent start", () => {
  it(
    `${PROCESSES} processes migrate a fresh schema and define the same ${JOBS} jobs in different orders, ${ROUNDS} rounds`,
    { timeout: 240_000 },
    async () => {
      const url = databaseUrl()
      const pool = new pg.Pool({ connectionString: url, max: 2 })
      // Loaded once: each round releases the five processes at the same moment on a schema that does not exist yet.
      procs.push(
        ...Array.from({ length: PROCESSES }, () =>
          startProcess("test/fixtures/start-worker.ts", [], { DATABASE_URL: url })
        )
      )
      try {
        await Promise.all(procs.map((p) => p.waitFor((e) => e["event"] === "loaded", 120_000)))
        for (let round = 0; round < ROUNDS; round++) {
          const schema = uniqueSchemaName(`start_${round}`)
          const jobs = definitions(new Date())
          const encoded = jobs.map((j) => ({ ...j, schedule: Schedule.encode(j.schedule) }))
          const from = procs.map((p) => p.events.length)
          try {
            const released = new Date()
            procs.forEach((p, i) => p.send({ start: { schema, define: shuffled(encoded, round * PROCESSES + i + 1) } }))
            const settled = (e: Record<string, unknown>) => e["event"] === "ready" || e["event"] === "failed"
            await Promise.all(procs.map((p, i) => p.waitFor(settled, 60_000, from[i]!)))
            const ready = new Date()

            procs.forEach((p, i) => {
              const events = p.events.slice(from[i])
              expect(events.filter((e) => e["event"] === "failed")).toEqual([])
              expect(events.filter((e) => e["event"] === "ready" && e["schema"] === schema).length).toBe(1)
              expect(events.filter((e) => e["event"] === "log" && e["level"] !== "INFO")).toEqual([])
              expect(p.stderr()).toBe("")
            })
            const q = async <R>(text: string) =>
              (await pool.query(text.replaceAll("$schema", `"${schema}"`))).rows as Array<R>
            const migrations = await q<{ name: string }>(`SELECT name FROM $schema.kairos_migrations`)
            expect(migrations.length).toBe(Object.keys(allMigrations("any")).length)
            const rows = await q<{
              name: string
              task_type: string
              schedule: unknown
              enabled: boolean
              next_run_at: Date
            }>(`SELECT name, task_type, schedule, enabled, next_run_at FROM $schema.scheduled_jobs ORDER BY name`)
            expect(rows.map((r) => r.name)).toEqual(jobs.map((j) => j.name))
            for (const job of jobs) {
              const row = rows.find((r) => r.name === job.name)!
              expect(row.task_type).toBe(job.taskType)
              expect(row.enabled).toBe(true)
              expect(Schedule.decode(row.schedule)).toEqual(Schedule.decode(Schedule.encode(job.schedule)))
              // The first slot after the moment some process upserted it: between the release and the last ready.
              const at = new Date(row.next_run_at).getTime()
              expect(at).toBeGreaterThanOrEqual(Schedule.next(job.schedule, released).getTime())
              expect(at).toBeLessThanOrEqual(Schedule.next(job.schedule, ready).getTime())
              if (job.schedule._tag !== "Interval") expect(at).toBe(Schedule.next(job.schedule, released).getTime())
            }
            // Each registers itself as a live worker (its heartbeat fiber does so right after the start).
            const live = async () =>
              (await q<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.scheduler_workers`))[0]!.n
            await until(async () => (await live()) === PROCESSES, 30_000, "five live workers")
            const stopFrom = procs.map((p) => p.events.length)
            for (const p of procs) p.send({ stop: true })
            await Promise.all(procs.map((p, i) => p.waitFor((e) => e["event"] === "stopped", 60_000, stopFrom[i]!)))
            // A graceful stop leaves the table of live workers.
            expect(await live()).toBe(0)
          } finally {
            await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
          }
        }
        for (const p of procs) p.child.stdin?.end()
        const exits = await Promise.all(procs.map((p) => exited(p.child)))
        expect(exits.map((e) => e.code)).toEqual(procs.map(() => 0))
      } finally {
        await pool.end()
      }
    }
  )
})

describe("concurrent upserts of the same jobs", () => {
  it(
    "five connections upsert the same 200 jobs in different orders, 20 times, inserting and updating: no deadlock",
    { timeout: 120_000 },
    async () => {
      const schema = uniqueSchemaName("upserts")
      const program = Effect.gen(function* () {
        yield* migrate({ schema })
        const store = yield* PgJobStore.make({ schema })
        const now = new Date()
        const base = Array.from({ length: 200 }, (_, i) => ({
          name: `job-${i}`,
          taskType: "t",
          schedule: Schedule.encode(Schedule.interval({ every: "1 hour" })),
          payload: "",
          nextRunAt: new Date(now.getTime() + 3_600_000),
          missedSlots: null,
          overlap: "skip" as const
        }))
        const failures: Array<string> = []
        for (let round = 0; round < 20; round++) {
          // Every other round changes the payload, so rows are updated (locked) as well as inserted.
          const defs = base.map((d) => ({ ...d, payload: String(round % 2) }))
          const results = yield* Effect.all(
            Array.from({ length: 5 }, (_, p) =>
              Effect.either(store.upsertJobs(shuffled(defs, round * 5 + p + 1), now))
            ),
            { concurrency: "unbounded" }
          )
          for (const r of results) if (r._tag === "Left") failures.push(r.left.message)
          if (round === 0) yield* Effect.sync(() => undefined)
        }
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(schema)}.scheduled_jobs`
        return { failures, rows: rows[0]!.n }
      })
      try {
        const result = await Effect.runPromise(
          program.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(databaseUrl()), maxConnections: 6 })))
        )
        expect(result.failures).toEqual([])
        expect(result.rows).toBe(200)
      } finally {
        const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 })
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
        await pool.end()
      }
    }
  )
})

describe("a deadlock that upsertJobs loses", () => {
  it("is retried: the upsert succeeds once the other transaction is done", { timeout: 60_000 }, async () => {
    const schema = uniqueSchemaName("deadlock")
    const url = databaseUrl()
    const other = new pg.Client({ connectionString: url })
    await other.connect()
    const watcher = new pg.Client({ connectionString: url })
    await watcher.connect()
    try {
      const layer = PgClient.layer({
        url: Redacted.make(url),
        maxConnections: 2,
        applicationName: `kairos-dl-${schema}`
      })
      const defs = ["a", "b"].map((name) => ({
        name,
        taskType: "t",
        schedule: Schedule.encode(Schedule.interval({ every: "1 hour" })),
        payload: "v1",
        nextRunAt: new Date(Date.now() + 3_600_000),
        missedSlots: null,
        overlap: "skip" as const
      }))
      await Effect.runPromise(
        Effect.gen(function* () {
          yield* migrate({ schema })
          yield* (yield* PgJobStore.make({ schema })).upsertJobs(defs, new Date())
        }).pipe(Effect.provide(layer))
      )
      // Another program holds b and, once the upsert holds a and waits for b, asks for a: a deadlock. Its own
      // deadlock_timeout is long, so the upsert's backend detects it first and the upsert is the one aborted.
      await other.query(`SET deadlock_timeout = '30s'`)
      await other.query("BEGIN")
      await other.query(`UPDATE "${schema}".scheduled_jobs SET payload = 'other' WHERE name = 'b'`)
      const upsert = Effect.runPromise(
        Effect.gen(function* () {
          const store = yield* PgJobStore.make({ schema })
          return yield* Effect.either(
            store.upsertJobs(
              defs.map((d) => ({ ...d, payload: "v2" })),
              new Date()
            )
          )
        }).pipe(Effect.provide(layer))
      )
      await until(
        async () =>
          // Not on `other`: inside a transaction, pg_stat_activity is a snapshot taken once.
          (
            await watcher.query(
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [`kairos-dl-${schema}`]
            )
          ).rows.length > 0,
        20_000,
        "the upsert waiting for b"
      )
      await other.query(`UPDATE "${schema}".scheduled_jobs SET payload = 'other' WHERE name = 'a'`)
      await other.query("COMMIT")
      const result = await upsert
      expect(result._tag === "Left" ? result.left.message : "ok").toBe("ok")
      const rows = await other.query(`SELECT name, payload FROM "${schema}".scheduled_jobs ORDER BY name`)
      expect(rows.rows).toEqual([
        { name: "a", payload: "v2" },
        { name: "b", payload: "v2" }
      ])
    } finally {
      await other.query("ROLLBACK").catch(() => undefined)
      await other.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await other.end()
      await watcher.end()
    }
  })
})
