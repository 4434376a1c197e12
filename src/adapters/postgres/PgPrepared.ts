/**
 * The statements run per execution (a claim, a batch of results, a chain's step, an enqueue) as named prepared
 * statements, sent straight to node-postgres's pool. Through `@effect/sql` each such statement cost ~0.3 ms of client
 * work (the statement built and compiled, a span, a connection checked out through an Effect), and the server parsed
 * and planned it every time: a sequential chain's step took ~1.1 ms against ~0.65 ms this way (measured with one
 * connection on the machine's Postgres).
 *
 * Inside a transaction of `@effect/sql` (`sql.withTransaction`), or over a client kairos did not build (no
 * `PgPool` in context), the same text goes through `sql.unsafe` on that client: an enqueue in a user's
 * transaction stays in it.
 */
import { SqlError } from "@effect/sql/SqlError"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import type * as Pg from "pg"

/** The node-postgres pool under kairos's own `PgClient` (see `PgKairos.clientLayer`). */
export class PgPool extends Context.Tag("kairos/PgPool")<PgPool, Pg.Pool>() {}

/** Runs one statement with its parameters; rows as node-postgres parses them. */
export type Prepared<Row> = (values: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<Row>, SqlError>

/** A failure that a new plan fixes: the statement's result type or its objects changed under it (a migration). */
const stalePlan = (e: unknown) => {
  const code = (e as { code?: unknown } | null)?.code
  return code === "0A000" || code === "26000"
}

/** Builds prepared statements over the client in context, and its pool when kairos built it. */
export const make = Effect.gen(function* () {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const pool = Option.getOrUndefined(yield* Effect.serviceOption(PgPool))
  // Set once a prepared statement's plan went stale (the schema migrated by a newer instance): from then on this
  // store sends its statements unnamed, as @effect/sql does, rather than fail on each connection in turn.
  let named = pool !== undefined

  return <Row>(text: string): Prepared<Row> => {
    // The name is the text's hash: one text, one name, on every connection of the pool.
    const name = `kairos_${createHash("sha1").update(text).digest("hex").slice(0, 24)}`
    const viaClient = (values: ReadonlyArray<unknown>) =>
      sql.unsafe<Row & object>(text, values as Array<never>) as Effect.Effect<ReadonlyArray<Row>, SqlError>
    const direct = (values: ReadonlyArray<unknown>) =>
      Effect.async<ReadonlyArray<Row>, SqlError>((resume) => {
        pool!.query({ name: named ? name : undefined, text, values: values as Array<unknown> }, (error, result) => {
          if (error === undefined || error === null) resume(Effect.succeed(result.rows as Array<Row>))
          else if (named && stalePlan(error)) {
            named = false
            resume(direct(values))
          } else resume(Effect.fail(new SqlError({ cause: error, message: "Failed to execute statement" })))
        })
      })
    return (values) =>
      pool === undefined
        ? viaClient(values)
        : Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) =>
            Option.isSome(tx) ? viaClient(values) : direct(values)
          )
  }
})
