/**
 * PgPrepared's statements are cancellable: an interrupted statement stops running on the server at once, whether it
 * went to kairos's pool as a prepared statement or through the client. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import { randomBytes } from "node:crypto"
import * as PgPrepared from "../../src/adapters/postgres/PgPrepared.js"
import { PgTestClient } from "../support/database.js"

/** How many backends run a statement containing `marker` (other than this query). */
const running = (marker: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE state = 'active' AND query LIKE ${`%${marker}%`} AND pid <> pg_backend_pid()`.pipe(
      Effect.map((rows) => rows[0]!.n)
    )
  )

/** Polls until `count` reads `want`, for at most `within`; returns how long it took. */
const until = (count: Effect.Effect<number, unknown, SqlClient.SqlClient>, want: number, within: Duration.Duration) =>
  Effect.gen(function* () {
    const start = Date.now()
    while ((yield* count) !== want) {
      if (Date.now() - start > Duration.toMillis(within)) return yield* Effect.fail(new Error(`still not ${want}`))
      yield* Effect.sleep("20 millis")
    }
    return Date.now() - start
  })

layer(PgTestClient, { timeout: "60 seconds", excludeTestServices: true })("PgPrepared", (it) => {
  for (const via of ["the pool", "the client"] as const) {
    it.effect(`an interrupted statement through ${via} is cancelled on the server within a second or two`, () =>
      Effect.gen(function* () {
        const pool = via === "the pool" ? yield* PgPrepared.PgPool : undefined
        const prepare = yield* PgPrepared.make(pool)
        const marker = `kairos_cancel_${randomBytes(6).toString("hex")}`
        const sleep = prepare<{ slept: string }>(`SELECT pg_sleep(30)::text AS slept /* ${marker} */`)
        const fiber = yield* Effect.fork(sleep([]))
        yield* until(running(marker), 1, Duration.seconds(10))
        const interrupted = Date.now()
        yield* Fiber.interrupt(fiber)
        // The interruption waits for the cancel: when it returns, the statement is gone (or going).
        yield* until(running(marker), 0, Duration.seconds(2))
        expect(Date.now() - interrupted).toBeLessThan(2000)
        // The connection went back to the pool in working order: the same statement text runs on it again.
        const quick = prepare<{ n: number }>(`SELECT 1 AS n /* ${marker} */`)
        for (let i = 0; i < 12; i++) expect(yield* quick([])).toEqual([{ n: 1 }])
      })
    )
  }

  it.effect("on a direct connection, kairos's pool names its statements (prepared once per connection)", () =>
    Effect.gen(function* () {
      const prepare = yield* PgPrepared.make(yield* PgPrepared.PgPool)
      const marker = `kairos_named_${randomBytes(6).toString("hex")}`
      // The statement lists the session's prepared statements: when it was sent named, its own name is among them.
      const own = prepare<{ names: Array<string> }>(
        `SELECT coalesce(array_agg(name), '{}') AS names FROM pg_prepared_statements WHERE statement LIKE '%${marker}%'`
      )
      const seen = new Set<string>()
      // A new connection is asked which session it is before its statements are named: a few runs see one named.
      for (let i = 0; i < 6; i++) for (const name of (yield* own([]))[0]!.names) seen.add(name)
      expect([...seen]).toHaveLength(1)
      expect([...seen][0]).toMatch(/^kairos_[0-9a-f]{24}$/)
    })
  )
})
