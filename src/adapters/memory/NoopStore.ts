/**
 * A JobStore with no jobs where every method succeeds: for runners that only run queue items, and for tests.
 */
import { Effect, Layer, Option } from "effect"
import { JobStore } from "../../ports/JobStore.js"

/** The no-op store. */
export const store: JobStore["Type"] = JobStore.of({
  transaction: (self) => self,
  listDue: () => Effect.succeed([]),
  listDueRetries: () => Effect.succeed([]),
  listExpired: () => Effect.succeed([]),
  createRun: (run) =>
    Effect.succeed({
      id: "0",
      jobId: run.jobId,
      scheduledFor: run.scheduledFor,
      attempt: run.attempt,
      status: run.status,
      startedAt: run.now,
      finishedAt: null,
      output: null,
      error: run.error ?? null,
      dueAt: run.dueAt ?? null,
      owner: run.owner ?? null,
      leaseUntil: run.leaseUntil ?? null,
      leaseToken: null
    }),
  markRunning: () => Effect.succeed(Option.none()),
  renewLease: () => Effect.succeed(true),
  markSuccess: () => Effect.succeed(true),
  markFailed: () => Effect.succeed(true),
  updateNextRun: () => Effect.void,
  disableJob: () => Effect.void,
  hasLiveRun: () => Effect.succeed(false),
  nextWakeAt: () => Effect.succeed(Option.none()),
  disableJobsExcept: () => Effect.succeed(0),
  upsertJobs: () => Effect.succeed([])
})

/** Provides the no-op store as the JobStore. */
export const layer: Layer.Layer<JobStore> = Layer.succeed(JobStore, store)
