/**
 * Transactional executions on Postgres (see ports/Transaction): one connection held for the execution, a transaction
 * begun on it, the handler run inside it, the execution's record made inside it (fenced by its lease, by the store's
 * own statement), and the commit — or a rollback of everything.
 *
 * - The handler's `SqlClient` is the transaction: the run is given @effect/sql's `TransactionConnection`, which every
 *   SqlClient's statements use while it is in context (kairos's own, an enqueue among them, and the application's).
 *   Code that is not Effect gets `tx.query`. Both are valid until the handler returns: later statements are refused.
 * - The limits are the execution's own, set with `SET LOCAL` in the `BEGIN`'s round trip (no session state: it holds
 *   through a transaction pooler): the statement and idle-in-transaction timeouts a little past the handler's
 *   timeout. A handler awaiting other work inside its transaction is not ended by the database before the runner
 *   times it out; a frozen process's transaction is ended by the server then, releasing its locks. Once the handler
 *   returned, the client times the record and COMMIT by its own statement timeout (PgSession).
 * - No lock is taken on the item's or run's row before the record: the lease keeper renews the execution's lease
 *   (an update of that row, on another connection) all through the handler. The record locks it, just before COMMIT.
 * - Interrupted (its timeout, a lost lease, a forced stop), the run's statement in flight is cancelled (the protocol's
 *   cancel request, which a pooler forwards: see PgSession) and the transaction rolled back. Once the run returned,
 *   the record and COMMIT are not interrupted: an execution is either committed or not, never cut between.
 *
 * On kairos's own pool (`PgPool`), the connection is taken from it directly, and at most all but two of its
 * connections are held by transactional executions at once (the others wait for one, their timeout running): the
 * lease keeper, the claims and the results writer always find a connection. Over a client of the application's own,
 * the connection is reserved through that client (its statements are then cancelled as @effect/sql-pg cancels them).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type * as SqlConnection from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type * as Pg from "pg"
import type { Transacted, Transaction, TransactOptions } from "../../ports/Transaction.js"
import { classify, type PgFailure } from "./PgErrors.js"
import { interruptStatement, ownStatementsFollow } from "./PgSession.js"

/** How far past the handler's timeout the database's own limits on its transaction are set (ms). */
export const LIMIT_MARGIN_MS = 5000

/** Connections of a pool that transactional executions leave to everything else. */
const LEFT_TO_OTHERS = 2

/** The `BEGIN` of a transactional execution: its limits set in the same round trip (0: none). */
export const beginFor = (timeoutMs: number): string => {
  const limit = timeoutMs > 0 ? Math.round(timeoutMs) + LIMIT_MARGIN_MS : 0
  return `BEGIN; SET LOCAL statement_timeout = ${limit}; SET LOCAL idle_in_transaction_session_timeout = ${limit}`
}

/** A connection held for one transactional execution. */
interface Held {
  readonly connection: SqlConnection.Connection
  /** Says that kairos's own statements follow (the handler returned), on a connection of kairos's pool (PgSession). */
  readonly ownStatementsFollow: () => void
  /** Gives the connection back; `broken`: its state is not known (destroyed, when that is possible). */
  readonly release: (broken: boolean) => Effect.Effect<void>
}

const statementFailed = (cause: unknown) => new SqlError({ cause, message: "Failed to execute statement" })

/**
 * Runs one statement on `client`, cancellably: interrupted, it is cancelled on the server (see PgSession), and the
 * interruption ends once the statement ended and the cancel was answered (or after 5 s).
 */
const onClient = <A>(
  client: Pg.PoolClient,
  send: (done: (error: Error | null | undefined, result?: A) => void) => void
): Effect.Effect<A, SqlError> =>
  Effect.async<A, SqlError>((resume) => {
    let ended = false
    let interrupted = false
    let onEnded: (() => void) | undefined
    try {
      send((error, result) => {
        ended = true
        if (interrupted) return onEnded?.()
        resume(
          error === null || error === undefined ? Effect.succeed(result as A) : Effect.fail(statementFailed(error))
        )
      })
    } catch (error) {
      ended = true
      resume(Effect.fail(statementFailed(error)))
    }
    return Effect.suspend(() => {
      interrupted = true
      if (ended) return Effect.void
      return interruptStatement(
        client,
        () => ended,
        (finish) => {
          onEnded = finish
        }
      )
    })
  })

type Rows = ReadonlyArray<Record<string, unknown>>

/** node-postgres's answer, as @effect/sql-pg gives it: the rows, or one array of rows per statement. */
const rowsOf = (result: Pg.QueryResult | ReadonlyArray<Pg.QueryResult>): Rows | ReadonlyArray<Rows> =>
  Array.isArray(result)
    ? (result as ReadonlyArray<Pg.QueryResult>).map((r) => r.rows ?? [])
    : ((result as Pg.QueryResult).rows ?? [])

