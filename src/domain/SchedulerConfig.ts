/**
 * The runner's configuration and its defaults.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as DurationInput from "./DurationInput.js"
import * as Retention from "./Retention.js"
import { InvalidConfigError } from "./errors.js"

/** What to do with slots missed while no runner was up (or while paused). */
export type MissedSlotPolicy = "latest" | "skip"

/**
 * The configuration as a user writes it: every field optional. Durations are a `Duration.DurationInput` or a short
 * form such as `"500ms"`, `"4s"`, `"10m"`, `"1h"`, `"2d"`; `validate` rejects one that is not a positive, finite
 * duration, naming the field.
 */
export interface SchedulerConfigInput {
  /** When false, `start` does nothing. Default true. The `scheduler.enabled` setting overrides it live. */
  readonly enabled?: boolean | undefined
  /** The fallback poll interval. Default one minute. `scheduler.interval_seconds` overrides it. */
  readonly interval?: DurationInput.Input | undefined
  /** Most items claimed by one tick. Non-positive or absent: 20. */
  readonly batchSize?: number | undefined
  /** Executions run at once by this process. Non-positive or absent: 1. */
  readonly workers?: number | undefined
  /** Retries after a failed run of a scheduled slot (so at most 1 + retryAttempts runs). Negative or absent: 3. */
  readonly retryAttempts?: number | undefined
  /** Wait before the first retry; doubles each retry. Default one minute. */
  readonly retryBackoff?: DurationInput.Input | undefined
  /** Upper bound of the retry wait. Default one hour. */
  readonly retryBackoffMax?: DurationInput.Input | undefined
  /** Most queue items started per poll interval, however often the runner ticks; 0 (the default) is unlimited. */
  readonly rateLimit?: number | undefined
  /** How long one execution may run before it is interrupted, unless its task type says otherwise. Default 15 minutes. */
  readonly timeout?: DurationInput.Input | undefined
  /**
   * How long `stop` waits for running handlers before interrupting them, counted from the stop (the tick in progress
   * shares it). Default 30 seconds.
   */
  readonly gracePeriod?: DurationInput.Input | undefined
  /**
   * How long a claim stays valid without renewal; owners renew it at a third of this (see `leaseTimes` for every
   * time it sets). Default 30 seconds.
   */
  readonly leaseDuration?: DurationInput.Input | undefined
  /** The default missed-slot policy of scheduled jobs. Default `latest`: one run for the latest missed slot. */
  readonly missedSlots?: MissedSlotPolicy | undefined
  /**
   * How often a started worker refreshes its row in `scheduler_workers` (on a timer of its own, whatever the poll).
   * It counts as live for three heartbeats. Default 30 seconds.
   */
  readonly heartbeatInterval?: DurationInput.Input | undefined
  /**
   * Dead rows in one of the queue's tables past which a started runner vacuums it (Postgres: a claim walks past the
   * dead index entries of everything drained since the table's last vacuum, and autovacuum comes at most once a
   * minute). One instance at a time, and only one whose role may (the tables' owner): another says once why not.
   * 0 turns it off. Default 20,000.
   */
  readonly vacuumDeadRows?: number | undefined
  /**
   * What a started runner prunes, every `every` (default 10 minutes), in batches of 1,000 that never block claims:
   * `processedItems` (the execution log, kept for ever by default) and `jobRuns` (finished runs, kept for ever by
   * default), each by `maxAge` and/or `keepLast`. See domain/Retention.
   */
  readonly retention?:
    | {
        readonly processedItems?: Retention.PolicyInput | undefined
        readonly jobRuns?: Retention.PolicyInput | undefined
        readonly every?: DurationInput.Input | undefined
      }
    | undefined
}

/** The configuration with every default filled in. */
export interface SchedulerConfig {
  readonly enabled: boolean
  readonly interval: Duration.Duration
  readonly batchSize: number
  readonly workers: number
  readonly retryAttempts: number
  readonly retryBackoff: Duration.Duration
  readonly retryBackoffMax: Duration.Duration
  readonly rateLimit: number
  readonly timeout: Duration.Duration
  readonly gracePeriod: Duration.Duration
  readonly leaseDuration: Duration.Duration
  readonly missedSlots: MissedSlotPolicy
  readonly heartbeatInterval: Duration.Duration
  readonly vacuumDeadRows: number
  readonly retention: {
    readonly processedItems: Retention.Policy | undefined
    readonly jobRuns: Retention.Policy | undefined
    readonly every: Duration.Duration
  }
}

