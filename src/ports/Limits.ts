/**
 * Flow control's limits (see domain/Limits): where they are stored, so that every process obeys the same numbers.
 * A change wakes every runner ("settings" wake-up), which reads them again; the claim enforces them (see
 * `ClaimOptions.limited`).
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type { FlowLimit, FlowLimitInput, InvalidLimitError } from "../domain/Limits.js"

/** Reading or writing the limits failed. */
export class LimitsError extends Data.TaggedError("LimitsError")<{
  readonly reason: "Unavailable" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** The limits. */
export class Limits extends Context.Tag("kairos/Limits")<
  Limits,
  {
    /** Every task type's limits, by task type. */
    readonly list: Effect.Effect<ReadonlyArray<FlowLimit>, LimitsError>
    /** Sets a task type's limits, replacing what it had; fails, changing nothing, when they are not valid. */
    readonly set: (input: FlowLimitInput) => Effect.Effect<FlowLimit, LimitsError | InvalidLimitError>
    /** Removes a task type's limits; whether it had any. */
    readonly clear: (taskType: string) => Effect.Effect<boolean, LimitsError>
  }
>() {}
