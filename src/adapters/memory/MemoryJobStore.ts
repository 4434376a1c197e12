/**
 * An in-memory JobStore that behaves like the Postgres one, and lets tests add jobs and inspect every run. The seed
 * calls it `FakeStore`: that name stays as an alias (`kairos/testing` exports the module under both names).
 */
import * as Retention from "../../domain/Retention.js"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "../../domain/Schedule.js"
import type { JobRun, OverlapPolicy, ScheduledJob } from "../../domain/ScheduledJob.js"
import { now as clockNow } from "../../ports/Clock.js"
import {
  type Lease,
  JobStore,
  JobStoreError,
  type RunCompletion,
  type RunSlot,
  type RunWithJob
} from "../../ports/JobStore.js"
import { transactWith } from "./MemoryTransaction.js"

/** A job to add to the memory store. */
export interface FakeJobInput {
  readonly name: string
  readonly taskType: string
  /** A schedule, or any raw value to simulate a stored schedule that no longer decodes. */
  readonly schedule: Schedule.Schedule | unknown
  readonly payload?: string | undefined
  readonly missedSlots?: "latest" | "skip" | undefined
  readonly overlap?: OverlapPolicy | undefined
  readonly enabled?: boolean | undefined
  /** Default: `Schedule.next(schedule, now)`. */
  readonly nextRunAt?: Date | undefined
}

/** What tests see of the memory store besides the JobStore port. */
export class MemoryJobStore extends Context.Tag("kairos/MemoryJobStore")<
  MemoryJobStore,
  {
    /** Adds a job; its first slot is the schedule's next slot after the Clock's now. */
    readonly addJob: (input: FakeJobInput) => Effect.Effect<ScheduledJob>
    /** Every job, in insertion order. */
    readonly jobs: Effect.Effect<ReadonlyArray<ScheduledJob>>
    /** Every run, in insertion order. */
    readonly runs: Effect.Effect<ReadonlyArray<JobRun>>
    /** The runs of one job (by name), in insertion order. */
    readonly runsOf: (name: string) => Effect.Effect<ReadonlyArray<JobRun>>
    /** Overwrites a job's stored schedule value (to simulate a row edited by another program). */
    readonly setStoredSchedule: (name: string, schedule: unknown) => Effect.Effect<void>
    /** Sets a job's `enabled` (to simulate an operator's `UPDATE scheduled_jobs SET enabled = …`). */
    readonly setEnabled: (name: string, enabled: boolean) => Effect.Effect<void>
  }
>() {}

const byTime = (a: Date, b: Date) => a.getTime() - b.getTime()
/** Jobs without a next_run_at sort first, as in Postgres (`ORDER BY next_run_at NULLS FIRST`). */
const dueOrder = (j: ScheduledJob) => (j.nextRunAt === null ? Number.NEGATIVE_INFINITY : j.nextRunAt.getTime())

/** The seed's name for the memory store's handle: `FakeStore.FakeStore` is `MemoryJobStore.MemoryJobStore`. */
export { MemoryJobStore as FakeStore }

