/**
 * The session limits of kairos's connections (`statementTimeout`, `idleInTransactionTimeout`: PgSession), as tests
 * run on any URL: the test database directly (test/adapters/pgSession.test.ts) and through a PgBouncer in
 * transaction mode (test/integration/pgbouncer.test.ts). `url` is read when a test runs; `direct` is the database
 * itself, for the observer's side of a lock. Wall time: about 4 s.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Exit } from "effect"
import pg from "pg"
import { afterAll, beforeAll, expect, it } from "vitest"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { uniqueSchemaName } from "./database.js"

/** The database's error under a failure, as node-postgres gave it. */
const pgError = (exit: Exit.Exit<unknown, unknown>): { code?: string; message?: string } => {
  let current: unknown = Exit.isFailure(exit) ? exit.cause : undefined
  // Cause → SqlError → the driver's error.
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const e = current as { code?: unknown; error?: unknown; failure?: unknown; cause?: unknown }
    if (typeof e.code === "string") return current as { code: string; message: string }
    current = e.failure ?? e.error ?? e.cause
  }
  return {}
}

export const sessionLimitTests = (url: () => string, direct: () => string): void => {
  const schema = uniqueSchemaName("limits")
  let plain: pg.Pool
  beforeAll(async () => {
    plain = new pg.Pool({ connectionString: direct(), max: 2 })
    await plain.query(
      `CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".t (id int PRIMARY KEY); INSERT INTO "${schema}".t VALUES (1)`
    )
  })
  afterAll(async () => {
    await plain.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await plain.end()
  })

  const run = <A, E>(
    options: Partial<PgKairos.Options>,
    effect: Effect.Effect<A, E, SqlClient.SqlClient>,
    at = url()
  ): Promise<Exit.Exit<A, unknown>> =>
    Effect.runPromiseExit(
      effect.pipe(
        Effect.provide(
          PgKairos.clientLayer({ url: at, maxConnections: 1, applicationName: "kairos-test", ...options })
        ),
        Effect.scoped
      )
    )

  const withQuery = (u: string, query: string) => `${u}${u.includes("?") ? "&" : "?"}${query}`

  it("a transaction runs with a one-minute statement timeout and a 30 s idle-in-transaction timeout by default; a URL setting wins, never sent at login", async () => {
    const show = Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      return yield* sql.withTransaction(
        Effect.gen(function* () {
          const [a] = yield* sql<{ statement_timeout: string }>`SHOW statement_timeout`
          const [b] = yield* sql<{ t: string }>`SELECT current_setting('idle_in_transaction_session_timeout') AS t`
          return [a!.statement_timeout, b!.t]
        })
      )
    })
    expect(await run({}, show)).toEqual(Exit.succeed(["1min", "30s"]))
    expect(await run({ statementTimeout: "3 seconds", idleInTransactionTimeout: 0 }, show)).toEqual(
      Exit.succeed(["3s", "0"])
    )
    // A pooler refuses statement_timeout as a startup parameter: the URL's is applied the same way instead.
    expect(await run({}, show, withQuery(url(), "statement_timeout=5000"))).toEqual(Exit.succeed(["5s", "30s"]))
    // And the session itself keeps the server's defaults: nothing was set at login.
    const serverDefault = (await plain.query<{ statement_timeout: string }>("SHOW statement_timeout")).rows[0]!
    const session = await run(
      {},
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ statement_timeout: string }>`SHOW statement_timeout`),
      withQuery(url(), "statement_timeout=5000")
    )
    expect(session).toEqual(Exit.succeed([serverDefault]))
  })

  it("a statement outside a transaction that runs longer than statementTimeout is cancelled, as a statement timeout; the connection serves the next one", async () => {
    const exit = await run(
      { statementTimeout: "400 millis" },
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const started = Date.now()
        const slow = yield* Effect.exit(sql`SELECT pg_sleep(5)`)
        const took = Date.now() - started
        // One connection: the next statement runs on the one whose statement was cancelled.
        const [next] = yield* sql<{ one: number }>`SELECT 1 AS one`
        return { slow, took, next: next!.one }
      })
    )
    expect(Exit.isSuccess(exit)).toBe(true)
    const { slow, took, next } = (
      exit as Exit.Success<{ slow: Exit.Exit<unknown, unknown>; took: number; next: number }, unknown>
    ).value
    expect(pgError(slow)).toMatchObject({ code: "57014", message: "canceling statement due to statement timeout" })
    expect(took).toBeGreaterThanOrEqual(380)
    expect(took).toBeLessThan(3000)
    expect(next).toBe(1)
  })

  it("a statement inside a transaction is cancelled by the server at statementTimeout", async () => {
    const started = Date.now()
    const exit = await run(
      { statementTimeout: "400 millis" },
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(sql`SELECT pg_sleep(5)`))
    )
    expect(pgError(exit)).toMatchObject({ code: "57014", message: "canceling statement due to statement timeout" })
    expect(Date.now() - started).toBeLessThan(3000)
  })

  it("a transaction left idle past idleInTransactionTimeout (a frozen process) is ended by the server and its locks released", async () => {
    const frozen = run(
      { idleInTransactionTimeout: "1 second" },
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        return yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`SELECT id FROM ${sql(schema)}.t WHERE id = 1 FOR UPDATE`
            // Frozen: nothing is sent for longer than the timeout.
            yield* Effect.sleep(Duration.millis(2500))
            return yield* sql`SELECT 1`
          })
        )
      })
    )
    // Once the frozen session holds the row (a NOWAIT probe fails), another session gets it well before the frozen
    // one would have come back.
    const holds = async () =>
      plain.query(`SELECT id FROM "${schema}".t WHERE id = 1 FOR UPDATE NOWAIT`).then(
        () => false,
        () => true
      )
    while (!(await holds())) await new Promise((r) => setTimeout(r, 20))
    const lockedAt = Date.now()
    const other = await plain.connect()
    try {
      await other.query("BEGIN")
      await other.query("SET LOCAL lock_timeout = '10s'")
      await other.query(`SELECT id FROM "${schema}".t WHERE id = 1 FOR UPDATE`)
      expect(Date.now() - lockedAt).toBeLessThan(2400)
      await other.query("COMMIT")
    } finally {
      other.release()
    }
    // And the frozen one learns that its transaction is gone: nothing it did after the timeout counts.
    expect(Exit.isFailure(await frozen)).toBe(true)
  })
}