/** An @effect/sql connection over a node-postgres client of kairos's pool (statements cancelled as above). */
const clientConnection = (client: Pg.PoolClient): SqlConnection.Connection => {
  const raw = (text: string, params: ReadonlyArray<unknown>) =>
    onClient<Pg.QueryResult>(client, (done) => client.query(text, params as Array<unknown>, done))
  const execute: SqlConnection.Connection["execute"] = (text, params, transformRows) =>
    Effect.map(raw(text, params), (result) => {
      const rows = rowsOf(result) as Array<object>
      return transformRows === undefined ? rows : transformRows(rows)
    })
  return {
    execute,
    executeRaw: raw,
    executeUnprepared: execute,
    executeWithoutTransform: (text: string, params: ReadonlyArray<unknown>) => execute(text, params, undefined),
    executeValues: (text, params) =>
      Effect.map(
        onClient<Pg.QueryArrayResult>(client, (done) =>
          client.query({ text, values: params as Array<unknown>, rowMode: "array" }, done)
        ),
        (result) => result.rows
      ),
    executeStream: (text, params, transformRows) =>
      Stream.unwrap(Effect.map(execute(text, params, transformRows), (rows) => Stream.fromIterable(rows)))
  } as SqlConnection.Connection
}

/** The permits of each pool: all its connections but LEFT_TO_OTHERS. */
const permitsOf = new WeakMap<Pg.Pool, Effect.Semaphore>()
const permits = (pool: Pg.Pool): Effect.Semaphore => {
  let semaphore = permitsOf.get(pool)
  if (semaphore === undefined) {
    semaphore = Effect.unsafeMakeSemaphore(Math.max(1, (pool.options.max ?? 10) - LEFT_TO_OTHERS))
    permitsOf.set(pool, semaphore)
  }
  return semaphore
}

/** A connection of kairos's own pool, after a permit. Interruptible while it waits. */
const fromPool = (pool: Pg.Pool): Effect.Effect<Held, SqlError> => {
  const semaphore = permits(pool)
  const connect = Effect.async<Held, SqlError>((resume) => {
    let cancelled = false
    pool.connect((error, client, done) => {
      if (error !== undefined && error !== null) {
        if (!cancelled) resume(Effect.fail(new SqlError({ cause: error, message: "Failed to acquire connection" })))
        return
      }
      if (client === undefined) return
      if (cancelled) return done()
      // A connection that dies while held emits 'error': unheard, it would end the process.
      let dead: Error | undefined
      const onError = (e: Error) => {
        dead = e
      }
      client.on("error", onError)
      resume(
        Effect.succeed({
          connection: clientConnection(client),
          ownStatementsFollow: () => ownStatementsFollow(client),
          release: (broken) =>
            Effect.sync(() => {
              client.off("error", onError)
              done(dead ?? (broken ? new Error("kairos: a transaction's connection in an unknown state") : undefined))
            }).pipe(Effect.ensuring(semaphore.release(1)))
        })
      )
    })
    return Effect.sync(() => {
      cancelled = true
    })
  })
  // The permit is held from its take to the connection's release: given back by whatever ends the wait otherwise.
  return Effect.uninterruptibleMask((restore) =>
    Effect.zipRight(
      restore(semaphore.take(1)),
      restore(connect).pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : semaphore.release(1))))
    )
  )
}

/**
 * A connection reserved through the client in context (one kairos did not build). Not interruptible while it waits:
 * @effect/sql-pg would never give back a connection that arrived after its wait was interrupted.
 */
const fromClient = (sql: SqlClient.SqlClient): Effect.Effect<Held, SqlError> =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const connection = yield* Scope.extend(sql.reserve, scope).pipe(
      Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void))
    )
    // An application's client: its statements are timed as that client times them.
    return { connection, release: () => Scope.close(scope, Exit.void), ownStatementsFollow: () => undefined }
  })

/** The message of a statement sent after the transaction ended. */
const OVER =
  "the transaction is over: its handler returned, failed or was interrupted (a statement sent later runs nowhere)"

/**
 * The handler's view of the connection: open until its run ends; every statement sent through `tx.query` runs in a
 * fiber of its own, so those still in flight can be awaited (the run returned) or cancelled (it did not).
 */
