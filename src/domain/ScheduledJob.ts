/**
 * Recurring jobs (`scheduled_jobs`) and their runs (`job_runs`), and the pure decision of what a due job does.
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { ScheduleComputationError } from "./errors.js"
import { errorMessage } from "./Result.js"
import type { MissedSlotPolicy } from "./SchedulerConfig.js"
import * as Schedule from "./Schedule.js"

/** What a slot does when the job's previous run is still going: `skip` it (the default) or `allow` overlap. */
export const OverlapPolicy = Schema.Literal("skip", "allow")
/** @see OverlapPolicy */
export type OverlapPolicy = typeof OverlapPolicy.Type

/** A row of `scheduled_jobs`. `schedule` is the stored JSON value, decoded by the runner when the job is due. */
export const ScheduledJob = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  taskType: Schema.String,
  payload: Schema.String,
  schedule: Schema.Unknown,
  enabled: Schema.Boolean,
  /** `null` for a job inserted without one (by SQL): the runner sets it to the first slot after `createdAt`. */
  nextRunAt: Schema.NullOr(Schema.DateFromSelf),
  /** `null`: the runner's configured default. */
  missedSlots: Schema.NullOr(Schema.Literal("latest", "skip")),
  overlap: OverlapPolicy,
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
})
/** @see ScheduledJob */
export interface ScheduledJob extends Schema.Schema.Type<typeof ScheduledJob> {}

/** `pending` (a retry waiting for `dueAt`), `running`, `success`, `failed` or `skipped`. */
export const RunStatus = Schema.Literal("pending", "running", "success", "failed", "skipped")
/** @see RunStatus */
export type RunStatus = typeof RunStatus.Type

/** A row of `job_runs`: one attempt at one slot of one job. */
export const JobRun = Schema.Struct({
  id: Schema.String,
  jobId: Schema.String,
  scheduledFor: Schema.DateFromSelf,
  attempt: Schema.Int,
  status: RunStatus,
  startedAt: Schema.NullOr(Schema.DateFromSelf),
  finishedAt: Schema.NullOr(Schema.DateFromSelf),
  /** The handler's output, JSON-encoded (`{}` when none). */
  output: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  /** For a pending retry: when it becomes due. */
  dueAt: Schema.NullOr(Schema.DateFromSelf),
  /** For a running run: who runs it, until when its lease holds, and the token that fences its writes. */
  owner: Schema.NullOr(Schema.String),
  leaseUntil: Schema.NullOr(Schema.DateFromSelf),
  leaseToken: Schema.NullOr(Schema.String)
})
/** @see JobRun */
export interface JobRun extends Schema.Schema.Type<typeof JobRun> {}

const DAY_MS = 24 * 60 * 60 * 1000
const WEEK_MS = 7 * DAY_MS

/** What a due job does on this tick. */
export interface SlotDecision {
  /** The slot to run now (attempt 1), if any. */
  readonly run: Date | undefined
  /** The slot recorded as `skipped` because the previous run is still going, if any. */
  readonly skipped: Date | undefined
  /** Slots that passed without a run or a skipped row (downtime, pause). */
  readonly missed: number
  /** The job's new `next_run_at`: the first slot after now, computed from the slot just taken. */
  readonly next: Date
}

/**
 * The latest slot at or before `now`, given that `slot` is one (and is at or before `now`). `next` is monotone, so
 * the instant `h` after which the next slot passes `now` is found by bisection: about 40 calls, however far back.
 */
const latestCronSlot = (schedule: Schedule.Cron, slot: Date, now: Date): Date => {
  let lo = slot.getTime()
  let hi = now.getTime()
  if (Schedule.next(schedule, slot).getTime() > hi) return slot
  // Invariant: next(lo) <= now < next(hi).
  while (hi - lo > 1) {
    const mid = lo + Math.floor((hi - lo) / 2)
    if (Schedule.next(schedule, new Date(mid)).getTime() <= now.getTime()) lo = mid
    else hi = mid
  }
  return Schedule.next(schedule, new Date(lo))
}

/**
 * Slots in (from, to], as the walk below counts them: up to 1,000, extrapolated past that (it is only logged). Each
 * step costs ~0.1 ms: 10,000 of them held a tick for 1.3 s (seconds on a loaded machine) for a slot from year 1.
 */
const countCronSlots = (schedule: Schedule.Cron, from: Date, to: Date): number => {
  const cap = 1_000
  let t = from
  for (let n = 0; n < cap; n++) {
    t = Schedule.next(schedule, t)
    if (t.getTime() > to.getTime()) return n
  }
  return Math.round((cap * (to.getTime() - from.getTime())) / (t.getTime() - from.getTime()))
}

/**
 * Decides what a due job does: its due slot is `slot` (its `next_run_at`, at or before `now`).
 *
 * - Slots that have passed since are collapsed to the latest one ≤ now (no storm of catch-up runs).
 * - Overlap is judged first: when the previous run is still going (and overlap is not allowed), the latest
 *   slot is recorded as skipped.
 * - Otherwise the latest slot runs, unless it is missed (later than `lateAfterMs`) and the policy is `skip`.
 * - The next slot is computed from the slot just taken, never from `now`, and is always after it.
 */
