/**
 * Flow control: a task type's limits, which every process on the database obeys together (stored in
 * `queue_limits`). A concurrency limit bounds the executions of the type that hold a live lease, cluster-wide, or,
 * per group (`perGroup`), those of each group (an item's `group`, column `group_key`); a limit of 1 per group runs
 * each group's items one at a time in queue order. A rate limit bounds the executions started per window
 * (`rate` per `per`), counted across the cluster by the database's clock: of the whole type, or of each group
 * (`ratePerGroup`). Each bound has its own scope, so all four combinations can be written (e.g. each group in order,
 * at most 100 starts a minute in all).
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as DurationInput from "./DurationInput.js"

/** A rate: at most `limit` executions start per window of `perMs` milliseconds. */
export interface Rate {
  readonly limit: number
  readonly perMs: number
}

/** A task type's limits, as stored. At least one of `concurrency` and `rate` is set. */
export interface FlowLimit {
  readonly taskType: string
  /** At most this many executions hold a lease at once (per group when `perGroup`); `null`: no bound. */
  readonly concurrency: number | null
  /** The concurrency is each group's: each group may run `concurrency` at once, the groups side by side. */
  readonly perGroup: boolean
  /** At most `rate.limit` starts per `rate.perMs`, across the cluster (per group when `ratePerGroup`); `null`: no rate. */
  readonly rate: Rate | null
  /** The rate is each group's: each group may start `rate.limit` per window, the groups counted apart. */
  readonly ratePerGroup: boolean
}

/** What `Limits.set` takes: a task type's limits, as a caller writes them. */
export interface FlowLimitInput {
  readonly taskType: string
  /** A whole number of at least 1. */
  readonly concurrency?: number | undefined
  /** The concurrency applies to each group (needs `concurrency`). */
  readonly perGroup?: boolean | undefined
  /** A whole number of at least 1 executions started per `per`. */
  readonly rate?: number | undefined
  /** The rate's window (`"1s"`, `"1 minute"`, milliseconds). Default one second. */
  readonly per?: DurationInput.Input | undefined
  /** The rate applies to each group (needs `rate`). */
  readonly ratePerGroup?: boolean | undefined
}

/** A limit that cannot be stored, `field` naming what is wrong. */
export class InvalidLimitError extends Data.TaggedError("InvalidLimitError")<{
  readonly field: "taskType" | "concurrency" | "perGroup" | "rate" | "per" | "ratePerGroup"
  readonly message: string
}> {}

const INT4_MAX = 2_147_483_647

const positiveInt = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 1 && n <= INT4_MAX

/** Checks a limit as written; the stored form, or the first thing wrong with it. */
export const parse = (input: FlowLimitInput): Either.Either<FlowLimit, InvalidLimitError> => {
  const fail = (field: InvalidLimitError["field"], message: string) =>
    Either.left(new InvalidLimitError({ field, message }))
  if (typeof input.taskType !== "string" || input.taskType.length === 0)
    return fail("taskType", "a limit needs a task type")
  if (input.concurrency !== undefined && !positiveInt(input.concurrency))
    return fail("concurrency", `concurrency must be a whole number of at least 1 (got ${String(input.concurrency)})`)
  if (input.rate !== undefined && !positiveInt(input.rate))
    return fail("rate", `rate must be a whole number of at least 1 (got ${String(input.rate)})`)
  if (input.per !== undefined && input.rate === undefined) return fail("per", "per is the window of a rate: give rate")
  if (input.perGroup === true && input.concurrency === undefined)
    return fail("perGroup", "perGroup bounds the concurrency of each group: give concurrency")
  if (input.ratePerGroup === true && input.rate === undefined)
    return fail("ratePerGroup", "ratePerGroup bounds the starts of each group per window: give rate")
  if (input.concurrency === undefined && input.rate === undefined)
    return fail("concurrency", "a limit needs concurrency, rate, or both (clear a type's limits instead)")
  let perMs = 1000
  if (input.per !== undefined) {
    const per = DurationInput.parse(input.per)
    if (Either.isLeft(per)) return fail("per", `per: ${per.left} (got ${String(input.per)})`)
    perMs = Duration.toMillis(per.right)
    if (!Number.isInteger(perMs) || perMs < 1)
      return fail("per", `per must be a whole number of milliseconds, at least 1 (got ${String(input.per)})`)
  }
  return Either.right({
    taskType: input.taskType,
    concurrency: input.concurrency ?? null,
    perGroup: input.perGroup === true,
    rate: input.rate === undefined ? null : { limit: input.rate, perMs },
    ratePerGroup: input.ratePerGroup === true
  })
}

/** The start of the rate window holding `atMs` (windows of `perMs` from the epoch, as Postgres counts them). */
export const windowStart = (rate: Rate, atMs: number): number => Math.floor(atMs / rate.perMs) * rate.perMs

/** A rate in a few words: `10 per 1s`. */
export const describeRate = (rate: Rate): string => `${rate.limit} per ${Duration.format(Duration.millis(rate.perMs))}`

/** A limit in a line: `concurrency 5 per group, rate 10 per 1s`. */
export const describe = (limit: FlowLimit): string => {
  const parts: Array<string> = []
  if (limit.concurrency !== null)
    parts.push(
      `concurrency ${limit.concurrency}${limit.perGroup ? " per group" : ""}${limit.concurrency === 1 && limit.perGroup ? " (ordered)" : ""}`
    )
  if (limit.rate !== null)
    parts.push(`rate ${describeRate(limit.rate)}${limit.ratePerGroup ? " per group" : limit.perGroup ? " in all" : ""}`)
  return parts.join(", ")
}

/** A group key as stored: the text given, NULL when absent or empty. */
export const normalizeGroup = (group: string | null | undefined): string | null =>
  typeof group === "string" && group.length > 0 ? group : null

/**
 * The `thread` an enqueued item gets: the one given; without one, an item in a group is concurrent (1), so that
 * its task type's limits, not the sequential rule, decide how many run (an item that sets `thread: 0` stays
 * sequential, one at a time for its type, as the contract says).
 */
export const threadFor = (thread: number | null | undefined, group: string | null): number | null | undefined =>
  thread === undefined && group !== null ? 1 : thread