/** Builds the store: its JobStore port and its inspection handle share one state. */
export const make: Effect.Effect<{ readonly store: JobStore["Type"]; readonly fake: MemoryJobStore["Type"] }> =
  Effect.gen(function* () {
    const jobs: Array<ScheduledJob> = []
    const runs: Array<JobRun> = []
    let nextId = 1
    let nextToken = 1
    const lock = yield* Effect.makeSemaphore(1)

    // Where each job is in `jobs`, by id, and which job a name finds (the first of that name, as a scan would): a
    // look-up per job stays constant however many jobs there are (an upsert of 8,000 definitions scanned the list
    // for each, ~2.5 s alone and past 30 s on a loaded machine). Rebuilt when a rollback restores the list.
    const positions = new Map<string, number>()
    const named = new Map<string, string>()
    const indexJob = (job: ScheduledJob, i: number) => {
      positions.set(job.id, i)
      if (!named.has(job.name)) named.set(job.name, job.id)
    }
    const reindex = () => {
      positions.clear()
      named.clear()
      jobs.forEach(indexJob)
    }
    const pushJob = (job: ScheduledJob) => {
      jobs.push(job)
      indexJob(job, jobs.length - 1)
    }
    const jobById = (id: string): ScheduledJob | undefined => {
      const i = positions.get(id)
      return i === undefined ? undefined : jobs[i]
    }
    const jobByName = (name: string): ScheduledJob | undefined => {
      const id = named.get(name)
      return id === undefined ? undefined : jobById(id)
    }
    const replaceJob = (id: string, patch: Partial<ScheduledJob>) => {
      const i = positions.get(id)
      if (i !== undefined) jobs[i] = { ...jobs[i]!, ...patch }
    }
    const replaceRun = (id: string, patch: Partial<JobRun>) => {
      const i = runs.findIndex((r) => r.id === id)
      if (i >= 0) runs[i] = { ...runs[i]!, ...patch }
    }
    const withJob = (run: JobRun): Array<RunWithJob> => {
      const job = jobById(run.jobId)
      return job === undefined ? [] : [{ run, job }]
    }
    const hasLiveRun = (jobId: string, now: Date) =>
      runs.some(
        (r) =>
          r.jobId === jobId &&
          r.status === "running" &&
          r.leaseUntil !== null &&
          r.leaseUntil.getTime() >= now.getTime()
      )
    const holds = (lease: Lease) => {
      const run = runs.find((r) => r.id === lease.runId)
      return run !== undefined && run.status === "running" && run.leaseToken === lease.token
    }

    const insertRun = (
      slot: RunSlot,
      fields: Pick<
        JobRun,
        "status" | "startedAt" | "finishedAt" | "error" | "dueAt" | "owner" | "leaseUntil" | "leaseToken"
      >
    ) =>
      Effect.suspend(() => {
        const duplicate = runs.some(
          (r) =>
            r.jobId === slot.jobId &&
            r.scheduledFor.getTime() === slot.scheduledFor.getTime() &&
            r.attempt === slot.attempt
        )
        if (duplicate) {
          return Effect.fail(
            new JobStoreError({
              reason: "Conflict",
              message: `a run of job ${slot.jobId} for ${slot.scheduledFor.toISOString()} attempt ${slot.attempt} exists`
            })
          )
        }
        const run: JobRun = {
          id: String(nextId++),
          jobId: slot.jobId,
          scheduledFor: slot.scheduledFor,
          attempt: slot.attempt,
          output: null,
          ...fields
        }
        runs.push(run)
        return Effect.succeed(run)
      })
    const ignoreConflict = <A>(self: Effect.Effect<A, JobStoreError>) =>
      self.pipe(
        Effect.asVoid,
        Effect.catchIf(
          (e) => e.reason === "Conflict",
          () => Effect.void
        )
      )
    const none = { error: null, dueAt: null, owner: null, leaseUntil: null, leaseToken: null }
    const typeOf = (jobId: string) => jobById(jobId)?.taskType

    const store: JobStore["Type"] = JobStore.of({
      // All or nothing, as in Postgres: a failed transaction leaves no trace.
      transaction: (self) =>
        lock.withPermits(1)(
          Effect.suspend(() => {
            const saved = { jobs: [...jobs], runs: [...runs] }
            return Effect.onError(self, () =>
              Effect.sync(() => {
                jobs.splice(0, jobs.length, ...saved.jobs)
                reindex()
                runs.splice(0, runs.length, ...saved.runs)
              })
            )
          })
        ),
      listDue: (now, limit, taskTypes) =>
        Effect.sync(() =>
          jobs
            .filter(
              (j) =>
                j.enabled &&
                taskTypes.includes(j.taskType) &&
                (j.nextRunAt === null || j.nextRunAt.getTime() <= now.getTime())
            )
            .sort((a, b) => dueOrder(a) - dueOrder(b) || Number(a.id) - Number(b.id))
            .slice(0, Math.max(0, limit))
            .map((job) => ({ job, previousRunning: hasLiveRun(job.id, now) }))
        ),
      listDueRetries: (now, limit, taskTypes) =>
        Effect.sync(() =>
          runs
            .filter((r) => r.status === "pending" && r.dueAt !== null && r.dueAt.getTime() <= now.getTime())
            // A disabled job's retries stay pending: they run if it is enabled again while still due.
            .filter((r) => taskTypes.includes(typeOf(r.jobId) ?? "") && jobById(r.jobId)?.enabled === true)
            // A retry of a job that must not overlap waits while another run of it goes.
            .filter((r) => !(jobById(r.jobId)?.overlap === "skip" && hasLiveRun(r.jobId, now)))
            .sort((a, b) => byTime(a.dueAt!, b.dueAt!) || Number(a.id) - Number(b.id))
            .flatMap(withJob)
            .slice(0, Math.max(0, limit))
        ),
      listExpired: (now, limit, disowned) =>
        Effect.sync(() =>
          runs
            .filter(
              (r) =>
                r.status === "running" &&
                ((r.leaseUntil !== null && r.leaseUntil.getTime() < now.getTime()) ||
                  (disowned !== undefined && r.owner === disowned.owner && !disowned.holds.includes(r.id)))
            )
            .flatMap(withJob)
            .slice(0, Math.max(0, limit))
        ),
      startRuns: (slots, { leaseUntil, now, owner }) =>
        Effect.forEach(slots, (slot) =>
          Effect.map(
            insertRun(slot, {
              ...none,
              status: "running",
              startedAt: now,
              finishedAt: null,
              owner,
              leaseUntil,
              leaseToken: `t${nextToken++}`
            }),
            (run) => ({ run, lease: { runId: run.id, token: run.leaseToken! } })
          )
        ),
      startRetry: (runId, { leaseUntil, now, owner }) =>
        Effect.sync(() => {
          const run = runs.find((r) => r.id === runId)
          if (run === undefined || run.status !== "pending") return Option.none()
          const token = `t${nextToken++}`
          replaceRun(runId, { status: "running", startedAt: now, owner, leaseUntil, leaseToken: token, dueAt: null })
          return Option.some({ runId, token })
        }),
      recordSkipped: (slot, reason, now) =>
        insertRun(slot, { ...none, status: "skipped", startedAt: now, finishedAt: now, error: reason }).pipe(
          ignoreConflict
        ),
      recordFailed: (slot, error, now) =>
        insertRun(slot, { ...none, status: "failed", startedAt: now, finishedAt: now, error }).pipe(ignoreConflict),
      scheduleRetry: (slot, dueAt) =>
        insertRun(slot, { ...none, status: "pending", startedAt: null, finishedAt: null, dueAt }),
      renewLeases: (leases, leaseUntil) =>
        Effect.sync(() =>
          leases.flatMap((lease) => {
            if (!holds(lease)) return []
            replaceRun(lease.runId, { leaseUntil })
            return [lease.runId]
          })
        ),
      completeRuns: (completions) =>
        store.transaction(
          Effect.forEach(completions, ({ lease, now, outcome, slot, startedAt }) =>
            Effect.gen(function* () {
              if (!holds(lease)) return false
              const started = startedAt === undefined ? {} : { startedAt }
              if (outcome._tag === "Succeeded") {
                replaceRun(lease.runId, {
                  ...started,
                  status: "success",
                  finishedAt: now,
                  output: outcome.output,
                  leaseUntil: null
                })
                return true
              }
              replaceRun(lease.runId, {
                ...started,
                status: "failed",
                finishedAt: now,
                error: outcome.error,
                leaseUntil: null
              })
              if (outcome.retryAt !== undefined) {
                yield* store.scheduleRetry({ ...slot, attempt: slot.attempt + 1 }, outcome.retryAt, now)
              }
              return true
            })
          )
        ),
      transact: transactWith((completions: ReadonlyArray<RunCompletion>) => store.completeRuns(completions)),
      handBackRuns: (leases, now) =>
        Effect.sync(() => {
          let n = 0
          for (const lease of leases) {
            if (!holds(lease)) continue
            replaceRun(lease.runId, { ...none, status: "pending", startedAt: null, dueAt: now })
            n++
          }
          return n
        }),
      markFailed: (lease, error, now) =>
        Effect.sync(() => {
          if (!holds(lease)) return false
          replaceRun(lease.runId, { status: "failed", finishedAt: now, error, leaseUntil: null })
          return true
        }),
      advanceJobs: (moves, now) =>
        Effect.sync(() => {
          for (const { jobId, nextRunAt } of moves) replaceJob(jobId, { nextRunAt, updatedAt: now })
        }),
      setJobEnabled: (name, enabled, now) =>
        Effect.sync(() => {
          const job = jobByName(name)
          if (job === undefined) return Option.none()
          replaceJob(job.id, { enabled, updatedAt: now })
          return Option.fromNullable(jobById(job.id))
        }),
      runJobNow: (name, now) =>
        Effect.suspend(() => {
          const job = jobByName(name)
          return job === undefined
            ? Effect.succeed(Option.none())
            : Effect.map(
                insertRun(
                  { jobId: job.id, scheduledFor: now, attempt: 1 },
                  { ...none, status: "pending", startedAt: null, finishedAt: null, dueAt: now }
                ),
                Option.some
              )
        }),
      pruneRuns: (batch) =>
        Effect.sync(() => {
          if (batch.olderThan === undefined && batch.keepLast === undefined) return 0
          const finished = runs
            .filter((r) => r.status === "success" || r.status === "failed" || r.status === "skipped")
            .sort((a, b) => Number(a.id) - Number(b.id))
          const doomed = new Set(
            finished
              .filter((r, i) => Retention.prunes(batch, r.finishedAt ?? r.scheduledFor, finished.length - 1 - i))
              .slice(0, batch.limit)
          )
          for (let i = runs.length - 1; i >= 0; i--) if (doomed.has(runs[i]!)) runs.splice(i, 1)
          return doomed.size
        }),
      disableJob: (jobId, now) => Effect.sync(() => replaceJob(jobId, { enabled: false, updatedAt: now })),
      nextWakeAt: (now, taskTypes) =>
        Effect.sync(() => {
          const times = [
            ...jobs
              .filter((j) => j.enabled && taskTypes.includes(j.taskType))
              .map((j) => (j.nextRunAt === null ? now.getTime() : j.nextRunAt.getTime())),
            ...runs
              .filter(
                (r) =>
                  r.status === "pending" &&
                  r.dueAt !== null &&
                  taskTypes.includes(typeOf(r.jobId) ?? "") &&
                  jobById(r.jobId)?.enabled === true &&
                  !(jobById(r.jobId)?.overlap === "skip" && hasLiveRun(r.jobId, now))
              )
              .map((r) => r.dueAt!.getTime()),
            // A running run's lease expiry: if its owner died, the run is taken back then.
            ...runs
              .filter(
                (r) => r.status === "running" && r.leaseUntil !== null && taskTypes.includes(typeOf(r.jobId) ?? "")
              )
              .map((r) => r.leaseUntil!.getTime())
          ]
          return times.length === 0 ? Option.none() : Option.some(new Date(Math.min(...times)))
        }),
      disableJobsExcept: (names, now) =>
        Effect.sync(() => {
          const keep = new Set(names)
          const stale = jobs.filter((j) => j.enabled && !keep.has(j.name))
          for (const j of stale) replaceJob(j.id, { enabled: false, updatedAt: now })
          return stale.length
        }),
      upsertJobs: (definitions, now) =>
        Effect.sync(() =>
          definitions.map((def) => {
            const existing = jobByName(def.name)
            if (existing === undefined) {
              const job: ScheduledJob = {
                id: String(nextId++),
                name: def.name,
                taskType: def.taskType,
                payload: def.payload,
                schedule: def.schedule,
                enabled: true,
                nextRunAt: def.nextRunAt,
                missedSlots: def.missedSlots,
                overlap: def.overlap,
                createdAt: now,
                updatedAt: now
              }
              pushJob(job)
              return job
            }
            const scheduleChanged = JSON.stringify(existing.schedule) !== JSON.stringify(def.schedule)
            replaceJob(existing.id, {
              taskType: def.taskType,
              payload: def.payload,
              schedule: def.schedule,
              // `enabled` is left alone: a job an operator disabled stays disabled whatever the code says.
              missedSlots: def.missedSlots,
              overlap: def.overlap,
              updatedAt: now,
              ...(scheduleChanged || existing.nextRunAt === null ? { nextRunAt: def.nextRunAt } : {})
            })
            return jobById(existing.id)!
          })
        )
    })

    const fake: MemoryJobStore["Type"] = MemoryJobStore.of({
      addJob: (input) =>
        Effect.gen(function* () {
          const now = yield* clockNow
          const decoded = Schedule.decode(input.schedule)
          const nextRunAt =
            input.nextRunAt ?? (Either.isRight(decoded) ? Schedule.next(decoded.right, now) : new Date(now))
          const job: ScheduledJob = {
            id: String(nextId++),
            name: input.name,
            taskType: input.taskType,
            payload: input.payload ?? "",
            schedule: Either.isRight(decoded) ? Schedule.encode(decoded.right) : input.schedule,
            enabled: input.enabled ?? true,
            nextRunAt,
            missedSlots: input.missedSlots ?? null,
            overlap: input.overlap ?? "skip",
            createdAt: now,
            updatedAt: now
          }
          pushJob(job)
          return job
        }),
      jobs: Effect.sync(() => [...jobs]),
      runs: Effect.sync(() => [...runs]),
      runsOf: (name) =>
        Effect.sync(() => {
          const job = jobByName(name)
          return job === undefined ? [] : runs.filter((r) => r.jobId === job.id)
        }),
      setStoredSchedule: (name, schedule) =>
        Effect.sync(() => {
          const job = jobByName(name)
          if (job !== undefined) replaceJob(job.id, { schedule })
        }),
      setEnabled: (name, enabled) =>
        Effect.sync(() => {
          const job = jobByName(name)
          if (job !== undefined) replaceJob(job.id, { enabled })
        })
    })
    return { store, fake }
  })

/** Provides the JobStore port and the MemoryJobStore handle over one shared in-memory state. */
export const layer: Layer.Layer<JobStore | MemoryJobStore> = Layer.effectContext(
  Effect.map(make, ({ fake, store }) => Context.make(JobStore, store).pipe(Context.add(MemoryJobStore, fake)))
)
