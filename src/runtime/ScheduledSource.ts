/**
 * Scheduled runs as a work source: claims due slots and retries of the task types this runner handles (planning
 * each due job with the pure `planDue`), takes back runs whose owner died, records outcomes with their retries.
 */
import * as Metrics from "./Metrics.js"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import { unsafeMakeJob } from "../domain/Job.js"
import * as Result from "../domain/Result.js"
import * as Schedule from "../domain/Schedule.js"
import { planDue, type JobRun, type ScheduledJob } from "../domain/ScheduledJob.js"
import { attemptAfterLoss, retryAt, type SchedulerConfig } from "../domain/SchedulerConfig.js"
import { type DueJob, JobStore, type JobStoreError, type Lease, type RunCompletion } from "../ports/JobStore.js"
import { now as clockNow } from "../ports/Clock.js"
import type { Transaction, TransactOptions } from "../ports/Transaction.js"
import type { Claimed, Finished, Holdings, WorkSource } from "./WorkSource.js"

/** A claimed run of a scheduled job. */
export interface ClaimedRun extends Claimed {
  readonly scheduled: ScheduledJob
  readonly run: JobRun
  readonly lease: Lease
}

/** A recurring job defined in code; the runner upserts it by name (see `defineJobs`). */
export interface RecurringJob {
  readonly name: string
  readonly taskType: string
  readonly schedule: Schedule.Schedule
  readonly payload?: unknown
  readonly missedSlots?: "latest" | "skip" | undefined
  readonly overlap?: "skip" | "allow" | undefined
}

export const STOP_ERROR = "interrupted: the runner stopped before the handler finished"
const SKIPPED = "skipped: the previous run was still running"

/** The scheduled-runs source, and what the runner's `defineJobs` needs of it. */
export interface ScheduledSource {
  readonly source: WorkSource<ClaimedRun, JobStoreError>
  readonly defineJobs: (
    jobs: ReadonlyArray<RecurringJob>,
    options: { readonly disableOthers?: boolean | undefined },
    now: Date
  ) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
}

/** What claiming scheduled runs needs. */
interface ClaimDeps {
  readonly config: SchedulerConfig
  readonly owner: string
  readonly store: JobStore["Type"]
}

const slotOf = (run: JobRun) => ({ jobId: run.jobId, scheduledFor: run.scheduledFor, attempt: run.attempt })

/** A claimed run as the pipeline runs it. */
const toClaimed = (owner: string, scheduled: ScheduledJob, run: JobRun, lease: Lease): ClaimedRun => ({
  key: `run:${run.id}`,
  scheduled,
  run,
  lease,
  job: unsafeMakeJob({
    id: scheduled.id,
    kind: "scheduled",
    name: scheduled.name,
    taskType: scheduled.taskType,
    payload: scheduled.payload,
    scheduledFor: run.scheduledFor,
    attempt: run.attempt,
    metadata: { runId: run.id, owner },
    inputs: {},
    group: null
  })
})

/**
 * Why a run is taken back: its owner — this runner — is alive and no longer runs it (`holds`: the run ids it holds,
 * when known), or its owner stopped renewing its lease (gone, or cut off). Undefined: neither (leave it). The lease's
 * expiry is named when it has passed: from then on the run held no slot of its job (another run of an `overlap:
 * skip` job may have started), which the recorded end, the time it was let go, does not say.
 */
const takenBackBecause = (run: JobRun, owner: string, holds: ReadonlySet<string> | undefined, now: Date) => {
  const expired =
    run.leaseUntil !== null && run.leaseUntil.getTime() < now.getTime() ? run.leaseUntil.toISOString() : undefined
  if (run.owner === owner && holds !== undefined && !holds.has(run.id)) {
    const reason = `owner ${owner} no longer runs it (a failover lost its result or its claim's answer, or it gave the run up)`
    return expired === undefined ? reason : `${reason}; its lease expired ${expired}`
  }
  return expired === undefined
    ? undefined
    : `owner lost: ${run.owner ?? "its owner"} stopped renewing its lease (expired ${expired})`
}

