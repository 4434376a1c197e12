/**
 * The runner's long-lived fibers never end on any cause while the runner runs: each runs rounds, and a round that
 * fails or dies is logged and followed by the next.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
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