const handlerView = (connection: SqlConnection.Connection) => {
  let open = true
  const inFlight = new Set<Fiber.RuntimeFiber<unknown, SqlError>>()
  const over = () => new SqlError({ cause: new Error(OVER), message: OVER })
  const guard = <A>(effect: () => Effect.Effect<A, SqlError>): Effect.Effect<A, SqlError> =>
    Effect.suspend(() => (open ? effect() : Effect.fail(over())))
  const view: SqlConnection.Connection = {
    execute: (text, params, transformRows) => guard(() => connection.execute(text, params, transformRows)),
    executeRaw: (text, params) => guard(() => connection.executeRaw(text, params)),
    executeUnprepared: (text, params, transformRows) =>
      guard(() => connection.executeUnprepared(text, params, transformRows)),
    executeValues: (text, params) => guard(() => connection.executeValues(text, params)),
    executeStream: (text, params, transformRows) =>
      Stream.unwrap(guard(() => Effect.succeed(connection.executeStream(text, params, transformRows))))
  }
  const tx: Transaction = {
    query: <Row>(text: string, values?: ReadonlyArray<unknown>) =>
      new Promise<{ readonly rows: ReadonlyArray<Row> }>((resolve, reject) => {
        if (!open) return reject(new Error(OVER))
        const fiber = Effect.runFork(connection.executeRaw(text, values ?? []))
        inFlight.add(fiber)
        fiber.addObserver((exit) => {
          inFlight.delete(fiber)
          if (Exit.isSuccess(exit)) {
            const result = exit.value as Pg.QueryResult | ReadonlyArray<Pg.QueryResult>
            const last = Array.isArray(result) ? result[result.length - 1] : result
            return resolve({ rows: ((last as Pg.QueryResult | undefined)?.rows ?? []) as ReadonlyArray<Row> })
          }
          // The driver's own error (its message, SQLSTATE `code`, detail), as node-postgres would reject with it.
          const error = Cause.squash(exit.cause)
          reject(error instanceof SqlError && error.cause !== undefined ? error.cause : error)
        })
      })
  }
  return {
    view,
    tx,
    /** Ends the handler's access: statements in flight are awaited, or, when `cancel`, cancelled. */
    close: (cancel: boolean) =>
      Effect.suspend(() => {
        open = false
        const fibers = [...inFlight]
        if (fibers.length === 0) return Effect.void
        return cancel ? Fiber.interruptAll(fibers) : Effect.asVoid(Fiber.awaitAll(fibers))
      })
  }
}

/**
 * Runs a transactional execution (see the module's comment). `record` gives the store's fenced record of the run's
 * value (true: recorded; false: the lease was lost), or undefined to roll back; `toError` maps what went wrong with
 * the transaction itself to the store's error.
 */
export const transact = <A, StoreError>(
  source: { readonly pool: Pg.Pool | undefined; readonly sql: SqlClient.SqlClient },
  run: (tx: Transaction) => Effect.Effect<A>,
  record: (value: A) => Effect.Effect<boolean, StoreError> | undefined,
  options: TransactOptions,
  toError: (failure: PgFailure) => StoreError
): Effect.Effect<Transacted<A>, StoreError> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function* () {
      const fail = (e: unknown) => Effect.fail(toError(classify(e)))
      const acquired = yield* Effect.exit(
        source.pool === undefined ? fromClient(source.sql) : restore(fromPool(source.pool))
      )
      if (Exit.isFailure(acquired)) {
        if (Cause.isInterruptedOnly(acquired.cause))
          return yield* Effect.failCause(acquired.cause as Cause.Cause<never>)
        return yield* fail(Cause.squash(acquired.cause))
      }
      const held = acquired.value
      const { connection } = held
      // A ROLLBACK that fails leaves the connection in a state no one knows: it is not given back as it is.
      const rollBack = Effect.flatMap(Effect.exit(connection.executeUnprepared("ROLLBACK", [], undefined)), (exit) =>
        held.release(Exit.isFailure(exit))
      )
      const begun = yield* Effect.exit(connection.executeUnprepared(beginFor(options.timeoutMs), [], undefined))
      if (Exit.isFailure(begun)) {
        yield* rollBack
        return yield* fail(Cause.squash(begun.cause))
      }
      const handler = handlerView(connection)
      const ran = yield* Effect.exit(
        restore(run(handler.tx)).pipe(Effect.provideService(SqlClient.TransactionConnection, [handler.view, 0]))
      )
      yield* handler.close(Exit.isFailure(ran))
      if (Exit.isFailure(ran)) {
        yield* rollBack
        return yield* Effect.failCause(ran.cause)
      }
      const value = ran.value
      const recording = record(value)
      if (recording === undefined) {
        yield* rollBack
        return { _tag: "RolledBack", value } as const
      }
      // The handler returned: what is left, the record and COMMIT, is kairos's own work, and the client times it by
      // kairos's statement timeout, not the handler's (15 minutes by default): a network that freezes now frees the
      // worker within a minute or so. Nothing is sent for it (a SET LOCAL cost a round trip, ~13 % of a transactional
      // drain); the server keeps the handler's limits.
      held.ownStatementsFollow()
      // The store's own statements, on the transaction's connection (kairos's, not the handler's view).
      const recorded = yield* Effect.exit(
        recording.pipe(Effect.provideService(SqlClient.TransactionConnection, [connection, 0]))
      )
      if (Exit.isFailure(recorded)) {
        yield* rollBack
        return yield* Effect.failCause(recorded.cause)
      }
      if (!recorded.value) {
        yield* rollBack
        return { _tag: "Refused", value } as const
      }
      const committed = yield* Effect.exit(connection.executeUnprepared("COMMIT", [], undefined))
      // A COMMIT that failed may have committed all the same (its answer lost with the connection).
      yield* held.release(Exit.isFailure(committed))
      if (Exit.isFailure(committed)) return yield* fail(Cause.squash(committed.cause))
      return { _tag: "Committed", value } as const
    })
  )