/** Claims in one transaction: rescues, due retries, then due jobs, each planned by `planDue`. */
const claimDue = (
  deps: ClaimDeps,
  requestedAt: Date,
  limit: number,
  taskTypes: ReadonlyArray<string>,
  lateAfterMs: number,
  holdings: () => Holdings<ClaimedRun> | undefined
) => {
  const { config, owner, store } = deps
  return store.transaction(
    Effect.gen(function* () {
      // The time is read again once the transaction has its connection: on a loaded machine the wait for one can
      // outlast a short lease, and runs started (and leased) at the tick's time would be written already expired.
      const now = new Date(Math.max(requestedAt.getTime(), (yield* clockNow).getTime()))
      const claimed: Array<ClaimedRun> = []
      let overlapped = 0
      let rescued = 0
      // And again once the rows to start are locked: what a run records as its start (and reckons its lease from) is
      // never before its claim took hold. The statements before it may wait (CPU, a lock): a run of an overlap-skip job
      // claimed right after another instance's run of it ended was recorded as begun before that end (a SIGKILL storm
      // at five test files a time: 30 ms).
      const leaseFromNow = Effect.map(clockNow, (t) => {
        const at = Math.max(now.getTime(), t.getTime())
        return { owner, leaseUntil: new Date(at + Duration.toMillis(config.leaseDuration)), now: new Date(at) }
      })
      // Runs leased to this runner that it does not hold are let go now, not when their lease expires: a run whose
      // success was lost in a failover would otherwise hold its job's slots (overlap: skip) for a whole lease.
      const held = holdings()
      const holds = held && held.claims.map((c) => c.run.id)
      const expired = yield* store.listExpired(now, config.batchSize, holds && { owner, holds })
      // Another claim of this runner began meanwhile: what it took may be among these, so none is let go as disowned.
      const holding = held?.current() === true ? new Set(holds) : undefined
      for (const { run } of expired) {
        if (run.leaseToken === null) continue
        const lost = takenBackBecause(run, owner, holding, now)
        if (lost === undefined) continue
        if (yield* store.markFailed({ runId: run.id, token: run.leaseToken }, lost, now)) {
          // A lost execution did not fail: the slot runs again even when no retry is left.
          const due = attemptAfterLoss(config, run.attempt, now)
          if (due !== undefined) yield* store.scheduleRetry({ ...slotOf(run), attempt: run.attempt + 1 }, due, now)
          rescued++
        }
      }
      if (taskTypes.length === 0) return { claimed, overlapped, rescued, waiting: false }
      // Every worker busy (limit 0): one look at due jobs, for slots that only record a row.
      const full = limit <= 0
      // At most one retry of a job that must not overlap starts at a time (another waits for a later tick).
      const retrying = new Set<string>()
      const retries = full ? [] : yield* store.listDueRetries(now, limit, taskTypes)
      const retryLease = yield* leaseFromNow
      for (const { job, run } of retries) {
        if (job.overlap === "skip") {
          if (retrying.has(job.id)) continue
          retrying.add(job.id)
        }
        const taken = yield* store.startRetry(run.id, retryLease)
        if (Option.isSome(taken)) {
          claimed.push(toClaimed(owner, job, { ...run, status: "running", startedAt: retryLease.now }, taken.value))
        }
      }
      // Slots that only record a row (skipped, disabled) take no worker: keep looking while there is room.
      let room = limit - claimed.length
      let budget = config.batchSize
      let looked = false
      // A due slot left for want of a worker: a freed worker wakes the runner; no need to look before the poll.
      let waiting = false
      while ((room > 0 || (full && !looked)) && budget > 0) {
        looked = true
        const due = yield* store.listDue(now, full ? budget : Math.min(room, budget), taskTypes)
        if (due.length === 0) break
        budget -= due.length
        const planned = yield* startDue(deps, { due, now, lateAfterMs, room, lease: yield* leaseFromNow }, claimed)
        room = planned.room
        overlapped += planned.overlapped
        if (planned.waiting) waiting = true
      }
      return { claimed, overlapped, rescued, waiting }
    })
  )
}

/**
 * Plans due jobs one by one (pure, `planDue`) and writes them together: one statement for the runs, one for the next
 * slots. Started runs are pushed to `claimed`; returns the room left, the slots recorded as overlapped, and whether a
 * due slot was left for want of a worker.
 */
