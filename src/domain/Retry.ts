/**
 * Retries for queue items: how many times one run of an item may be attempted, and how long to wait between
 * attempts. A failed execution with attempts left is logged as any other and its item waits the backoff, then runs
 * again; it does not use up one of the item's runs. Without a policy an item is attempted once (no retry).
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as DurationInput from "./DurationInput.js"
import { InvalidRetryError } from "./errors.js"
import { show } from "../internal/show.js"

/** A backoff as written: a duration (fixed), or the growth written out. */
export type BackoffInput =
  | DurationInput.Input
  | { readonly type: "fixed"; readonly delay: DurationInput.Input }
  | {
      readonly type: "exponential"
      /** The wait after the first failure; each further failure doubles it. */
      readonly delay: DurationInput.Input
      /** The longest wait. Default: one hour. */
      readonly max?: DurationInput.Input | undefined
    }

/** A retry policy as written, per task type (`register(…, { retry })`) or per item (`enqueue({ retry })`). */
export interface Input {
  /** Executions one run may take in all, the first included: `1` never retries, `5` retries up to four times. */
  readonly attempts: number
  /** The wait before each retry. Default: exponential from one second, at most one hour. */
  readonly backoff?: BackoffInput | undefined
}

/** A validated policy, as stores keep it (milliseconds, so plain SQL reads it too). */
export interface Policy {
  readonly attempts: number
  readonly backoffMs: number
  readonly exponential: boolean
  /** The longest wait when exponential (equal to `backoffMs` when fixed). */
  readonly maxBackoffMs: number
}

/** Attempted once: the behaviour without a policy. */
export const none: Policy = { attempts: 1, backoffMs: 0, exponential: false, maxBackoffMs: 0 }

/** The most attempts a policy may allow: a bound that a typo (`1e9`) cannot make a never-ending item of. */
export const MAX_ATTEMPTS = 1_000

/** The longest backoff: a year. Longer is a typo, and would overflow what a timestamp column holds past it. */
export const MAX_BACKOFF_MS = 366 * 24 * 60 * 60 * 1000

/** The first wait of the default (exponential) backoff: a second. */
export const DEFAULT_DELAY_MS = 1_000
/** The longest wait of an exponential backoff without a max: an hour. */
export const DEFAULT_MAX_MS = 60 * 60 * 1000

const invalid = (field: InvalidRetryError["field"], value: unknown, rule: string) =>
  new InvalidRetryError({ field, value, message: `invalid retry: ${rule}, got ${show(value)}` })

/** A wait in whole milliseconds, zero allowed (retry at once). */
const waitMs = (field: "backoff" | "max", value: unknown): number => {
  if (value === 0 || value === "0" || value === "0s" || value === "0ms") return 0
  const parsed = DurationInput.parse(value)
  if (Either.isLeft(parsed))
    throw invalid(field, value, `${field} must be a duration such as "30s", "5m" or a number of milliseconds`)
  const ms = Math.round(Duration.toMillis(parsed.right))
  if (ms > MAX_BACKOFF_MS) throw invalid(field, value, `${field} must be at most a year`)
  return ms
}

/**
 * Validates a policy as written.
 * @throws InvalidRetryError naming the field (`attempts`, `backoff` or `max`) and the value.
 */
export const policy = (input: Input): Policy => {
  if (input === null || typeof input !== "object")
    throw invalid("attempts", input, "a retry policy is { attempts, backoff? }")
  const { attempts, backoff } = input
  if (typeof attempts !== "number" || !Number.isInteger(attempts) || attempts < 1 || attempts > MAX_ATTEMPTS)
    throw invalid("attempts", attempts, `attempts must be a whole number from 1 to ${MAX_ATTEMPTS}`)
  if (backoff === undefined)
    return { attempts, backoffMs: DEFAULT_DELAY_MS, exponential: true, maxBackoffMs: DEFAULT_MAX_MS }
  if (typeof backoff === "object" && backoff !== null && "type" in backoff) {
    if (backoff.type === "fixed") {
      const ms = waitMs("backoff", backoff.delay)
      return { attempts, backoffMs: ms, exponential: false, maxBackoffMs: ms }
    }
    if (backoff.type === "exponential") {
      const ms = waitMs("backoff", backoff.delay)
      const max = backoff.max === undefined ? Math.max(ms, DEFAULT_MAX_MS) : waitMs("max", backoff.max)
      if (max < ms) throw invalid("max", backoff.max, "max must be at least the first delay")
      return { attempts, backoffMs: ms, exponential: true, maxBackoffMs: max }
    }
    throw invalid("backoff", backoff, 'backoff type must be "fixed" or "exponential"')
  }
  const ms = waitMs("backoff", backoff)
  return { attempts, backoffMs: ms, exponential: false, maxBackoffMs: ms }
}

