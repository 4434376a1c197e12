/**
 * A JobStore with no jobs where every method succeeds: for runners that only run queue items, and for tests.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { JobRun } from "../../domain/ScheduledJob.js"
import { JobStore, type RunSlot } from "../../ports/JobStore.js"
import { transactWith } from "./MemoryTransaction.js"

const row = (slot: RunSlot, status: JobRun["status"], now: Date): JobRun => ({
  id: "0",
  jobId: slot.jobId,
  scheduledFor: slot.scheduledFor,
  attempt: slot.attempt,
  status,
  startedAt: now,
  finishedAt: null,
  output: null,
  error: null,
  dueAt: null,
  owner: null,
  leaseUntil: null,
  leaseToken: null
})

/** The no-op store. */
export const store: JobStore["Type"] = JobStore.of({
  transaction: (self) => self,
  listDue: () => Effect.succeed([]),
  listDueRetries: () => Effect.succeed([]),
  listExpired: () => Effect.succeed([]),
  startRuns: (slots, { now }) =>
    Effect.succeed(slots.map((slot) => ({ run: row(slot, "running", now), lease: { runId: "0", token: "" } }))),
  startRetry: () => Effect.succeed(Option.none()),
  // It holds no jobs: there is none of that name.
  setJobEnabled: () => Effect.succeed(Option.none()),
  runJobNow: () => Effect.succeed(Option.none()),
  pruneRuns: () => Effect.succeed(0),
  recordSkipped: () => Effect.void,
  recordFailed: () => Effect.void,
  scheduleRetry: (slot, _dueAt, now) => Effect.succeed(row(slot, "pending", now)),
  renewLeases: (leases) => Effect.succeed(leases.map((l) => l.runId)),
  completeRuns: (completions) => Effect.succeed(completions.map(() => true)),
  transact: transactWith((completions: ReadonlyArray<unknown>) => Effect.succeed(completions.map(() => true))),
  handBackRuns: (leases) => Effect.succeed(leases.length),
  markFailed: () => Effect.succeed(true),
  advanceJobs: () => Effect.void,
  disableJob: () => Effect.void,
  nextWakeAt: () => Effect.succeed(Option.none()),
  disableJobsExcept: () => Effect.succeed(0),
  upsertJobs: () => Effect.succeed([])
})

/** Provides the no-op store as the JobStore. */
export const layer: Layer.Layer<JobStore> = Layer.succeed(JobStore, store)