/** The defaults `withDefaults` fills in. */
export const defaults: SchedulerConfig = {
  enabled: true,
  interval: Duration.minutes(1),
  batchSize: 20,
  workers: 1,
  retryAttempts: 3,
  retryBackoff: Duration.minutes(1),
  retryBackoffMax: Duration.hours(1),
  rateLimit: 0,
  timeout: Duration.minutes(15),
  gracePeriod: Duration.seconds(30),
  leaseDuration: Duration.seconds(30),
  missedSlots: "latest",
  heartbeatInterval: Duration.seconds(30),
  vacuumDeadRows: 20_000,
  retention: { processedItems: undefined, jobRuns: undefined, every: Duration.minutes(10) }
}

const durationFields = [
  "interval",
  "retryBackoff",
  "retryBackoffMax",
  "timeout",
  "gracePeriod",
  "leaseDuration",
  "heartbeatInterval"
] as const

/** A positive, finite duration, or the fallback for anything else (absent, zero, negative, infinite, unparsable). */
const positiveDuration = (input: unknown, fallback: Duration.Duration): Duration.Duration =>
  input === undefined ? fallback : Either.getOrElse(DurationInput.parse(input), () => fallback)

const positiveInt = (n: number | undefined, fallback: number): number =>
  typeof n === "number" && Number.isInteger(n) && n > 0 ? n : fallback

const nonNegativeInt = (n: number | undefined, fallback: number): number =>
  typeof n === "number" && Number.isInteger(n) && n >= 0 ? n : fallback

/**
 * Fills in every default, leniently: a duration that is absent or not a positive, finite duration (zero, negative,
 * unparsable) becomes its default — a non-positive interval or retry backoff one minute —, batch size 20, one
 * worker, three retry attempts, a one-hour backoff cap, no rate limit, a 15-minute timeout. Durations read like
 * `"30 seconds"`, `"30s"`, `500` (milliseconds) or a `Duration`. A runner is built with `validate`, which rejects
 * a bad duration instead.
 */
export const withDefaults = (input: SchedulerConfigInput = {}): SchedulerConfig => ({
  enabled: input.enabled ?? defaults.enabled,
  interval: positiveDuration(input.interval, defaults.interval),
  batchSize: positiveInt(input.batchSize, defaults.batchSize),
  workers: positiveInt(input.workers, defaults.workers),
  retryAttempts: nonNegativeInt(input.retryAttempts, defaults.retryAttempts),
  retryBackoff: positiveDuration(input.retryBackoff, defaults.retryBackoff),
  retryBackoffMax: positiveDuration(input.retryBackoffMax, defaults.retryBackoffMax),
  rateLimit: nonNegativeInt(input.rateLimit, defaults.rateLimit),
  timeout: positiveDuration(input.timeout, defaults.timeout),
  gracePeriod: positiveDuration(input.gracePeriod, defaults.gracePeriod),
  leaseDuration: positiveDuration(input.leaseDuration, defaults.leaseDuration),
  missedSlots: input.missedSlots === "skip" ? "skip" : defaults.missedSlots,
  heartbeatInterval: positiveDuration(input.heartbeatInterval, defaults.heartbeatInterval),
  vacuumDeadRows: nonNegativeInt(input.vacuumDeadRows, defaults.vacuumDeadRows),
  retention: {
    // Leniently too: a policy that does not decode prunes nothing (validate refuses it).
    processedItems: Either.getOrUndefined(
      Retention.decode("retention.processedItems", input.retention?.processedItems)
    ),
    jobRuns: Either.getOrUndefined(Retention.decode("retention.jobRuns", input.retention?.jobRuns)),
    every: positiveDuration(input.retention?.every, defaults.retention.every)
  }
})

/**
 * The configuration a runner is built with: `withDefaults`, except that a duration given but not a positive,
 * finite duration (`"4 sekunds"`, `0`, `-5`, `NaN`, `Infinity`) is an `InvalidConfigError` naming the field and
 * the value, not silently the default. Absent durations and the counts keep their documented defaults.
 */
export const validate = (input: SchedulerConfigInput = {}): Either.Either<SchedulerConfig, InvalidConfigError> => {
  for (const field of durationFields) {
    const value: unknown = input[field]
    if (value === undefined) continue
    const decoded = DurationInput.decodeField(field, value)
    if (Either.isLeft(decoded)) return Either.left(decoded.left)
  }
  const retention = input.retention
  if (retention?.every !== undefined) {
    const decoded = DurationInput.decodeField("retention.every", retention.every)
    if (Either.isLeft(decoded)) return Either.left(decoded.left)
  }
  for (const [field, policy] of [
    ["retention.processedItems", retention?.processedItems],
    ["retention.jobRuns", retention?.jobRuns]
  ] as const) {
    const decoded = Retention.decode(field, policy)
    if (Either.isLeft(decoded))
      return Either.left(new InvalidConfigError({ field, value: policy, message: decoded.left }))
  }
  return Either.right(withDefaults(input))
}