/** `policy`, as an Either: for callers that report the error rather than throw it. */
export const parse = (input: Input): Either.Either<Policy, InvalidRetryError> =>
  Either.try({
    try: () => policy(input),
    catch: (e) => (e instanceof InvalidRetryError ? e : invalid("attempts", input, String(e)))
  })

/**
 * The wait before the retry that follows a failure, given how many failures of the run came before it: the delay,
 * doubled per earlier failure when exponential, never above the max. The Postgres record functions compute the same
 * (migration 0009).
 */
export const delayMs = (p: Policy, failuresBefore: number): number =>
  p.exponential ? Math.min(p.maxBackoffMs, p.backoffMs * 2 ** Math.min(failuresBefore, 40)) : p.backoffMs

/** A policy in words, for listings: `3 attempts, exponential 1s…1h`. */
export const describe = (p: Policy): string => {
  if (p.attempts <= 1) return "no retry"
  const wait = (ms: number) => Duration.format(Duration.millis(ms))
  return p.exponential
    ? `${p.attempts} attempts, backoff ${wait(p.backoffMs)} doubling to ${wait(p.maxBackoffMs)}`
    : `${p.attempts} attempts, backoff ${wait(p.backoffMs)}`
}

/** What recording a batch of one item's executions does to it (see `settle`). */
export interface Settled {
  /** Failed executions that had an attempt left: they use up no run, and the item waits `delayMs`, then runs again. */
  readonly retried: number
  /** Runs used up: the successes, and the failures with no attempt left. */
  readonly runsUsed: number
  /** The item's count of failed attempts at its current run, after the batch: reset once a run is used up. */
  readonly failuresAfter: number
  /** The wait before the retry, from the batch's last finish; 0 when nothing is retried. */
  readonly delayMs: number
}

/**
 * Records `executions` finished executions of one item, `failed` of them failures, when its current run had already
 * failed `failuresBefore` times. An item that runs one execution at a time (the common case) settles one at a time;
 * repetitions running side by side and recorded in one batch count their failures in order: the first ones retry
 * while attempts last, the rest use up runs. Both stores apply this rule (Postgres in SQL, migration 0009).
 */
export const settle = (p: Policy, failuresBefore: number, failed: number, executions: number): Settled => {
  const retried = Math.min(failed, Math.max(0, p.attempts - 1 - failuresBefore))
  const exhausted = failed - retried
  return {
    retried,
    runsUsed: executions - retried,
    failuresAfter: exhausted > 0 ? 0 : retried > 0 ? failuresBefore + retried : 0,
    delayMs: retried > 0 ? delayMs(p, failuresBefore + retried - 1) : 0
  }
}

/**
 * An item's own policy from its four `retry_*` columns, as plain SQL may leave some NULL: none without
 * `retry_attempts`; a NULL backoff is the default (exponential from one second); a NULL `retry_exponential` is
 * exponential only when the backoff is the default; a NULL max is an hour (or the backoff, if longer) when
 * exponential. The Postgres record functions read the columns the same way (migration 0009).
 */
export const fromColumns = (columns: {
  readonly attempts: number | null
  readonly backoffMs: number | null
  readonly exponential: boolean | null
  readonly maxBackoffMs: number | null
}): Policy | null => {
  if (columns.attempts === null) return null
  const backoffMs = columns.backoffMs ?? DEFAULT_DELAY_MS
  const exponential = columns.exponential ?? columns.backoffMs === null
  const maxBackoffMs = columns.maxBackoffMs ?? (exponential ? Math.max(backoffMs, DEFAULT_MAX_MS) : backoffMs)
  return { attempts: columns.attempts, backoffMs, exponential, maxBackoffMs }
}
