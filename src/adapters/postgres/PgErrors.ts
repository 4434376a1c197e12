/**
 * One mapping from whatever Postgres work ends with — a SqlError, a row that does not decode, or a defect (a failed
 * ROLLBACK on a dead connection surfaces as one from @effect/sql's `withTransaction`) — to a port's error.
 */
import { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schedule from "effect/Schedule"
import { isSqlState } from "./PgConnect.js"

/** What every port error of the Postgres adapters carries. */
export type PgFailureReason = "Unavailable" | "Conflict" | "Decode" | "Invalid" | "Unknown"

/** A classified failure: the port wraps it in its own error class. */
export interface PgFailure {
  readonly reason: PgFailureReason
  readonly message: string
  readonly cause: unknown
}

const causeOf = (e: SqlError) => e.cause as { code?: unknown; syscall?: unknown } | undefined
const codeOf = (e: SqlError): unknown => causeOf(e)?.code

/**
 * Whether a SqlError's cause is the socket's (Node's system error: ECONNRESET, ECONNREFUSED, EPIPE, ETIMEDOUT...: a
 * `syscall` that failed), not Postgres's answer (an SQLSTATE, which EPIPE's five capitals also look like).
 */
const isSocketError = (e: SqlError): boolean => {
  const cause = causeOf(e)
  return typeof cause?.syscall === "string" || (typeof cause?.code === "string" && !isSqlState(cause.code))
}

/** Classifies one failure. */
export const classify = (e: unknown): PgFailure => {
  if (ParseResult.isParseError(e)) return { reason: "Decode", message: `unexpected row: ${e.message}`, cause: e }
  if (e instanceof SqlError) {
    const code = codeOf(e)
    const detail = (e.cause as { message?: unknown } | undefined)?.message
    const message = typeof detail === "string" ? detail : e.message
    if (code === "23505") return { reason: "Conflict", message, cause: e }
    if (code === "23514" || code === "22P02") return { reason: "Invalid", message, cause: e }
    // A write on a standby (or a read-only session): the database is not there to write to, which a retry may fix
    // (a failover promotes it, or moves the URL back to a primary).
    if (code === "25006")
      return { reason: "Unavailable", message: `the database is read-only (a standby?): ${message}`, cause: e }
    // Class 08 (connection), 57P (shutdown, terminated), 53300 (too many connections: the server refused a new one),
    // no code at all (the socket went away), or the socket's own code, which is no SQLSTATE (ECONNRESET, ECONNREFUSED,
    // EPIPE, ETIMEDOUT...: the connection died or none could be made): unavailable.
    if (
      code === undefined ||
      isSocketError(e) ||
      code === "53300" ||
      (typeof code === "string" && (code.startsWith("08") || code.startsWith("57P")))
    ) {
      return { reason: "Unavailable", message, cause: e }
    }
    return { reason: "Unknown", message, cause: e }
  }
  const message = e instanceof Error ? e.message : String(e)
  return { reason: "Unavailable", message: `the database connection failed: ${message}`, cause: e }
}

/**
 * Maps every way `self` can end badly — failures and defects alike — to the port's error. Interruption passes
 * through, and so does a failure that is the port's error already (`isOwn`): classified again, it would read as a lost
 * connection. Put it around every store method, transactions above all.
 */
export const mapPgErrors =
  <E>(toError: (failure: PgFailure) => E, isOwn: (e: unknown) => e is E = (_): _ is E => false) =>
  <A, R>(self: Effect.Effect<A, unknown, R>): Effect.Effect<A, E, R> =>
    Effect.catchAllCause(self, (cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
      const failure = Cause.failureOption(cause)
      if (failure._tag === "Some" && isOwn(failure.value)) return Effect.fail(failure.value)
      return Effect.fail(toError(classify(failure._tag === "Some" ? failure.value : Cause.squash(cause))))
    })

/**
 * A transaction around `self`: `self`'s own failures pass through; a database failure, and any defect (a ROLLBACK
 * that failed on a dead connection), becomes the port's error.
 */
export const transactionWith =
  <StoreError>(
    withTransaction: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>,
    toError: (failure: PgFailure) => StoreError
  ) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, SqlError> | StoreError, R> =>
    Effect.catchAllCause(withTransaction(self), (cause): Effect.Effect<never, Exclude<E, SqlError> | StoreError> => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
      const failure = Cause.failureOption(cause)
      if (failure._tag === "Some" && !(failure.value instanceof SqlError)) {
        return Effect.fail(failure.value as Exclude<E, SqlError>)
      }
      return Effect.fail(toError(classify(failure._tag === "Some" ? failure.value : Cause.squash(cause))))
    })

/**
 * Whether a statement lost a deadlock (40P01) or a serialization failure (40001): Postgres aborted it (or the
 * transaction around it) as a whole, so running it again is safe.
 */
export const isLockConflict = (e: unknown): boolean => {
  const code = e instanceof SqlError ? codeOf(e) : undefined
  return code === "40P01" || code === "40001"
}

const lockConflictRetries = Schedule.exponential("20 millis").pipe(
  Schedule.jittered,
  Schedule.intersect(Schedule.recurs(4))
)

/**
 * `self` run again, up to four times, while it loses a deadlock or a serialization failure. `self` must be a
 * statement or a whole transaction (`withTransaction`: a savepoint inside a caller's transaction, which the retry
 * rolls back to), never a statement inside a transaction it does not own.
 */
export const retryLockConflicts = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.retry(self, { while: isLockConflict, schedule: lockConflictRetries })
