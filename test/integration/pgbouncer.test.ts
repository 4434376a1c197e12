/**
 * kairos through a transaction pooler with nothing configured in it: PgBouncer (Debian's, 1.18 on Debian 12) in
 * transaction mode, `auth_type = trust`, no `ignore_startup_parameters`, no `max_prepared_statements`, in front of
 * the test database. Here: the session limits, the queue and job contract suites, wake-ups with and without a direct
 * URL (the runner's and the dashboard's), what a refused connection says, a drain by three worker processes, and
 * transactional handlers (a timeout's cancel through the pooler; a drain whose writes commit exactly once with their
 * records while the server's backends are killed under it).
 * Integration: real processes and a real PgBouncer (see test/support/pgbouncer.ts); skipped, saying so, where
 * pgbouncer is not installed, and failing instead with KAIROS_REQUIRE_PGBOUNCER=1 (CI).
 */
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Exit, Layer, Logger, type Scope } from "effect"
import path from "node:path"
import pg from "pg"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgSettings from "../../src/adapters/postgres/PgSettings.js"
import * as PgWorkerRegistry from "../../src/adapters/postgres/PgWorkerRegistry.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import type { PgPool } from "../../src/adapters/postgres/PgPrepared.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { Kairos, QueueStore, Runner, WakeUps } from "../../src/index.js"
import { suite as jobStoreSuite } from "../contracts/JobStoreContract.js"
import { suite as queueStoreSuite } from "../contracts/QueueStoreContract.js"
import { startDashboard } from "../dashboard/support.js"
import { databaseUrl, TestSchema, TestSchemaLive, uniqueSchemaName } from "../support/database.js"
import { type PgBouncer, startPgBouncer } from "../support/pgbouncer.js"
import { pgbouncerTests } from "../support/pgbouncerTests.js"
import { inspectorLayer, queueInspector } from "../support/pgStores.js"
import { projectRoot, run as runCommand } from "../support/process.js"
import { sessionLimitTests } from "../support/sessionLimits.js"
import { killAll, migratedSchema, sleep, startProcess, type TestDb, until, type Worker } from "../support/workers.js"

let bouncer: PgBouncer | undefined
/** The pooled URL: the test database through PgBouncer. */
const pooled = (): string => bouncer!.url

/** A client of kairos's own through PgBouncer, a schema of the suite's own, migrated through it too. */
const PooledMigrated = (label: string) =>
  Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema }))).pipe(
    Layer.provideMerge(TestSchemaLive(label)),
    Layer.provideMerge(
      Layer.suspend(() =>
        PgKairos.clientLayer({ url: pooled(), maxConnections: 8, applicationName: "kairos-test-pooled" })
      )
    )
  )

/** With its wake-ups on the direct URL, as `directUrl` gives them. */
const pooledStores = <A>(
  label: string,
  stores: (schema: string) => Layer.Layer<A, never, SqlClient.SqlClient | PgPool>
) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(
        stores(schema),
        Layer.suspend(() => PgWakeUps.layer({ schema, url: databaseUrl() }))
      )
    )
  ).pipe(Layer.provideMerge(PooledMigrated(label)))

/** The lines `effect` logs, as text. */
const logged = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>) =>
  Effect.gen(function* () {
    const lines: Array<string> = []
    const logger = Logger.make(({ message }) => {
      lines.push(Array.isArray(message) ? message.join(" ") : String(message))
    })
    const value = yield* effect.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
    return { value, lines }
  })