const startDue = (
  deps: ClaimDeps,
  batch: {
    readonly due: ReadonlyArray<DueJob>
    readonly now: Date
    readonly lateAfterMs: number
    readonly room: number
    readonly lease: { readonly owner: string; readonly leaseUntil: Date; readonly now: Date }
  },
  claimed: Array<ClaimedRun>
) =>
  Effect.gen(function* () {
    const { config, owner, store } = deps
    const { due, lateAfterMs, lease, now } = batch
    let room = batch.room
    let overlapped = 0
    let waiting = false
    // Planned one by one (pure), written together: one statement for the runs, one for the next slots.
    const starts: Array<{ readonly job: ScheduledJob; readonly slot: Date }> = []
    const moves: Array<{ readonly jobId: string; readonly nextRunAt: Date }> = []
    for (const { job, previousRunning } of due) {
      const plan = planDue({ job, now, missedSlots: config.missedSlots, previousRunning, lateAfterMs })
      switch (plan._tag) {
        case "Disable": {
          // Fail once and disable: a schedule that does not work must not fail on every tick.
          yield* store.recordFailed(
            { jobId: job.id, scheduledFor: plan.slot, attempt: 1 },
            `${plan.reason}; the job was disabled`,
            now
          )
          yield* store.disableJob(job.id, now)
          yield* Effect.logError(`job "${job.name}" disabled: ${plan.reason}`).pipe(
            Effect.annotateLogs({ jobId: job.id, taskType: job.taskType })
          )
          break
        }
        case "Advance":
          moves.push({ jobId: job.id, nextRunAt: plan.next })
          break
        case "Fire": {
          // A slot to run and no worker for it: it stays due, planned again once a worker is free.
          if (plan.run !== undefined && room <= 0) {
            waiting = true
            break
          }
          if (plan.missed > 0 && plan.skipped === undefined) {
            Metrics.recordMissed(job.taskType, plan.missed)
            yield* Effect.logWarning(
              `job "${job.name}": ${plan.missed} slot(s) missed while no runner took them (downtime or a ` +
                `pause); ${plan.run === undefined ? "none is run (missed slots: skip)" : "the latest is run now"}`
            ).pipe(Effect.annotateLogs({ jobId: job.id, taskType: job.taskType }))
          }
          if (plan.skipped !== undefined) {
            yield* store.recordSkipped({ jobId: job.id, scheduledFor: plan.skipped, attempt: 1 }, SKIPPED, now)
            overlapped++
          }
          if (plan.run !== undefined) {
            starts.push({ job, slot: plan.run })
            room--
          }
          moves.push({ jobId: job.id, nextRunAt: plan.next })
        }
      }
    }
    const started = yield* store.startRuns(
      starts.map(({ job, slot }) => ({ jobId: job.id, scheduledFor: slot, attempt: 1 })),
      lease
    )
    started.forEach(({ lease, run }, i) => claimed.push(toClaimed(owner, starts[i]!.job, run, lease)))
    yield* store.advanceJobs(moves, now)
    return { room, overlapped, waiting }
  })

/** Upserts jobs defined in code by name (and, with `disableOthers`, disables the enabled ones not among them). */
const upsertDefined = (
  store: JobStore["Type"],
  jobs: ReadonlyArray<RecurringJob>,
  options: { readonly disableOthers?: boolean | undefined },
  now: Date
) =>
  Effect.gen(function* () {
    if (options.disableOthers === true) {
      const disabled = yield* store.disableJobsExcept(
        jobs.map((j) => j.name),
        now
      )
      if (disabled > 0) yield* Effect.logInfo(`disabled ${disabled} job(s) no longer defined in code`)
    }
    const stored = yield* store.upsertJobs(
      jobs.map((j) => ({
        name: j.name,
        taskType: j.taskType,
        schedule: Schedule.encode(j.schedule),
        payload: j.payload === undefined ? "" : typeof j.payload === "string" ? j.payload : JSON.stringify(j.payload),
        nextRunAt: Schedule.next(j.schedule, now),
        missedSlots: j.missedSlots ?? null,
        overlap: j.overlap ?? "skip"
      })),
      now
    )
    // The upsert never re-enables a job (an operator's decision stands): say so, or it would look forgotten.
    const off = stored.filter((j) => !j.enabled).map((j) => j.name)
    if (off.length > 0) {
      yield* Effect.logInfo(
        `${off.length} defined job(s) stay disabled: ${off.slice(0, 10).join(", ")}${off.length > 10 ? ", …" : ""}` +
          ` (UPDATE scheduled_jobs SET enabled = true WHERE name = '…' enables one)`
      )
    }
    return stored
  })

