/**
 * The statements run per execution (a claim, a batch of results, a chain's step, an enqueue), sent straight to
 * node-postgres's pool. Through `@effect/sql` each such statement cost ~0.3 ms of client work (the statement built
 * and compiled, a span, a connection checked out through an Effect).
 *
 * Named only on a connection known to be a session of its own: a named prepared statement lives in the server
 * session that prepared it, which a transaction pooler (PgBouncer before 1.21, or without `max_prepared_statements`)
 * hands to other clients between transactions. By default (`watchForDirect`) each connection of kairos's pool is
 * asked for its backend's pid before its first statement: on a direct connection it is the pid the server announced
 * at login, through a pooler it is not (the pooler announces its own). Statements are named on the first kind and
 * unnamed on the other. A pool marked with `nameStatements` (the `namedStatements: true` option: a pooler that keeps
 * prepared statements per client) names them on every connection; `namedStatements: false` never.
 *
 * Without a pool (a client kairos did not build), and inside a transaction of `@effect/sql` (`sql.withTransaction`:
 * an enqueue in a user's transaction stays in it), the same text goes through `sql.unsafe` on the client.
 *
 * Every statement is cancellable: interrupting one cancels it on the server (the protocol's cancel request, which a
 * pooler forwards; see PgSession), and its connection goes back to the pool only once the statement has ended and
 * the cancel was answered, so a late cancel can never hit the next statement on that connection.
 */
import { SqlError } from "@effect/sql/SqlError"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import type * as Pg from "pg"
import { interruptStatement } from "./PgSession.js"

/** The node-postgres pool under kairos's own `PgClient` (see `PgKairos.clientLayer`). */
export class PgPool extends Context.Tag("kairos/PgPool")<PgPool, Pg.Pool>() {}

/** The pools whose statements are named (prepared once per connection). */
const namingPools = new WeakSet<Pg.Pool>()

/**
 * Marks `pool` so that the statements `make` builds over it are named prepared statements: for a direct connection
 * (or a pooler that keeps them per client), never through a transaction pooler that does not.
 */
export const nameStatements = (pool: Pg.Pool): void => void namingPools.add(pool)

/** The pools whose connections are checked, the connections checked, and those found to be sessions of their own. */
const watchedPools = new WeakSet<Pg.Pool>()
const checkedClients = new WeakSet<object>()
const directClients = new WeakSet<object>()

/** Names statements on the connections of `pool` that are sessions of their own (see the module's comment). */
export const watchForDirect = (pool: Pg.Pool): void => void watchedPools.add(pool)

/**
 * Calls `then` once `client` is known to be direct or not: at once, or after one `pg_backend_pid()` on its first use
 * (sent before the statement, never beside it). A failed check leaves the connection unnamed; the statement that
 * follows meets whatever failed and says why.
 */
const checkOnce = (pool: Pg.Pool, client: Pg.PoolClient, then: () => void): void => {
  if (!watchedPools.has(pool) || checkedClients.has(client)) return then()
  checkedClients.add(client)
  const announced = (client as unknown as { readonly processID?: unknown }).processID
  client.query("SELECT pg_backend_pid() AS pid", (error, result) => {
    const pid = (result?.rows[0] as { pid?: unknown } | undefined)?.pid
    if (error === null || error === undefined)
      if (typeof announced === "number" && pid === announced) directClients.add(client)
    then()
  })
}

