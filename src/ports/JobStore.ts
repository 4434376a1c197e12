/**
 * The store of recurring jobs and their runs. The runner composes the claim's calls inside `transaction`, so a
 * claimed slot, its run row and the advanced `next_run_at` commit together: two instances can never take one slot
 * twice. Each change of a run's state has a method of its own.
 */
import type { PruneBatch } from "../domain/Retention.js"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { JobRun, ScheduledJob } from "../domain/ScheduledJob.js"
import type { Transact } from "./Transaction.js"

/** A JobStore failure. `Conflict`: a run for that (job, slot, attempt) exists already. */
export class JobStoreError extends Data.TaggedError("JobStoreError")<{
  readonly reason: "Unavailable" | "Conflict" | "Decode" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** The claim on a running run: its id and the token that fences renewal and completion. */
export interface Lease {
  readonly runId: string
  readonly token: string
}

/** Which slot of which job a run is for, and its attempt number (1 for the first). */
export interface RunSlot {
  readonly jobId: string
  readonly scheduledFor: Date
  readonly attempt: number
}

/** A run together with the job it belongs to. */
export interface RunWithJob {
  readonly run: JobRun
  readonly job: ScheduledJob
}

/** A job that is due, and whether its previous run is still going (a running run with a live lease). */
export interface DueJob {
  readonly job: ScheduledJob
  readonly previousRunning: boolean
}

/** How a running run ended. A failure with `retryAt` also inserts the next attempt, pending until then. */
export type RunOutcome =
  | { readonly _tag: "Succeeded"; readonly output: string }
  | { readonly _tag: "Failed"; readonly error: string; readonly retryAt: Date | undefined }

/** One finished run to record, fenced by its lease. */
export interface RunCompletion {
  readonly lease: Lease
  readonly slot: RunSlot
  readonly outcome: RunOutcome
  /** When it finished: the run's `finished_at`. */
  readonly now: Date
  /**
   * When its handler started, if it did: replaces the `started_at` the claim wrote, so a finished run's recorded span
   * is its handler's. The claim's time is read before its transaction checks that no other run of the job is going,
   * and a claimed run may wait in the buffer for a worker: either way it precedes the handler's start. Absent (a
   * run recorded without having run): the claim's time stays.
   */
  readonly startedAt?: Date | undefined
}

/** A recurring job as defined in code, upserted by name. */
export interface JobDefinition {
  readonly name: string
  readonly taskType: string
  /** The stored JSON value of the schedule (`Schedule.encode`). */
  readonly schedule: unknown
  readonly payload: string
  readonly nextRunAt: Date
  readonly missedSlots: "latest" | "skip" | null
  readonly overlap: "skip" | "allow"
}

/** The recurring-jobs store. Every method takes `now` from the Clock port, so tests control time everywhere. */
export class JobStore extends Context.Tag("kairos/JobStore")<
  JobStore,
  {
    /** Runs `self` as one unit: in Postgres a transaction, in memory a critical section. */
    readonly transaction: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | JobStoreError, R>
    /**
     * Enabled jobs of the given task types with `next_run_at <= now` (or none yet), earliest first, up to `limit`;
     * locked for the transaction.
     */
    readonly listDue: (
      now: Date,
      limit: number,
      taskTypes: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlyArray<DueJob>, JobStoreError>
    /**
     * Pending runs (retries) of enabled jobs of the given task types with `dueAt <= now`, earliest first; locked.
     * A disabled job's retries stay pending (not skipped): enabled again while still due, they run.
     */
    readonly listDueRetries: (
      now: Date,
      limit: number,
      taskTypes: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlyArray<RunWithJob>, JobStoreError>
    /**
     * Running runs whose lease expired before `now` (their owner is gone), of any task type; locked. With `disowned`,
     * also the running runs leased to `disowned.owner` whatever their lease, except those in `disowned.holds` (run
     * ids): that owner is alive and no longer runs them (its record of finishing one was lost, e.g. in a failover to
     * a standby that had not received it), so they need not wait for their lease to expire. Up to `limit` in all.
     */
    readonly listExpired: (
      now: Date,
      limit: number,
      disowned?: { readonly owner: string; readonly holds: ReadonlyArray<string> } | undefined
    ) => Effect.Effect<ReadonlyArray<RunWithJob>, JobStoreError>
    /**
     * Inserts the first attempt at each slot, running, leased by `owner`, in one statement, in order. Fails with
     * `Conflict` on a duplicate.
     */
    readonly startRuns: (
      slots: ReadonlyArray<RunSlot>,
      lease: { readonly owner: string; readonly leaseUntil: Date; readonly now: Date }
    ) => Effect.Effect<ReadonlyArray<{ readonly run: JobRun; readonly lease: Lease }>, JobStoreError>
    /** Takes a pending retry: running, owned by `owner` until `leaseUntil`, with a fresh token. None if taken. */
    readonly startRetry: (
      runId: string,
      lease: { readonly owner: string; readonly leaseUntil: Date; readonly now: Date }
    ) => Effect.Effect<Option.Option<Lease>, JobStoreError>
    /**
     * Inserts a `skipped` row (started = finished = now) for a slot that did not run, saying why. Does nothing when
     * that attempt at that slot has a row already.
     */
    readonly recordSkipped: (slot: RunSlot, reason: string, now: Date) => Effect.Effect<void, JobStoreError>
    /**
     * Inserts a `failed` row for a slot that could not even start (an undecodable schedule), saying why. Does
     * nothing when that attempt at that slot has a row already.
     */
    readonly recordFailed: (slot: RunSlot, error: string, now: Date) => Effect.Effect<void, JobStoreError>
    /** Inserts the next attempt at a slot, `pending` until `dueAt`. */
    readonly scheduleRetry: (slot: RunSlot, dueAt: Date, now: Date) => Effect.Effect<JobRun, JobStoreError>
    /** Extends many leases at once; returns the run ids whose lease still held (the others were lost). */
    readonly renewLeases: (
      leases: ReadonlyArray<Lease>,
      leaseUntil: Date,
      now: Date
    ) => Effect.Effect<ReadonlyArray<string>, JobStoreError>
    /**
     * Records finished runs, each fenced by its lease: success or failure, and a failure's next attempt when it has
     * one. Returns, in order, whether each was recorded (false, and nothing written, when its lease was lost).
     */
    readonly completeRuns: (
      completions: ReadonlyArray<RunCompletion>
    ) => Effect.Effect<ReadonlyArray<boolean>, JobStoreError>
    /**
     * Hands back claimed runs that never started (a stop cancelled them in the buffer), each fenced by its lease: the
     * run goes back to `pending`, unowned, due at `now`, so any instance claims it at once as the same slot and
     * attempt (as a retry is claimed); nothing is recorded. A run whose lease is lost, or that has finished, is left
     * as it is. Wakes the runners. Returns how many went back.
     */
    readonly handBackRuns: (leases: ReadonlyArray<Lease>, now: Date) => Effect.Effect<number, JobStoreError>
    /**
     * A transactional execution (see Transaction): `run` inside one transaction of the store's database, then the
     * completion `record` makes of its value in that same transaction, fenced by its lease as `completeRuns` is.
     */
    readonly transact: Transact<RunCompletion, JobStoreError>
    /** Records a failure, fenced by the lease; false (and nothing written) when the lease was lost. */
    readonly markFailed: (lease: Lease, error: string, now: Date) => Effect.Effect<boolean, JobStoreError>
    /** Sets each job's `next_run_at`, in one statement. */
    readonly advanceJobs: (
      moves: ReadonlyArray<{ readonly jobId: string; readonly nextRunAt: Date }>,
      now: Date
    ) => Effect.Effect<void, JobStoreError>
    /**
     * Pauses (`enabled = false`) or resumes a job by name; returns it as stored, none when no job has that name.
     * A paused job stays paused when code defines it again (`upsertJobs` never changes `enabled`); its slots
     * missed while paused follow its `missedSlots` policy once resumed. Wakes the runners.
     */
    readonly setJobEnabled: (
      name: string,
      enabled: boolean,
      now: Date
    ) => Effect.Effect<Option.Option<ScheduledJob>, JobStoreError>
    /**
     * Fires a job now, as an extra slot beside its schedule: a pending first attempt at `scheduledFor = now`, due now
     * (its `next_run_at` does not move). A paused job's extra slot waits until it is resumed; an overlap-skip job's
     * waits while another run of it goes. None when no job has that name. Wakes the runners.
     */
    readonly runJobNow: (name: string, now: Date) => Effect.Effect<Option.Option<JobRun>, JobStoreError>
    /**
     * Deletes one batch of finished runs (success, failed, skipped) under a retention policy (see domain/Retention),
     * oldest first; returns how many went. Pending and running runs stay. Nothing without an age or a count.
     */
    readonly pruneRuns: (batch: PruneBatch) => Effect.Effect<number, JobStoreError>
    /** Disables a job (`enabled = false`). */
    readonly disableJob: (jobId: string, now: Date) => Effect.Effect<void, JobStoreError>
    /**
     * The earliest instant at which an enabled job or a retry of one, of the given task types, becomes due, if any:
     * the idle runner sleeps until then.
     */
    readonly nextWakeAt: (
      now: Date,
      taskTypes: ReadonlyArray<string>
    ) => Effect.Effect<Option.Option<Date>, JobStoreError>
    /**
     * Disables every enabled job whose name is not in `names` (jobs removed from code); returns how many. Safe beside
     * concurrent `upsertJobs` (one lock order).
     */
    readonly disableJobsExcept: (names: ReadonlyArray<string>, now: Date) => Effect.Effect<number, JobStoreError>
    /**
     * Inserts or updates jobs by name: task type, payload, schedule and policies follow the definition; a changed
     * schedule recomputes `next_run_at`, an unchanged one keeps it. `enabled` is never changed: a new job is enabled,
     * and a job disabled by an operator (or by `disableJobsExcept`) stays disabled until someone enables it (in SQL:
     * `UPDATE scheduled_jobs SET enabled = true WHERE name = '…'`). Safe when many instances upsert the same jobs
     * at once, in any order. Returns the stored jobs.
     */
    readonly upsertJobs: (
      jobs: ReadonlyArray<JobDefinition>,
      now: Date
    ) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
  }
>() {}
