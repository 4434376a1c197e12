/**
 * How the Postgres adapters classify what went wrong, pass their own errors through, and run again what lost a
 * deadlock. Unit: SqlErrors made here, Effect's TestClock for the waits between tries.
 */
import { SqlError } from "@effect/sql/SqlError"
import { expect, it } from "@effect/vitest"
import { Effect, Either, Fiber, TestClock } from "effect"
import { isLockConflict, mapPgErrors, retryLockConflicts } from "../../src/adapters/postgres/PgErrors.js"
import { QueueStoreError } from "../../src/index.js"

const pgError = (code: string, message: string) =>
  new SqlError({ cause: Object.assign(new Error(message), { code }), message: "Failed to execute statement" })

const toStoreError = mapPgErrors(
  (f) => new QueueStoreError({ reason: f.reason === "Unavailable" ? "Unavailable" : "Unknown", message: f.message }),
  (e): e is QueueStoreError => e instanceof QueueStoreError
)

it("a deadlock and a serialization failure are lock conflicts; a unique violation or a lost connection is not", () => {
  expect(isLockConflict(pgError("40P01", "deadlock detected"))).toBe(true)
  expect(isLockConflict(pgError("40001", "could not serialize access"))).toBe(true)
  expect(isLockConflict(pgError("23505", "duplicate key"))).toBe(false)
  expect(isLockConflict(pgError("57P01", "terminating connection"))).toBe(false)
  expect(isLockConflict(new Error("deadlock detected"))).toBe(false)
})

it.effect("a store error raised inside a mapped effect passes through as it was, not as a lost connection", () =>
  Effect.gen(function* () {
    const own = new QueueStoreError({ reason: "Unknown", message: "the queued items kept disappearing" })
    expect(yield* Effect.flip(toStoreError(Effect.fail(own)))).toBe(own)
    const mapped = yield* Effect.flip(toStoreError(Effect.fail(pgError("40P01", "deadlock detected"))))
    expect(mapped).toMatchObject({ reason: "Unknown", message: "deadlock detected" })
    // Anything else that is not the database's answer reads as a lost connection.
    expect(yield* Effect.flip(toStoreError(Effect.fail(new Error("socket hang up"))))).toMatchObject({
      reason: "Unavailable"
    })
  })
)

it.effect("a connection the socket lost or could not make is unavailable; the database's own answers are not", () =>
  Effect.gen(function* () {
    const reason = (e: unknown) => Effect.map(Effect.flip(toStoreError(Effect.fail(e))), (f) => f.reason)
    // What the server says as it ends a connection.
    for (const [code, message] of [
      ["57P01", "terminating connection due to administrator command"],
      ["08006", "connection failure"],
      // A connection refused at its start: none could be made (a transactional execution is let go, not failed).
      ["53300", "sorry, too many clients already"]
    ] as const)
      expect([code, yield* reason(pgError(code, message))]).toEqual([code, "Unavailable"])
    // Node's system errors, as the socket ends with them: reset, broken, refused, timed out.
    for (const [code, syscall] of [
      ["ECONNRESET", "read"],
      ["EPIPE", "write"],
      ["ECONNREFUSED", "connect"],
      ["ETIMEDOUT", "connect"]
    ] as const) {
      const cause = Object.assign(new Error(`${syscall} ${code}`), { code, errno: -1, syscall })
      const error = new SqlError({ cause, message: "Failed to execute statement" })
      expect([code, yield* reason(error)]).toEqual([code, "Unavailable"])
    }
    expect(yield* reason(new SqlError({ cause: new Error("Connection terminated unexpectedly"), message: "x" }))).toBe(
      "Unavailable"
    )
    // The database answered: not a lost connection.
    for (const [code, message] of [
      ["42P01", 'relation "queue_items" does not exist'],
      ["40P01", "deadlock detected"],
      ["XX000", "internal error"]
    ] as const)
      expect([code, yield* reason(pgError(code, message))]).toEqual([code, "Unknown"])
  })
)

it.effect("what lost a deadlock runs again, after a wait, until it succeeds", () =>
  Effect.gen(function* () {
    let tries = 0
    const statement = Effect.suspend(() =>
      ++tries < 3 ? Effect.fail(pgError("40P01", "deadlock detected")) : Effect.succeed("written")
    )
    const fiber = yield* Effect.fork(retryLockConflicts(statement))
    yield* TestClock.adjust("1 second")
    expect(yield* Fiber.join(fiber)).toBe("written")
    expect(tries).toBe(3)
  })
)

it.effect("it gives up after four more tries, with the deadlock; any other failure is not tried again", () =>
  Effect.gen(function* () {
    let tries = 0
    const fiber = yield* Effect.fork(
      Effect.either(
        retryLockConflicts(Effect.suspend(() => (tries++, Effect.fail(pgError("40P01", "deadlock detected")))))
      )
    )
    yield* TestClock.adjust("10 seconds")
    const result = yield* Fiber.join(fiber)
    expect(Either.isLeft(result) && isLockConflict(result.left)).toBe(true)
    expect(tries).toBe(5)
    let once = 0
    const other = yield* Effect.either(
      retryLockConflicts(Effect.suspend(() => (once++, Effect.fail(pgError("23505", "duplicate key")))))
    )
    expect(Either.isLeft(other)).toBe(true)
    expect(once).toBe(1)
  })
)