/** How a successful run is recorded: with its output. */
const successOf = ({ claim, finishedAt, result, startedAt }: Finished<ClaimedRun>): RunCompletion => ({
  lease: claim.lease,
  slot: slotOf(claim.run),
  now: finishedAt,
  startedAt,
  outcome: { _tag: "Succeeded", output: result.failed ? "{}" : Result.encodeOutput(result.output) }
})

/** How finished runs are recorded: a success with its output, or a failure with its retry (jittered) if any. */
const completionsOf = (config: SchedulerConfig, finished: ReadonlyArray<Finished<ClaimedRun>>) =>
  Effect.gen(function* () {
    const completions: Array<RunCompletion> = []
    for (const done of finished) {
      const { claim, finishedAt, result, startedAt } = done
      if (!result.failed) {
        completions.push(successOf(done))
        continue
      }
      const jitter = yield* Random.nextRange(0.9, 1.1)
      completions.push({
        lease: claim.lease,
        slot: slotOf(claim.run),
        now: finishedAt,
        startedAt,
        outcome: {
          _tag: "Failed",
          error: result.message,
          retryAt: retryAt(config, claim.run.attempt, jitter, finishedAt)
        }
      })
    }
    return completions
  })

/** A transactional run: its success recorded in its transaction; a failure handed back, for `complete`. */
const transactRun = (
  store: JobStore["Type"],
  run: (tx: Transaction) => Effect.Effect<Finished<ClaimedRun>>,
  options: TransactOptions
) => store.transact(run, (finished) => (finished.result.failed ? undefined : successOf(finished)), options)

/**
 * When the scheduled lane next needs a look at the job tables (a slot or retry due, a lease expiring, or the poll): a
 * busy queue then pays nothing for them. Whatever this runner changes about jobs makes the next claim look.
 */
