/**
 * Retention: how much of the execution log (`processed_items`) and of the job runs (`job_runs`) to keep. A row is
 * pruned when it is older than `maxAge` (if given) and not among the newest `keepLast` (if given); a policy with
 * neither prunes nothing. Off by default: the seeded design keeps the execution log for ever. Pending and running
 * job runs are never pruned.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as DurationInput from "./DurationInput.js"

export interface PolicyInput {
  readonly maxAge?: DurationInput.Input | undefined
  readonly keepLast?: number | undefined
}

export interface Policy {
  readonly maxAge: Duration.Duration | undefined
  readonly keepLast: number | undefined
}

/** One batch of a prune, as the stores take it. */
export interface PruneBatch {
  /** Rows created (log) or finished (runs) before this instant; undefined: any age. */
  readonly olderThan: Date | undefined
  /** The newest rows kept whatever their age; undefined: no floor. */
  readonly keepLast: number | undefined
  /** Most rows deleted by this batch. */
  readonly limit: number
}

/** Rows one prune statement deletes at most: small enough never to hold locks long. */
export const BATCH = 1000

/** Whether the policy prunes anything at all. */
export const isActive = (policy: Policy | undefined): policy is Policy =>
  policy !== undefined && (policy.maxAge !== undefined || policy.keepLast !== undefined)

/** The policy with its age decoded; a clear message when `maxAge` is not a duration or `keepLast` not a count. */
export const decode = (
  field: string,
  input: PolicyInput | undefined,
  names: { readonly maxAge: string; readonly keepLast: string } = {
    maxAge: `${field}.maxAge`,
    keepLast: `${field}.keepLast`
  }
): Either.Either<Policy | undefined, string> => {
  if (input === undefined) return Either.right(undefined)
  const keepLast = input.keepLast
  if (keepLast !== undefined && (!Number.isInteger(keepLast) || keepLast < 0))
    return Either.left(`${names.keepLast}: ${String(keepLast)} is not a count (a whole number, 0 or more)`)
  if (input.maxAge === undefined) return Either.right({ maxAge: undefined, keepLast })
  return Either.map(
    Either.mapLeft(DurationInput.decodeField(names.maxAge, input.maxAge), (e) => e.message),
    (maxAge) => ({ maxAge, keepLast })
  )
}

/** The batch of `policy` at `now`. */
export const batch = (policy: Policy, now: Date, limit = BATCH): PruneBatch => ({
  olderThan: policy.maxAge === undefined ? undefined : new Date(now.getTime() - Duration.toMillis(policy.maxAge)),
  keepLast: policy.keepLast,
  limit
})

/** Whether a row created (or finished) at `at`, with `newerRows` rows after it, goes under `b`. */
export const prunes = (b: PruneBatch, at: Date, newerRows: number): boolean =>
  (b.olderThan === undefined || at.getTime() < b.olderThan.getTime()) &&
  (b.keepLast === undefined || newerRows >= b.keepLast)

/**
 * Prunes under `policy` at `now` batch after batch (each a short statement of its own) until one comes back short;
 * returns how many rows went. `prune` is a store's `pruneProcessed` or `pruneRuns`.
 */
export const pruneAll = <E>(
  prune: (batch: PruneBatch) => Effect.Effect<number, E>,
  policy: Policy,
  now: Date
): Effect.Effect<number, E> =>
  Effect.gen(function* () {
    let total = 0
    while (true) {
      const n = yield* prune(batch(policy, now))
      total += n
      if (n < BATCH) return total
      yield* Effect.yieldNow()
    }
  })
