/**
 * The runner's long-lived fibers never end on any cause while the runner runs: each runs rounds, and a round that
 * fails or dies is logged and followed by the next.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as Result from "../domain/Result.js"

/** Runs `round` forever; a failure or defect of one round is logged and the next round goes on. */
export const supervised = (name: string, round: Effect.Effect<void>): Effect.Effect<never> =>
  Effect.forever(
    round.pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logError(`${name} failed (going on): ${Result.errorMessage(Cause.squash(cause))}`, cause)
      )
    )
  )

/**
 * A step of a stop, given at most `limit`: past it the step is interrupted (interruptible even in the scope finalizer
 * a stop often runs in) and the stop goes on, saying so. On a database that stopped answering (a frozen pooler, a
 * network that drops packets) a statement, or the ROLLBACK an interrupted transaction sends, never ends; a stop
 * waiting on one never ended either. What such a step did not write is not lost: its leases expire.
 */
export const boundedStep =
  (limit: Duration.Duration) =>
  (what: string, step: Effect.Effect<unknown>): Effect.Effect<void> =>
    step.pipe(
      Effect.interruptible,
      Effect.timeoutTo({
        duration: limit,
        onSuccess: () => Effect.void,
        onTimeout: () =>
          Effect.logWarning(
            `stopping: ${what} had no answer within ${Duration.format(limit)}; the stop goes on ` +
              "(what it held is taken over once its leases expire)"
          )
      }),
      Effect.flatten
    )

/**
 * Runs `round` supervised (see `supervised`) in a fiber that `scope`'s closing interrupts, waiting for it to end at
 * most `limit` (see `boundedStep`).
 */
export const forkSupervised = (
  name: string,
  round: Effect.Effect<void>,
  scope: Scope.Scope,
  limit: Duration.Duration
): Effect.Effect<void> =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkDaemon(supervised(name, round))
    yield* Scope.addFinalizer(scope, boundedStep(limit)(`ending the ${name}`, Fiber.interrupt(fiber)))
  })