export const decideDue = (options: {
  readonly schedule: Schedule.Schedule
  readonly slot: Date
  readonly now: Date
  readonly missedSlots: MissedSlotPolicy
  readonly overlap: OverlapPolicy
  readonly previousRunning: boolean
  readonly lateAfterMs: number
}): SlotDecision => {
  const { now, schedule, slot } = options
  let latest = slot
  let passed = 0
  if (schedule._tag === "Interval") {
    // Arithmetic, not iteration: a 1 ms interval after a day of downtime would loop 86 million times.
    passed = Math.max(0, Math.floor((now.getTime() - slot.getTime()) / schedule.everyMillis))
    latest = new Date(slot.getTime() + passed * schedule.everyMillis)
  } else {
    // Walking slot by slot from a slot years old (a row written by SQL, long downtime) would block the event loop
    // for minutes (about 700 slots a second): start two weeks before now, as the latest slot ≤ now lies within the
    // last week. The slots jumped over are counted by the period, so `missed` is then approximate.
    const horizon = now.getTime() - 2 * WEEK_MS
    if (schedule._tag === "Cron" && slot.getTime() < horizon) {
      // A cron's slots can lie years apart (29 February), so "the last week" does not hold: bisect instead.
      latest = latestCronSlot(schedule, slot, now)
      passed = countCronSlots(schedule, slot, latest)
    } else if (slot.getTime() < horizon) {
      const from = Schedule.next(schedule, new Date(horizon))
      passed = Math.max(
        0,
        Math.round((from.getTime() - slot.getTime()) / (schedule._tag === "Daily" ? DAY_MS : WEEK_MS))
      )
      latest = from
    }
    for (let n = Schedule.next(schedule, latest); n.getTime() <= now.getTime(); n = Schedule.next(schedule, latest)) {
      latest = n
      passed++
    }
  }
  const next = Schedule.next(schedule, latest)
  if (!(next.getTime() > latest.getTime() && latest.getTime() >= slot.getTime())) {
    throw new ScheduleComputationError({
      message: `next slot ${next.toISOString()} is not after ${latest.toISOString()}`
    })
  }
  if (options.previousRunning && options.overlap === "skip") {
    return { run: undefined, skipped: latest, missed: passed, next }
  }
  const late = now.getTime() - latest.getTime() > options.lateAfterMs
  if (late && options.missedSlots === "skip") return { run: undefined, skipped: undefined, missed: passed + 1, next }
  return { run: latest, skipped: undefined, missed: passed, next }
}

/**
 * What the runner does with one job the store returned as due: a command, so the runtime only executes it.
 *
 * - `Disable`: the schedule does not decode, or its slots cannot be computed. One failed run for `slot` saying
 *   why, and the job disabled: it must not fail on every tick.
 * - `Advance`: not due after all (a job inserted by SQL without a `next_run_at`): only store its first slot.
 * - `Fire`: run `run` (if any), record `skipped` as a skipped slot (if any), and move `next_run_at` to `next`.
 */
export type DuePlan =
  | { readonly _tag: "Disable"; readonly slot: Date; readonly reason: string }
  | { readonly _tag: "Advance"; readonly next: Date }
  | ({ readonly _tag: "Fire" } & SlotDecision)

/**
 * Plans what a due job does at `now`. Pure and total: whatever the stored schedule holds, it returns a plan and
 * never throws.
 */
export const planDue = (options: {
  readonly job: ScheduledJob
  readonly now: Date
  /** The runner's default missed-slot policy (a job's own policy wins). */
  readonly missedSlots: MissedSlotPolicy
  /** Whether the job's previous run is still going (a running run with a live lease, on any instance). */
  readonly previousRunning: boolean
  /** A slot later than this (the poll interval) counts as missed. */
  readonly lateAfterMs: number
}): DuePlan => {
  const { job, now } = options
  const decoded = Schedule.decode(job.schedule)
  const firstSlot = job.nextRunAt ?? job.createdAt
  if (Either.isLeft(decoded)) return { _tag: "Disable", slot: firstSlot, reason: decoded.left.message }
  try {
    // A job inserted without a next_run_at (by SQL): its first slot is the one after its creation.
    const slot = job.nextRunAt ?? Schedule.next(decoded.right, job.createdAt)
    if (slot.getTime() > now.getTime()) return { _tag: "Advance", next: slot }
    const decision = decideDue({
      schedule: decoded.right,
      slot,
      now,
      missedSlots: job.missedSlots ?? options.missedSlots,
      overlap: job.overlap,
      previousRunning: options.previousRunning,
      lateAfterMs: options.lateAfterMs
    })
    return { _tag: "Fire", ...decision }
  } catch (e) {
    return { _tag: "Disable", slot: firstSlot, reason: `cannot compute the next slot: ${errorMessage(e)}` }
  }
}
