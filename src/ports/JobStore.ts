/**
 * The store of recurring jobs and their runs. The runner composes these calls inside `transaction`, so a claim,
 * its run row and the advanced `next_run_at` commit together: two instances can never take one slot twice.
 */
import { Context, Data, type Effect, type Option } from "effect"
import type { JobRun, RunStatus, ScheduledJob } from "../domain/ScheduledJob.js"

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

/** A run to insert. `running` runs take a lease; `pending` ones wait for `dueAt`; the rest are final. */
export interface NewRun {
  readonly jobId: string
  readonly scheduledFor: Date
  readonly attempt: number
  readonly status: RunStatus
  readonly now: Date
  readonly dueAt?: Date | undefined
  readonly owner?: string | undefined
  readonly leaseUntil?: Date | undefined
  readonly error?: string | undefined
}

/** A run together with the job it belongs to. */
export interface RunWithJob {
  readonly run: JobRun
  readonly job: ScheduledJob
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
    /** Enabled jobs with `next_run_at <= now`, earliest first, up to `limit`; locked for the transaction. */
    readonly listDue: (now: Date, limit: number) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
    /** Pending runs (retries) with `dueAt <= now`, earliest first, up to `limit`; locked for the transaction. */
    readonly listDueRetries: (now: Date, limit: number) => Effect.Effect<ReadonlyArray<RunWithJob>, JobStoreError>
    /** Running runs whose lease expired before `now` (their owner is gone); locked for the transaction. */
    readonly listExpired: (now: Date, limit: number) => Effect.Effect<ReadonlyArray<RunWithJob>, JobStoreError>
    /** Inserts a run; a `running` one gets a fresh lease token. Fails with `Conflict` on a duplicate attempt. */
    readonly createRun: (run: NewRun) => Effect.Effect<JobRun, JobStoreError>
    /** Takes a pending run: running, owned by `owner` until `leaseUntil`, with a fresh token. */
    readonly markRunning: (
      runId: string,
      options: { readonly now: Date; readonly owner: string; readonly leaseUntil: Date }
    ) => Effect.Effect<Option.Option<Lease>, JobStoreError>
    /** Extends a lease; false when the lease was lost (expired and taken, or the run finished). */
    readonly renewLease: (lease: Lease, leaseUntil: Date, now: Date) => Effect.Effect<boolean, JobStoreError>
    /** Records success, fenced by the lease; false (and nothing written) when the lease was lost. */
    readonly markSuccess: (lease: Lease, output: string, now: Date) => Effect.Effect<boolean, JobStoreError>
    /** Records failure, fenced by the lease; false (and nothing written) when the lease was lost. */
    readonly markFailed: (lease: Lease, error: string, now: Date) => Effect.Effect<boolean, JobStoreError>
    /** Sets a job's `next_run_at`. */
    readonly updateNextRun: (jobId: string, nextRunAt: Date, now: Date) => Effect.Effect<void, JobStoreError>
    /** Disables a job (`enabled = false`). */
    readonly disableJob: (jobId: string, now: Date) => Effect.Effect<void, JobStoreError>
    /** Whether the job has a running run with a live lease (on any instance). */
    readonly hasLiveRun: (jobId: string, now: Date) => Effect.Effect<boolean, JobStoreError>
    /** The earliest instant at which a job or a retry becomes due, if any: the idle runner sleeps until then. */
    readonly nextWakeAt: (now: Date) => Effect.Effect<Option.Option<Date>, JobStoreError>
    /** Disables every enabled job whose name is not in `names` (jobs removed from code); returns how many. */
    readonly disableJobsExcept: (names: ReadonlyArray<string>, now: Date) => Effect.Effect<number, JobStoreError>
    /** Inserts or updates jobs by name; a changed schedule recomputes `next_run_at`. Returns the stored jobs. */
    readonly upsertJobs: (
      jobs: ReadonlyArray<JobDefinition>,
      now: Date
    ) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
  }
>() {}