/** Runs one statement with its parameters; rows as node-postgres parses them. */
export type Prepared<Row> = (values: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<Row>, SqlError>

/** A failure that a new plan fixes: the statement's result type or its objects changed under it (a migration). */
const stalePlan = (e: unknown) => {
  const code = (e as { code?: unknown } | null)?.code
  return code === "0A000" || code === "26000"
}

/**
 * Runs `query` on a connection of `pool`, cancellably (see the module's comment). `query` gets the connection and a
 * callback to call once, when the statement ended.
 */
export const cancellable = <A>(
  pool: Pg.Pool,
  query: (client: Pg.PoolClient, done: (error: Error | null | undefined, result?: A) => void) => void,
  onError: (error: unknown) => Effect.Effect<A, SqlError> = (cause) =>
    Effect.fail(new SqlError({ cause, message: "Failed to execute statement" }))
): Effect.Effect<A, SqlError> =>
  Effect.async<A, SqlError>((resume) => {
    let client: Pg.PoolClient | undefined
    let released = false
    let interrupted = false
    // The statement ended (answered, failed, or its connection died).
    let ended = false
    // Set by the canceller: called when the statement ends after an interruption.
    let onEnded: (() => void) | undefined
    const release = (error?: Error) => {
      if (released || client === undefined) return
      released = true
      client.release(error)
    }
    pool.connect((connectError, connected, releaseConnected) => {
      if (connectError) {
        if (!interrupted)
          resume(Effect.fail(new SqlError({ cause: connectError, message: "Failed to acquire connection" })))
        return
      }
      if (interrupted || connected === undefined) {
        releaseConnected()
        return
      }
      client = connected
      // A connection that dies mid-statement emits 'error'; unheard, it would crash the process.
      const onClientError = (error: Error) => {
        if (ended) return
        ended = true
        release(error)
        if (interrupted) onEnded?.()
        else resume(onError(error))
      }
      connected.once("error", onClientError)
      try {
        query(connected, (error, result) => {
          connected.removeListener("error", onClientError)
          if (ended) return
          ended = true
          // After an interruption the canceller releases it, once its cancel was answered too.
          if (interrupted) return onEnded?.()
          release()
          resume(error === undefined || error === null ? Effect.succeed(result as A) : onError(error))
        })
      } catch (error) {
        connected.removeListener("error", onClientError)
        ended = true
        release(error as Error)
        resume(onError(error))
      }
    })
    return Effect.suspend(() => {
      interrupted = true
      // Not connected yet (the connect callback gives the connection back), or already ended: nothing to cancel.
      if (client === undefined || ended) return Effect.void
      return interruptStatement(
        client,
        () => ended,
        (finish) => {
          onEnded = finish
        },
        release
      )
    })
  })

/**
 * Builds the statements: over `pool` when given (kairos's own pool, under the client in context; named when the pool
 * was marked by `nameStatements`), else through the client in context.
 */
export const make = (pool: Pg.Pool | undefined) =>
  Effect.gen(function* () {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    // Named where the pool's marks allow (see the module's comment); unset once a prepared statement's plan went stale (the schema migrated by a
    // newer instance): from then on this store sends its statements unnamed, rather than fail on each connection.
    let named = pool !== undefined && (namingPools.has(pool) || watchedPools.has(pool))

    return <Row>(text: string): Prepared<Row> => {
      // The name is the text's hash: one text, one name, on every connection of the pool.
      const name = `kairos_${createHash("sha1").update(text).digest("hex").slice(0, 24)}`
      const viaClient = (values: ReadonlyArray<unknown>) =>
        sql.unsafe<Row & object>(text, values as Array<never>) as Effect.Effect<ReadonlyArray<Row>, SqlError>
      const direct = (values: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<Row>, SqlError> =>
        cancellable<ReadonlyArray<Row>>(
          pool!,
          (client, done) =>
            checkOnce(pool!, client, () =>
              client.query(
                {
                  name: named && (namingPools.has(pool!) || directClients.has(client)) ? name : undefined,
                  text,
                  values: values as Array<unknown>
                },
                (error, result) => done(error, result?.rows as Array<Row>)
              )
            ),
          (error) => {
            if (named && stalePlan(error)) {
              named = false
              return direct(values)
            }
            return Effect.fail(new SqlError({ cause: error, message: "Failed to execute statement" }))
          }
        )
      return (values) =>
        pool === undefined
          ? viaClient(values)
          : Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (tx) =>
              Option.isSome(tx) ? viaClient(values) : direct(values)
            )
    }
  })
