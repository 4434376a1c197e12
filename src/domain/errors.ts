/**
 * The domain's own errors: pure, raised by constructors and decoders, never by I/O.
 */
import * as Data from "effect/Data"

/**
 * A schedule was built with a value it cannot use. Thrown by `Schedule.daily`, `Schedule.weekly`,
 * `Schedule.interval` and `Schedule.cron`: an invalid schedule is a programmer error, caught where the schedule is built.
 */
export class InvalidScheduleError extends Data.TaggedError("InvalidScheduleError")<{
  /** The offending field: `hour`, `minute`, `weekday`, `tz`, `every` or (for a cron schedule) `expression`. */
  readonly field: "hour" | "minute" | "weekday" | "tz" | "every" | "expression"
  /** The value that was given. */
  readonly value: unknown
  readonly message: string
}> {}

/**
 * A stored schedule (the `schedule` column, or any JSON) does not decode to a valid schedule.
 */
export class ScheduleDecodeError extends Data.TaggedError("ScheduleDecodeError")<{
  /** The value that failed to decode, as it was read. */
  readonly input: unknown
  readonly message: string
}> {}

/**
 * A scheduler configuration value is out of range (for example a negative worker count).
 */
export class InvalidConfigError extends Data.TaggedError("InvalidConfigError")<{
  readonly field: string
  readonly value: unknown
  readonly message: string
}> {}

/**
 * A schedule's next slot cannot be computed: the instant it asks for lies outside the dates JavaScript can
 * represent, or no slot exists. Thrown by `Schedule.next`; the runner treats it like an undecodable schedule
 * (one failed run, the job disabled).
 */
export class ScheduleComputationError extends Data.TaggedError("ScheduleComputationError")<{
  readonly message: string
}> {}

/**
 * A retry policy was written with a value it cannot use. Thrown by `Retry.policy`; a handler registered or an item
 * enqueued with such a policy is refused with it.
 */
export class InvalidRetryError extends Data.TaggedError("InvalidRetryError")<{
  /** The offending field: `attempts`, `backoff`, or the exponential backoff's `max`. */
  readonly field: "attempts" | "backoff" | "max"
  /** The value that was given. */
  readonly value: unknown
  readonly message: string
}> {}

/**
 * Items that wait for other items were enqueued with something that cannot be: an `after` naming an unknown item, a
 * flow with a cycle, a step key used twice or missing, an `after` key no step has, or `after` with a `uniqueKey`.
 * Nothing was enqueued.
 */
export class InvalidFlowError extends Data.TaggedError("InvalidFlowError")<{
  /** What was wrong: `unknownItem`, `unknownKey`, `duplicateKey`, `cycle` or `unsupported`. */
  readonly reason: "unknownItem" | "unknownKey" | "duplicateKey" | "cycle" | "unsupported"
  readonly message: string
}> {}