/**
 * The times a lease's length sets, defined here once (every runtime part reads them from here):
 * - `renewEveryMs`: a third of the lease — each execution's lease is renewed that often, so two rounds can fail
 *   before it expires;
 * - `renewalTimeoutMs`: a sixth — a renewal round that has no answer by then is given up (half a renewal period), so
 *   the next one still comes before the lease stops being trusted;
 * - `trustMarginMs`: a tenth — an execution stops trusting its lease that long before its last confirmed expiry (a
 *   process that cannot reach the database stops before another instance may take its work over);
 * - `freshnessMs`: a third — how recent the last look at expired leases must be for the runner to skip one (a tick,
 *   the queue's rescue of expired leases), so that rescue never falls further behind than a renewal;
 * - `stopStepMs`: a third — how long a stop waits for one step that needs the database (handing back, a round's
 *   end, the last results) before it goes on without it: what the step held is taken over once its leases expire.
 * Each is at least one millisecond.
 */
export interface LeaseTimes {
  readonly leaseMs: number
  readonly renewEveryMs: number
  readonly renewalTimeoutMs: number
  readonly trustMarginMs: number
  readonly freshnessMs: number
  readonly stopStepMs: number
}

/** The lease times of a configuration (see `LeaseTimes`). */
export const leaseTimes = (config: Pick<SchedulerConfig, "leaseDuration">): LeaseTimes => {
  const leaseMs = Duration.toMillis(config.leaseDuration)
  const part = (n: number) => Math.max(1, Math.floor(leaseMs / n))
  return {
    leaseMs,
    renewEveryMs: part(3),
    renewalTimeoutMs: part(6),
    trustMarginMs: part(10),
    freshnessMs: leaseMs / 3,
    stopStepMs: part(3)
  }
}

/** An application's root configuration, of which the scheduler's section is one part. */
export interface RootConfig {
  readonly scheduler?: SchedulerConfigInput | undefined
}

/** Copies the scheduler section of the application's root configuration and fills in the defaults. */
export const configFromRoot = (root: RootConfig): SchedulerConfig => withDefaults({ ...root.scheduler })

/**
 * The wait before retry `n` (1 for the first retry): `min(retryBackoffMax, retryBackoff × 2^(n−1))` times
 * `jitter`, a factor the caller draws uniformly from [0.9, 1.1] (the domain draws no random numbers).
 */
export const retryDelay = (config: SchedulerConfig, n: number, jitter: number): Duration.Duration => {
  const base = Duration.toMillis(config.retryBackoff) * 2 ** Math.max(0, n - 1)
  const capped = Math.min(Duration.toMillis(config.retryBackoffMax), base)
  const factor = Math.min(1.1, Math.max(0.9, jitter))
  return Duration.millis(Math.round(capped * factor))
}

/**
 * When the next attempt after failed attempt `attempt` of a slot is due, or undefined when no attempt is left
 * (at most `1 + retryAttempts` runs per slot). `immediately`: due at once (the previous attempt was cut short).
 */
export const retryAt = (
  config: SchedulerConfig,
  attempt: number,
  jitter: number,
  now: Date,
  immediately = false
): Date | undefined => {
  if (attempt >= 1 + config.retryAttempts) return undefined
  const delay = immediately ? 0 : Duration.toMillis(retryDelay(config, attempt, jitter))
  return new Date(now.getTime() + delay)
}

/**
 * Executions of one slot that may be cut short (their owner died or froze and the lease expired, or the runner
 * stopped) and still be followed by a new attempt, whatever the retry budget: such an execution did not fail, so
 * even with `retryAttempts: 0` the slot runs again. Bounded, so a handler that kills its process cannot make a slot
 * run for ever.
 */
export const LOST_ATTEMPT_ALLOWANCE = 5

/**
 * When the next attempt after attempt `attempt` of a slot was cut short is due (at once), or undefined when even the
 * allowance for cut-short executions is spent.
 */
export const attemptAfterLoss = (config: SchedulerConfig, attempt: number, now: Date): Date | undefined =>
  attempt < 1 + config.retryAttempts + LOST_ATTEMPT_ALLOWANCE ? now : undefined