pgbouncerTests("kairos through PgBouncer in transaction mode, nothing configured in it", () => {
  beforeAll(async () => {
    bouncer = await startPgBouncer(databaseUrl())
  }, 30_000)
  afterAll(async () => {
    await bouncer?.stop()
  })

  describe("the session limits through PgBouncer", () => {
    sessionLimitTests(pooled, databaseUrl)
  })

  queueStoreSuite(
    "postgres through PgBouncer",
    pooledStores("bq", (schema) => Layer.merge(PgQueueStore.layer({ schema }), queueInspector(schema)))
  )
  jobStoreSuite(
    "postgres through PgBouncer",
    pooledStores("bj", (schema) => Layer.merge(PgJobStore.layer({ schema }), inspectorLayer(schema)))
  )

  describe("wake-ups", () => {
    it("without a direct URL: LISTEN delivers nothing, the subscription is not live, and one line says so and names the fix", async () => {
      const result = await Effect.runPromise(
        Effect.gen(function* () {
          const wakeUps = yield* WakeUps
          const woken: Array<string> = []
          const { value: subscription, lines } = yield* logged(wakeUps.subscribe((topic) => woken.push(topic)))
          return { live: subscription.live(), lines, woken }
        }).pipe(
          Effect.provide(
            PgWakeUps.layer({ schema: "public" }).pipe(
              Layer.provide(Layer.suspend(() => PgKairos.clientLayer({ url: pooled(), maxConnections: 2 })))
            )
          ),
          Effect.scoped
        )
      )
      expect(result.live).toBe(false)
      expect(result.woken).toEqual([])
      expect(result.lines).toEqual([
        `wake-ups fall back to the poll: LISTEN through 127.0.0.1:${bouncer!.port}/${new URL(databaseUrl()).pathname.slice(1)} delivers no notifications (a transaction pooler?): set DIRECT_URL / --direct-url / directUrl to a direct connection to Postgres`
      ])
    })

    it("Kairos.create({ url: pooled, directUrl }): migrates on the direct URL and is woken by NOTIFY there (the poll is a minute)", async () => {
      const schema = uniqueSchemaName("bcreate")
      const lines: Array<string> = []
      const logger = {
        info: (m: string) => lines.push(m),
        warn: (m: string) => lines.push(m),
        error: (m: string) => lines.push(m)
      }
      const kairos = await Kairos.create({
        url: pooled(),
        directUrl: databaseUrl(),
        schema,
        interval: "1 minute",
        logger
      })
      try {
        const handled: Array<number> = []
        await kairos.register("ping", () => void handled.push(Date.now()))
        await kairos.start()
        // Idle now: only a wake-up starts the next item before the minute's poll.
        await new Promise((r) => setTimeout(r, 300))
        const enqueuedAt = Date.now()
        await kairos.enqueue({ taskType: "ping", payload: "{}" })
        await kairos.drain({ timeout: "10 seconds" })
        expect(handled).toHaveLength(1)
        expect(handled[0]! - enqueuedAt).toBeLessThan(2000)
        expect(lines.filter((l) => l.includes("wake-ups fall back"))).toEqual([])
      } finally {
        await kairos.stop()
        const sql = new pg.Pool({ connectionString: databaseUrl(), max: 1 })
        await sql.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
        await sql.end()
      }
    })

    it("the dashboard's live view without a direct URL falls back to its poll: a new item still reaches an open page", async () => {
      const db = await migratedSchema("bdash")
      const dashboard = await startDashboard({ schema: db.schema, url: pooled() }, { pollInterval: "300 millis" })
      try {
        const events = await fetch(`${dashboard.url}/events`)
        const reader = events.body!.getReader()
        const decoder = new TextDecoder()
        let text = decoder.decode((await reader.read()).value)
        expect(text).toContain("connected")
        // Polled every 300 ms: let it take the signature once before the change.
        await new Promise((r) => setTimeout(r, 700))
        await db.query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ('pooled', '{}')`)
        const deadline = Date.now() + 5000
        while (!text.includes("event: change") && Date.now() < deadline) {
          text += decoder.decode((await reader.read()).value)
        }
        expect(text).toContain("event: change\ndata: poll")
        await reader.cancel().catch(() => undefined)
      } finally {
        await dashboard.stop()
        await db.close()
      }
    })
  })

  describe("a refused connection says why", () => {
    const connect = (url: string) =>
      Effect.runPromiseExit(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(
          Effect.provide(PgKairos.clientLayer({ url, maxConnections: 1 })),
          Effect.scoped
        )
      )
    const message = (exit: Exit.Exit<unknown, unknown>) =>
      Exit.isFailure(exit) ? (Cause.squash(exit.cause) as { message?: string }).message : undefined

    it("a startup parameter the pooler refuses, or a database it does not know: its answer, never 'is Postgres running?'", async () => {
      const at = `127.0.0.1:${bouncer!.port}`
      const refused = await connect(`${pooled()}?options=-c%20search_path%3Dpublic`)
      expect(message(refused)).toBe(
        `${at}/${new URL(databaseUrl()).pathname.slice(1)} refused the connection: unsupported startup parameter: options (a connection pooler such as PgBouncer in transaction mode takes no session settings at login: remove it from the URL's query)`
      )
      const unknown = new URL(pooled())
      unknown.pathname = "/nope"
      expect(message(await connect(unknown.toString()))).toBe(
        `${at}/nope refused the connection: no such database: nope (SQLSTATE 08P01)`
      )
    })

    it("and so does the CLI", async () => {
      const bin = path.join(projectRoot, "bin/kairos.js")
      const run = await runCommand(
        process.execPath,
        [bin, "queue", "--database-url", `${pooled()}?options=-c%20search_path%3Dpublic`],
        { cwd: projectRoot, timeout: 60_000 }
      )
      expect(run.status).toBe(1)
      expect(run.stderr).toMatch(
        /^kairos: 127\.0\.0\.1:\d+\/\w+ refused the connection: unsupported startup parameter: options \(/
      )
      expect(run.stderr).not.toContain("is Postgres running")
    })
  })

  describe("transactional handlers through PgBouncer", () => {
    it("a timeout cancels the handler's statement through the pooler and rolls its transaction back", async () => {
      const stores = pooledStores("btx", (schema) =>
        Layer.mergeAll(
          PgJobStore.layer({ schema }),
          PgQueueStore.layer({ schema }),
          PgSettings.layer({ schema }),
          PgWorkerRegistry.layer({ schema })
        )
      )
      const outcome = await Effect.runPromise(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const schema = yield* TestSchema
          const runner = yield* Runner.Runner
          const queue = yield* QueueStore
          const table = `"${schema}".effects`
          yield* sql`CREATE TABLE ${sql.literal(table)} (item text, note text)`
          yield* runner.register(
            "fx-slow",
            (job) =>
              Effect.gen(function* () {
                const sql = yield* SqlClient.SqlClient
                yield* sql`INSERT INTO ${sql.literal(table)} VALUES (${job.id}, 'effect')`
                yield* sql`SELECT pg_sleep(30), 'bouncer-fx-marker'`
              }),
            { transactional: true, timeout: "1 second" }
          )
          yield* runner.register(
            "tx-slow",
            async (job, tx) => {
              await tx.query(`INSERT INTO ${table} VALUES ($1, 'promise')`, [job.id])
              await tx.query("SELECT pg_sleep(30), 'bouncer-tx-marker'")
            },
            { transactional: true, timeout: "1 second" }
          )
          yield* runner.register(
            "tx-fine",
            async (job, tx) => {
              await tx.query(`INSERT INTO ${table} VALUES ($1, 'fine')`, [job.id])
            },
            { transactional: true }
          )
          yield* runner.start
          const started = Date.now()
          for (const type of ["fx-slow", "tx-slow", "tx-fine"])
            yield* queue.enqueue({ taskType: type, payload: "" }, new Date())
          const processed = sql<{ task_type: string; status: string; error_msg: string }>`
            SELECT task_type, status, error_msg FROM ${sql(`${schema}.processed_items`)} ORDER BY task_type`
          let rows = yield* processed
          while (rows.length < 3 && Date.now() - started < 20_000) {
            yield* Effect.sleep("100 millis")
            rows = yield* processed
          }
          const tookMs = Date.now() - started
          const effects = yield* sql<{ note: string }>`SELECT note FROM ${sql.literal(table)}`
          return { rows, tookMs, effects }
        }).pipe(
          Effect.provide(Runner.layer({ workers: 4, interval: "200 millis" }).pipe(Layer.provideMerge(stores))),
          Effect.scoped
        )
      )
      expect(outcome.rows).toEqual([
        { task_type: "fx-slow", status: "error", error_msg: "timed out after 1s: the handler was interrupted" },
        { task_type: "tx-fine", status: "ok", error_msg: "" },
        { task_type: "tx-slow", status: "error", error_msg: "timed out after 1s: the handler was interrupted" }
      ])
      expect(outcome.effects).toEqual([{ note: "fine" }])
      // Cancelled on the server through the pooler (the protocol's cancel request): recorded long before 30 s, and
      // nothing left sleeping on the server.
      expect(outcome.tookMs).toBeLessThan(15_000)
      const direct = new pg.Pool({ connectionString: databaseUrl(), max: 1 })
      try {
        const { rows } = await direct.query(
          `SELECT pid FROM pg_stat_activity WHERE query LIKE '%bouncer-__-marker%' AND pid <> pg_backend_pid()`
        )
        expect(rows).toEqual([])
      } finally {
        await direct.end()
      }
    })

    describe("worker processes", () => {
      let db: TestDb | undefined
      let workers: Array<Worker> = []
      afterEach(async () => {
        killAll(workers)
        workers = []
        await db?.close()
        db = undefined
      })

      it(
        "two workers through the pooler drain transactional items while server backends are killed: one row per success",
        { timeout: 120_000 },
        async () => {
          db = await migratedSchema("btxdrain")
          await db.query(`CREATE TABLE $schema.tx_effects (id bigserial PRIMARY KEY, item_id bigint NOT NULL,
            attempt int NOT NULL, pid int NOT NULL, kind text NOT NULL)`)
          await db.query(`CREATE TABLE $schema.tx_job_effects (id bigserial PRIMARY KEY, run_id bigint, pid int)`)
          const config = { workers: 6, batchSize: 20, interval: "500 millis", leaseDuration: "3 seconds" }
          const start = () =>
            startProcess(
              "test/fixtures/job-worker.ts",
              [JSON.stringify({ config, transactional: true, maxConnections: 8 })],
              { DATABASE_URL: pooled(), DIRECT_URL: databaseUrl(), KAIROS_SCHEMA: db!.schema }
            )
          workers = [start(), start()]
          await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready", 60_000)))
          await db.query(
            `INSERT INTO $schema.queue_items (task_type, payload, max_runs, thread)
             SELECT CASE WHEN i % 2 = 0 THEN 'tx-effect' ELSE 'tx-promise' END, (50 * (i % 5))::text,
               CASE WHEN i % 5 = 0 THEN 2 ELSE 1 END, 1
             FROM generate_series(1, 300) i`
          )
          // The server's backends behind the pooler, killed now and then (a transaction's first).
          let killed = 0
          const drained = async () =>
            (await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0
          while (!(await drained()) && killed < 40) {
            await sleep(250)
            // Only this test's: other files share the database (each in its schema), and a backend of theirs killed
            // here fails them. Every statement kairos sends names its schema.
            const [victim] = await db.query<{ pid: number }>(
              `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND backend_type = 'client backend' AND application_name <> 'kairos-test'
                 AND query NOT LIKE '%LISTEN%' AND xact_start IS NOT NULL AND position($1 in query) > 0
               ORDER BY random() LIMIT 1`,
              [db.schema]
            )
            if (victim === undefined) continue
            await db.query(`SELECT pg_terminate_backend($1)`, [victim.pid])
            killed++
          }
          await until(drained, 60_000, "the queue to drain")
          expect(killed).toBeGreaterThan(0)
          const mismatches = await db.query(
            `WITH e AS (SELECT item_id, count(*)::int AS rows FROM $schema.tx_effects GROUP BY 1),
               p AS (SELECT queue_item_id AS item_id, count(*) FILTER (WHERE status = 'ok')::int AS ok
                     FROM $schema.processed_items GROUP BY 1)
             SELECT coalesce(e.item_id, p.item_id)::text AS item, coalesce(e.rows, 0) AS rows, coalesce(p.ok, 0) AS ok
             FROM e FULL JOIN p ON p.item_id = e.item_id WHERE coalesce(e.rows, 0) <> coalesce(p.ok, 0)`
          )
          expect(mismatches).toEqual([])
          const [counts] = await db.query<{ executions: number; ok: number; rows: number }>(
            `SELECT (SELECT count(*)::int FROM $schema.processed_items) AS executions,
               (SELECT count(*)::int FROM $schema.processed_items WHERE status = 'ok') AS ok,
               (SELECT count(*)::int FROM $schema.tx_effects) AS rows`
          )
          // Every run recorded once (300 items, 60 of them twice), most of them successes.
          expect(counts!.executions).toBe(360)
          expect(counts!.ok).toBeGreaterThan(250)
          expect(counts!.rows).toBe(counts!.ok)
        }
      )
    })
  })

  describe("worker processes through PgBouncer", () => {
    let db: TestDb | undefined
    let workers: Array<Worker> = []
    afterEach(async () => {
      killAll(workers)
      workers = []
      await db?.close()
      db = undefined
    })

    it(
      "three workers drain 600 mixed items exactly once; those given DIRECT_URL are woken by NOTIFY, the other says once that it polls",
      { timeout: 240_000 },
      async () => {
        db = await migratedSchema("bdrain")
        const types = ["t0", "t1", "t2"]
        // A poll long enough that only wake-ups can start the drain within the test's bound, which is wide for a loaded
        // machine (beside four other test files on two cores the drain took longer than 25 s).
        const config = { workers: 8, batchSize: 20, interval: "5 minutes", leaseDuration: "10 seconds" }
        const start = (direct: boolean) =>
          startProcess("test/fixtures/job-worker.ts", [JSON.stringify({ config, types })], {
            DATABASE_URL: pooled(),
            DIRECT_URL: direct ? databaseUrl() : "",
            KAIROS_SCHEMA: db!.schema
          })
        workers = [start(true), start(true), start(false)]
        await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready", 60_000)))
        const inserted = await db.query<{ id: string; max_runs: number }>(
          `INSERT INTO $schema.queue_items (task_type, payload, max_runs, thread)
         SELECT 't' || (i % 3), 'item ' || i, CASE WHEN i % 4 = 0 THEN 3 ELSE 1 END, (i / 7) % 2
         FROM generate_series(1, 600) i
         RETURNING id::text AS id, max_runs`
        )
        const insertedAt = Date.now()
        await until(
          async () =>
            (await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
          120_000,
          "the queue to drain (the poll is 5 minutes: only wake-ups start it)"
        )
        expect(Date.now() - insertedAt).toBeLessThan(120_000)
        const counts = await db.query<{ id: string; n: number }>(
          `SELECT queue_item_id::text AS id, count(*)::int AS n FROM $schema.processed_items GROUP BY queue_item_id`
        )
        const byId = new Map(counts.map((c) => [c.id, c.n]))
        for (const item of inserted) expect(byId.get(item.id) ?? 0).toBe(item.max_runs)
        expect(counts.reduce((n, c) => n + c.n, 0)).toBe(inserted.reduce((n, i) => n + i.max_runs, 0))
        const fallbacks = (w: Worker) =>
          w.events.filter((e) => e.event === "log" && String(e.message).startsWith("wake-ups fall back to the poll"))
        expect(workers.map((w) => fallbacks(w).length)).toEqual([0, 0, 1])
        expect(String(fallbacks(workers[2]!)[0]!.message)).toContain("set DIRECT_URL / --direct-url / directUrl")
        const errors = workers.flatMap((w) => w.events.filter((e) => e.event === "log" && e.level === "ERROR"))
        expect(errors).toEqual([])
      }
    )
  })
})
