/**
 * The sessions kairos opens bound how long a frozen process can hold locks: a statement timeout and an
 * idle-in-transaction timeout, set by `PgKairos.clientLayer`. Integration: a real Postgres, wall time (about 2 s).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Exit } from "effect"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"

const schema = uniqueSchemaName("session")
const plain = new pg.Pool({ connectionString: databaseUrl(), max: 2 })
afterAll(async () => {
  await plain.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await plain.end()
})

describe("PgKairos.clientLayer sessions", () => {
  it("carry a one-minute statement timeout and a 30 s idle-in-transaction timeout by default; a URL setting wins", async () => {
    const show = (url: string) =>
      Effect.runPromise(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const [a] = yield* sql<{ statement_timeout: string }>`SHOW statement_timeout`
          const [b] = yield* sql<{
            idle_in_transaction_session_timeout: string
          }>`SHOW idle_in_transaction_session_timeout`
          return [a!.statement_timeout, b!.idle_in_transaction_session_timeout]
        }).pipe(Effect.provide(PgKairos.clientLayer({ url, maxConnections: 1 })), Effect.scoped)
      )
    expect(await show(databaseUrl())).toEqual(["1min", "30s"])
    const withOwn = `${databaseUrl()}${databaseUrl().includes("?") ? "&" : "?"}statement_timeout=5000`
    expect(await show(withOwn)).toEqual(["5s", "30s"])
  })

  it("a transaction left idle past the timeout (a frozen process) is ended by the server and its locks released", async () => {
    await plain.query(
      `CREATE SCHEMA "${schema}"; CREATE TABLE "${schema}".t (id int PRIMARY KEY); INSERT INTO "${schema}".t VALUES (1)`
    )
    const frozen = Effect.runPromiseExit(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        return yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`SELECT id FROM ${sql(schema)}.t WHERE id = 1 FOR UPDATE`
            // Frozen: nothing is sent for longer than the timeout.
            yield* Effect.promise(() => new Promise((r) => setTimeout(r, 2500)))
            return yield* sql`SELECT 1`
          })
        )
      }).pipe(
        Effect.provide(
          PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 1, idleInTransactionTimeout: "1 second" })
        ),
        Effect.scoped
      )
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
})