interface Looks {
  /** Whether a claim at `nowMs` can skip the tables (`full`: every worker busy, only slots that take none matter). */
  readonly skip: (nowMs: number, full: boolean) => boolean
  /** A look begins (a claim's, at `pollMs` when known): returns the change count to hand to `lookedAt`. */
  readonly begin: (pollMs?: number) => number
  /** A look begun at change count `seen` found the next wake-up `at`. */
  readonly lookedAt: (seen: number, now: Date, at: Option.Option<Date>) => void
  /** A due slot waits for a worker: the full runner need not look again before `untilMs` (a freed worker wakes it). */
  readonly waiting: (untilMs: number) => void
  /** When to look next, if known without a look. */
  readonly known: (nowMs: number) => number | undefined
  /** Runs a write of this runner to the job tables (a result, a run handed back, jobs defined). */
  readonly changing: <A, E, R>(write: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

const makeLooks = (config: SchedulerConfig): Looks => {
  // When to look next; 0: at once.
  let checkAt = 0
  // The poll interval of the last claim: no look is put off longer than one poll (another instance's changes, a job
  // inserted by SQL).
  let pollMs = Duration.toMillis(config.interval)
  // While every worker is busy and a due slot waits for one: until when the full runner need not look again.
  let waitingUntil = 0
  // Counts this runner's changes. A look that overlapped one may have read the tables before it was committed (a failed
  // run's retry, being written): it must not set `checkAt`, or the change goes unseen until the time it read (a retry
  // due in 0.2 s waited for another run's lease to expire, 30 s on: seen on a loaded machine).
  let changes = 0
  // The last look was overlapped so: the next tick looks, with no look of its own before (the write's end wakes the
  // runner anyway; a drain of due slots would otherwise pay a second look a tick).
  let unsure = false
  const reset = () => {
    checkAt = 0
    changes++
  }
  return {
    skip: (nowMs, full) => {
      if (!full) waitingUntil = 0
      return nowMs < (full ? Math.max(checkAt, waitingUntil) : checkAt)
    },
    begin: (interval) => {
      if (interval !== undefined) pollMs = interval
      return changes
    },
    lookedAt: (seen, now, at) => {
      unsure = changes !== seen
      if (unsure) return
      const pollAt = now.getTime() + pollMs
      checkAt = Option.isSome(at) ? Math.min(at.value.getTime(), pollAt) : pollAt
    },
    waiting: (untilMs) => {
      checkAt = 0
      waitingUntil = untilMs
    },
    known: (nowMs) => (waitingUntil > nowMs ? waitingUntil : checkAt > 0 ? checkAt : unsure ? nowMs : undefined),
    // Reset when the write begins (a tick meanwhile looks anyway) and again once it is done, for the looks it overlapped.
    changing: (write) =>
      Effect.suspend(() => {
        reset()
        return Effect.ensuring(write, Effect.sync(reset))
      })
  }
}

export const make = (options: {
  readonly config: SchedulerConfig
  readonly owner: string
}): Effect.Effect<ScheduledSource, never, JobStore> =>
  Effect.gen(function* () {
    const { config, owner } = options
    const store = yield* JobStore
    const deps = { config, owner, store }
    const looks = makeLooks(config)

    const source: WorkSource<ClaimedRun, JobStoreError> = {
      kind: "scheduled",
      plansWhenFull: true,
      claim: (request, holdings) =>
        Effect.gen(function* () {
          // Asked first, forced or not: a claim with room ends the wait for a worker.
          const skippable = looks.skip(request.now.getTime(), request.limit <= 0)
          if (skippable && !request.force) {
            return { claimed: [], overlapped: 0, rescued: 0 }
          }
          const intervalMs = Duration.toMillis(request.interval)
          const seen = looks.begin(intervalMs)
          const claimStart = performance.now()
          const { waiting, ...report } = yield* claimDue(
            deps,
            request.now,
            request.limit,
            request.taskTypes,
            intervalMs,
            holdings
          )
          Metrics.recordClaim("scheduled", performance.now() - claimStart)
          if (waiting) {
            looks.waiting(request.now.getTime() + intervalMs)
            return report
          }
          looks.lookedAt(seen, request.now, yield* store.nextWakeAt(request.now, request.taskTypes))
          return report
        }),
      nextWakeAt: (now, taskTypes) =>
        Effect.suspend(() => {
          const known = looks.known(now.getTime())
          if (known !== undefined) return Effect.succeed(Option.some(new Date(known)))
          const seen = looks.begin()
          return Effect.tap(store.nextWakeAt(now, taskTypes), (at) => Effect.sync(() => looks.lookedAt(seen, now, at)))
        }),
      renew: (claims, leaseUntil, now) =>
        Effect.map(
          store.renewLeases(
            claims.map((c) => c.lease),
            leaseUntil,
            now
          ),
          (ids) => new Set(ids.map((id) => `run:${id}`))
        ),
      complete: (finished) =>
        looks.changing(
          Effect.flatMap(completionsOf(config, finished), (completions) => store.completeRuns(completions))
        ),
      transact: (_claim, run, options) => looks.changing(transactRun(store, run, options)),
      // Forced stop: record the interruption and hand the slot to a retry due at once, for any instance.
      release: (interrupted, now) =>
        looks.changing(
          Effect.gen(function* () {
            if (interrupted.length === 0) return
            yield* store.completeRuns(
              interrupted.map((c) => ({
                lease: c.lease,
                slot: slotOf(c.run),
                now,
                outcome: { _tag: "Failed", error: STOP_ERROR, retryAt: attemptAfterLoss(config, c.run.attempt, now) }
              }))
            )
          })
        ),
      // At a stop, runs claimed ahead that never started: back to pending as the same slot and attempt, no failure
      // recorded, so another instance runs each slot once, as its first attempt.
      releaseUnstarted: (unstarted, now) =>
        looks.changing(
          Effect.asVoid(
            store.handBackRuns(
              unstarted.map((c) => c.lease),
              now
            )
          )
        )
    }

    const defineJobs = (
      jobs: ReadonlyArray<RecurringJob>,
      options: { readonly disableOthers?: boolean | undefined },
      now: Date
    ) => looks.changing(upsertDefined(store, jobs, options, now))

    return { source, defineJobs }
  })
