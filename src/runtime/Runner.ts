/**
 * The runner: claims due work, runs handlers in fibers it owns, records every outcome, and sleeps until the next
 * slot, retry or poll — whichever comes first. Composed as a scoped service: closing its scope stops it.
 */
import {
  Chunk,
  Context,
  Deferred,
  Duration,
  Effect,
  Either,
  Fiber,
  FiberSet,
  Layer,
  Option,
  Queue,
  Random,
  Ref,
  Schedule as RetryPolicy,
  Scope
} from "effect"
import os from "node:os"
import { randomBytes } from "node:crypto"
import { Job } from "../domain/Job.js"
import * as Result from "../domain/Result.js"
import * as Schedule from "../domain/Schedule.js"
import { decideDue, type JobRun, type ScheduledJob } from "../domain/ScheduledJob.js"
import { retryDelay, withDefaults, type SchedulerConfig, type SchedulerConfigInput } from "../domain/SchedulerConfig.js"
import { now as clockNow } from "../ports/Clock.js"
import { type Lease, JobStore, type JobStoreError } from "../ports/JobStore.js"
import { SettingKeys, Settings, type SettingsError } from "../ports/Settings.js"
import { type ExecutionResult, type QueueClaim, QueueStore, type QueueStoreError } from "../ports/QueueStore.js"
import { type Handler, type HandlerOptions, runToResult } from "./Handler.js"

/** What one tick did. */
export interface TickReport {
  /** Why the tick did nothing, if it did nothing on purpose. */
  readonly skipped?: "paused" | "disabled" | "stopped" | "busy" | undefined
  /** Executions started by this tick (scheduled runs and queue items). */
  readonly started: number
  /** Of those, queue-item executions. */
  readonly queued?: number | undefined
  /** Slots recorded as skipped because the previous run was still going. */
  readonly overlapped: number
  /** Runs whose owner was lost (lease expired), failed and handed to a retry. */
  readonly rescued: number
}

/** Counters of a runner's executions. */
export interface RunnerStats {
  readonly started: number
  readonly ok: number
  readonly failed: number
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

/** The runner's interface. */
export class Runner extends Context.Tag("kairos/Runner")<
  Runner,
  {
    /** Registers the handler of a task type. Registering a type again replaces its handler (and logs a warning). */
    readonly register: <A, E = never, R = never>(
      taskType: string,
      handler: Handler<A, E, R>,
      options?: HandlerOptions
    ) => Effect.Effect<void, never, R>
    /** Ticks now and then every interval, in a fiber of the runner's scope. Does nothing when disabled by config. */
    readonly start: Effect.Effect<void>
    /** Stops claiming, waits for running handlers up to the grace period, then interrupts them. */
    readonly stop: Effect.Effect<void>
    /** One tick: claims due work up to the free capacity and starts it; never waits for handlers. */
    readonly tick: Effect.Effect<TickReport, JobStoreError | SettingsError | QueueStoreError>
    /** Wakes an idle runner now (new work arrived); the poll stays the fallback. */
    readonly wake: Effect.Effect<void>
    /**
     * Upserts recurring jobs by name; a changed schedule recomputes the next slot. With `disableOthers`, every
     * other enabled job (one removed from code) is disabled.
     */
    readonly defineJobs: (
      jobs: ReadonlyArray<RecurringJob>,
      options?: { readonly disableOthers?: boolean | undefined }
    ) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
    /** Executions running now in this process. */
    readonly running: Effect.Effect<number>
    /** Counters since this runner was built: executions started, succeeded and failed (both kinds of work). */
    readonly stats: Effect.Effect<RunnerStats>
    /** This runner's owner id, as written on the runs it leases. */
    readonly owner: string
    /** The configuration with defaults applied. */
    readonly config: SchedulerConfig
  }
>() {}

interface Registered {
  readonly run: Handler<unknown, unknown, never>
  readonly timeout: Duration.Duration
}

interface Claimed {
  readonly job: ScheduledJob
  readonly run: JobRun
  readonly lease: Lease
}

const STOP_ERROR = "interrupted: the runner stopped before the handler finished"
/** Most queue results written in one statement. */
const RESULT_BATCH = 500
/** Writing a batch of results again after a failure (a deadlock with another instance rolls it back whole). */
const resultWriteRetry = RetryPolicy.addDelay(RetryPolicy.recurs(3), () => Duration.millis(20))

/** Builds a runner in the current scope. `Settings` is optional: without it nothing is paused. */
export const make = (input: SchedulerConfigInput = {}): Effect.Effect<Runner["Type"], never, JobStore | Scope.Scope> =>
  Effect.gen(function* () {
    const config = withDefaults(input)
    const store = yield* JobStore
    const settings = yield* Effect.serviceOption(Settings)
    const queue = yield* Effect.serviceOption(QueueStore)
    const scope = yield* Effect.scope
    const owner = `${os.hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const handlers = new Map<string, Registered>()
    const executions = yield* FiberSet.make<void, never>()
    const inFlight = yield* Ref.make(0)
    /** When the job tables next need a look (a slot or retry due, or the poll); 0: at once. */
    let jobsCheckAt = 0
    const stats = yield* Ref.make<RunnerStats>({ started: 0, ok: 0, failed: 0 })
    const count = (result: Result.Result) =>
      Ref.update(stats, (s) => (result.failed ? { ...s, failed: s.failed + 1 } : { ...s, ok: s.ok + 1 }))
    const stopping = yield* Ref.make(false)
    const loopFiber = yield* Ref.make<Option.Option<Fiber.RuntimeFiber<void, never>>>(Option.none())
    // A wake-up: new capacity (an execution finished) or a new retry to sleep towards.
    const wake = yield* Queue.sliding<void>(1)
    const leaseMs = Duration.toMillis(config.leaseDuration)

    const register = <A, E = never, R = never>(taskType: string, handler: Handler<A, E, R>, options?: HandlerOptions) =>
      Effect.gen(function* () {
        const context = yield* Effect.context<R>()
        const run: Handler<unknown, unknown, never> = (job, signal) => {
          const out = handler(job, signal)
          return Effect.isEffect(out) ? Effect.provide(out as Effect.Effect<A, E, R>, context) : out
        }
        const timeout =
          options?.timeout === undefined ? config.timeout : withDefaults({ timeout: options.timeout }).timeout
        if (handlers.has(taskType)) {
          yield* Effect.logWarning(`handler for task type "${taskType}" registered again: the new one replaces it`)
        }
        handlers.set(taskType, { run, timeout })
      })

    /** The live switches: config supplies the defaults, settings override them every tick. */
    const readSwitches = Effect.gen(function* () {
      if (Option.isNone(settings)) {
        const red = Option.isSome(queue) && !(yield* queue.value.getSemaphore())
        return { paused: red, enabled: true, interval: config.interval }
      }
      const s = settings.value
      // Read side by side (a pool runs them on separate connections): one round trip per tick, not four.
      const [pausedSetting, enabledSetting, seconds, green] = yield* Effect.all(
        [
          s.getBool(SettingKeys.paused),
          s.getBool(SettingKeys.enabled),
          s.getInt(SettingKeys.intervalSeconds),
          Option.isSome(queue) ? queue.value.getSemaphore() : Effect.succeed(true)
        ],
        { concurrency: "unbounded" }
      )
      // The queue's kill switch pauses everything (in Postgres it is the same row).
      const paused = Option.getOrElse(pausedSetting, () => false) || !green
      const enabled = Option.getOrElse(enabledSetting, () => config.enabled)
      const interval = Option.isSome(seconds) && seconds.value > 0 ? Duration.seconds(seconds.value) : config.interval
      return { paused, enabled, interval }
    })

    /** A retry of `run` as a pending row, due after the backoff (or at once), if attempts remain. */
    const scheduleRetry = (run: JobRun, now: Date, immediately = false) =>
      Effect.gen(function* () {
        if (run.attempt >= 1 + config.retryAttempts) return false
        const jitter = yield* Random.nextRange(0.9, 1.1)
        const delay = immediately ? 0 : Duration.toMillis(retryDelay(config, run.attempt, jitter))
        yield* store.createRun({
          jobId: run.jobId,
          scheduledFor: run.scheduledFor,
          attempt: run.attempt + 1,
          status: "pending",
          dueAt: new Date(now.getTime() + delay),
          now
        })
        jobsCheckAt = 0
        return true
      })

    const leaseUntil = (now: Date) => new Date(now.getTime() + leaseMs)

    /** Claims due work in one transaction: rescues, due retries, then due jobs. */
    const claim = (now: Date, limit: number, interval: Duration.Duration) =>
      store.transaction(
        Effect.gen(function* () {
          const claimed: Array<Claimed> = []
          let overlapped = 0
          let rescued = 0
          for (const { run } of yield* store.listExpired(now, config.batchSize)) {
            if (run.leaseToken === null) continue
            const lost = `owner lost: ${run.owner ?? "its owner"} stopped renewing its lease (expired ${run.leaseUntil?.toISOString()})`
            if (yield* store.markFailed({ runId: run.id, token: run.leaseToken }, lost, now)) {
              yield* scheduleRetry(run, now, true)
              rescued++
            }
          }
          for (const { job, run } of yield* store.listDueRetries(now, limit)) {
            const lease = yield* store.markRunning(run.id, { now, owner, leaseUntil: leaseUntil(now) })
            if (Option.isSome(lease)) {
              claimed.push({ job, run: { ...run, status: "running", startedAt: now }, lease: lease.value })
            }
          }
          // Slots that only record a row (skipped, undecodable) take no worker: keep looking while there is room.
          let room = limit - claimed.length
          let budget = config.batchSize
          while (room > 0 && budget > 0) {
            const due = yield* store.listDue(now, Math.min(room, budget))
            if (due.length === 0) break
            budget -= due.length
            for (const job of due) {
              const decoded = Schedule.decode(job.schedule)
              if (Either.isLeft(decoded)) {
                // Fail once and disable: a schedule that no longer decodes must not fail on every tick.
                yield* store.createRun({
                  jobId: job.id,
                  scheduledFor: job.nextRunAt ?? job.createdAt,
                  attempt: 1,
                  status: "failed",
                  error: `${decoded.left.message}; the job was disabled`,
                  now
                })
                yield* store.disableJob(job.id, now)
                yield* Effect.logError(`job "${job.name}" disabled: ${decoded.left.message}`).pipe(
                  Effect.annotateLogs({ jobId: job.id, taskType: job.taskType })
                )
                continue
              }
              // A job inserted without a next_run_at (by SQL): its first slot is the one after its creation.
              const slot = job.nextRunAt ?? Schedule.next(decoded.right, job.createdAt)
              if (slot.getTime() > now.getTime()) {
                yield* store.updateNextRun(job.id, slot, now)
                continue
              }
              const decision = decideDue({
                schedule: decoded.right,
                slot,
                now,
                missedSlots: job.missedSlots ?? config.missedSlots,
                overlap: job.overlap,
                previousRunning: job.overlap === "skip" ? yield* store.hasLiveRun(job.id, now) : false,
                lateAfterMs: Duration.toMillis(interval)
              })
              if (decision.skipped !== undefined) {
                yield* store.createRun({
                  jobId: job.id,
                  scheduledFor: decision.skipped,
                  attempt: 1,
                  status: "skipped",
                  error: "skipped: the previous run was still running",
                  now
                })
                overlapped++
              }
              if (decision.run !== undefined) {
                const run = yield* store.createRun({
                  jobId: job.id,
                  scheduledFor: decision.run,
                  attempt: 1,
                  status: "running",
                  owner,
                  leaseUntil: leaseUntil(now),
                  now
                })
                if (run.leaseToken !== null) {
                  claimed.push({ job, run, lease: { runId: run.id, token: run.leaseToken } })
                  room--
                }
              }
              yield* store.updateNextRun(job.id, decision.next, now)
            }
          }
          return { claimed, overlapped, rescued }
        })
      )

    /** Renews the lease while the handler runs; completes when the lease is lost. */
    const keepLease = (lease: Lease) =>
      Effect.gen(function* () {
        while (true) {
          yield* Effect.sleep(Duration.millis(Math.max(1, Math.floor(leaseMs / 3))))
          const now = yield* clockNow
          const held = yield* store
            .renewLease(lease, leaseUntil(now), now)
            .pipe(Effect.catchAll((e) => Effect.as(Effect.logWarning(`lease renewal failed: ${e.message}`), true)))
          if (!held) return
        }
      })

    const finish = (c: Claimed, result: Result.Result) =>
      Effect.gen(function* () {
        yield* count(result)
        jobsCheckAt = 0
        const now = yield* clockNow
        if (!result.failed) {
          const ok = yield* store.markSuccess(c.lease, Result.encodeOutput(result.output), now)
          if (!ok) yield* Effect.logWarning("result refused: the run's lease was lost")
          return
        }
        yield* store.transaction(
          Effect.gen(function* () {
            const ok = yield* store.markFailed(c.lease, result.message, now)
            if (!ok) return yield* Effect.logWarning("failure refused: the run's lease was lost")
            yield* scheduleRetry(c.run, now)
          })
        )
      }).pipe(
        Effect.annotateLogs({ jobId: c.job.id, job: c.job.name, taskType: c.job.taskType, attempt: c.run.attempt })
      )

    const execute = (c: Claimed): Effect.Effect<void> =>
      Effect.gen(function* () {
        const handler = handlers.get(c.job.taskType)
        if (handler === undefined) {
          const now = yield* clockNow
          // No retry: this process has no handler for it, and a retry here cannot change that.
          yield* store.markFailed(c.lease, `unknown task type "${c.job.taskType}": no handler is registered`, now)
          return
        }
        const job = new Job({
          id: c.job.id,
          kind: "scheduled",
          name: c.job.name,
          taskType: c.job.taskType,
          payload: c.job.payload,
          scheduledFor: c.run.scheduledFor,
          attempt: c.run.attempt,
          metadata: { runId: c.run.id, owner }
        })
        const outcome = yield* Effect.raceFirst(
          Effect.map(runToResult(handler.run, job, handler.timeout), Option.some),
          Effect.as(keepLease(c.lease), Option.none<Result.Result>())
        )
        if (Option.isNone(outcome)) {
          yield* Effect.logWarning("lease lost while running: the handler was aborted and its result discarded")
          return
        }
        yield* finish(c, outcome.value)
      }).pipe(
        Effect.onInterrupt(() =>
          // Forced stop: record the interruption and hand the slot to a retry due at once, for any instance.
          Effect.gen(function* () {
            const now = yield* clockNow
            yield* store.transaction(
              Effect.gen(function* () {
                if (yield* store.markFailed(c.lease, STOP_ERROR, now)) yield* scheduleRetry(c.run, now, true)
              })
            )
          }).pipe(Effect.catchAll((e) => Effect.logError(`could not release a lease at stop: ${e.message}`)))
        ),
        Effect.catchAll((e) => Effect.logError(`recording a run failed: ${e.message}`)),
        Effect.ensuring(
          Effect.zipRight(
            Ref.update(inFlight, (n) => n - 1),
            Queue.offer(wake, undefined)
          )
        ),
        Effect.annotateLogs({ jobId: c.job.id, job: c.job.name, taskType: c.job.taskType })
      )

    let lastHousekeeping = Number.NEGATIVE_INFINITY

    // Results are written in batches: whatever finished while the previous batch was being written goes in
    // the next one, one round of statements for all of them.
    const results = yield* Queue.unbounded<{
      readonly claim: QueueClaim
      readonly result: ExecutionResult
      readonly done: Deferred.Deferred<boolean, QueueStoreError>
    }>()
    if (Option.isSome(queue)) {
      const q = queue.value
      yield* Effect.forkIn(
        Effect.forever(
          Effect.gen(function* () {
            const batch = Chunk.toReadonlyArray(yield* Queue.takeBetween(results, 1, RESULT_BATCH))
            const written = yield* q.recordResults(batch).pipe(
              // A deadlock with another instance's batch rolls this one back whole: writing it again is safe.
              Effect.retry(resultWriteRetry),
              Effect.either
            )
            for (let i = 0; i < batch.length; i++) {
              const entry = batch[i]!
              if (Either.isRight(written)) yield* Deferred.succeed(entry.done, written.right[i] ?? false)
              else yield* Deferred.fail(entry.done, written.left)
            }
          })
        ),
        scope
      )
    }
    const recordQueueResult = (claim: QueueClaim, result: ExecutionResult) =>
      Effect.gen(function* () {
        const done = yield* Deferred.make<boolean, QueueStoreError>()
        yield* Queue.offer(results, { claim, result, done })
        return yield* Deferred.await(done)
      })

    // Queue executions in flight: one renewal loop keeps all their leases, in one statement, instead of a timer
    // per execution. An execution whose lease was lost (expired and taken back) is interrupted.
    interface Active {
      readonly claim: QueueClaim
      fiber: Fiber.RuntimeFiber<void, never> | undefined
      lost: boolean
    }
    const active = new Map<string, Active>()
    const renewSignal = yield* Queue.sliding<void>(1)
    if (Option.isSome(queue)) {
      const q = queue.value
      yield* Effect.forkIn(
        Effect.forever(
          Effect.gen(function* () {
            // Nothing to renew: wait for work instead of waking every few (possibly fake) seconds.
            if (active.size === 0) yield* Queue.take(renewSignal)
            yield* Effect.sleep(Duration.millis(Math.max(1, Math.floor(leaseMs / 3))))
            const entries = [...active.values()]
            if (entries.length === 0) return
            const now = yield* clockNow
            const held = yield* q
              .renewLeases(
                entries.map((e) => e.claim),
                leaseUntil(now),
                now
              )
              .pipe(
                Effect.map((ids) => new Set(ids)),
                // A failed renewal is not a lost lease: try again on the next round.
                Effect.catchAll((e) =>
                  Effect.as(
                    Effect.logWarning(`lease renewal failed: ${e.message}`),
                    new Set(entries.map((x) => x.claim.leaseId))
                  )
                )
              )
            for (const entry of entries) {
              if (held.has(entry.claim.leaseId) || active.get(entry.claim.leaseId) !== entry) continue
              entry.lost = true
              active.delete(entry.claim.leaseId)
              if (entry.fiber !== undefined) yield* Fiber.interruptFork(entry.fiber)
            }
          })
        ),
        scope
      )
    }

    /** Claims queue items into the room left, and starts them. Returns how many started. */
    const claimQueue = (q: QueueStore["Type"], now: Date, room: number) =>
      Effect.gen(function* () {
        // At most every third of a lease, on a tick: heartbeat, and take back executions whose owner died. (On ticks,
        // not on a timer of its own: an idle runner under a test clock would otherwise wake every few seconds of
        // fake time; a worker counts as live for max(poll interval, lease) after its last tick.)
        if (now.getTime() - lastHousekeeping >= leaseMs / 3) {
          lastHousekeeping = now.getTime()
          yield* q.registerWorker(owner, [...handlers.keys()], now)
          const recovered = yield* q.recoverStuck(now)
          if (recovered > 0) yield* Effect.logWarning(`took back ${recovered} queue execution(s) whose lease expired`)
        }
        const limit = config.rateLimit > 0 ? Math.min(room, config.rateLimit) : room
        if (limit <= 0 || handlers.size === 0) return 0
        const claims = yield* q.claimBatch({
          limit,
          taskTypes: [...handlers.keys()],
          owner,
          leaseUntil: leaseUntil(now),
          now
        })
        for (const c of claims) {
          yield* Ref.update(inFlight, (n) => n + 1)
          yield* Ref.update(stats, (s) => ({ ...s, started: s.started + 1 }))
          const entry: Active = { claim: c, fiber: undefined, lost: false }
          if (active.size === 0) yield* Queue.offer(renewSignal, undefined)
          active.set(c.leaseId, entry)
          entry.fiber = yield* FiberSet.run(executions, executeQueue(entry))
        }
        return claims.length
      })

    const executeQueue = (entry: Active): Effect.Effect<void> => {
      const c = entry.claim
      return Effect.gen(function* () {
        const startedAt = yield* clockNow
        const handler = handlers.get(c.item.taskType)
        const job = new Job({
          id: c.item.id,
          kind: "queue",
          name: c.item.taskType,
          taskType: c.item.taskType,
          payload: c.item.payload,
          scheduledFor: c.item.createdAt,
          attempt: c.runsDone + 1,
          metadata: { priority: c.item.priority, thread: c.item.thread, maxRuns: c.item.maxRuns, leaseId: c.leaseId }
        })
        const result =
          handler === undefined
            ? Result.failure(`unknown task type "${c.item.taskType}": no handler is registered`)
            : yield* runToResult(handler.run, job, handler.timeout)
        // Done running: its lease is no longer renewed (the write below deletes it).
        active.delete(c.leaseId)
        const finishedAt = yield* clockNow
        yield* count(result)
        const recorded = yield* recordQueueResult(c, {
          startedAt,
          finishedAt,
          error: result.failed ? result.message : undefined
        })
        if (!recorded) yield* Effect.logWarning("result refused: the execution's lease was lost")
      }).pipe(
        Effect.catchAll((e) => Effect.logError(`recording a queue result failed: ${e.message}`)),
        Effect.onInterrupt(() =>
          entry.lost
            ? Effect.logWarning("lease lost while running: the handler was aborted and its result discarded")
            : Effect.void
        ),
        Effect.ensuring(
          Effect.sync(() => active.delete(c.leaseId)).pipe(
            Effect.zipRight(Ref.update(inFlight, (n) => n - 1)),
            Effect.zipRight(Queue.offer(wake, undefined))
          )
        ),
        Effect.annotateLogs({ itemId: c.item.id, taskType: c.item.taskType })
      )
    }

    /** One tick, plus the poll interval it read (the loop sleeps by it). */
    const tickWithInterval = Effect.gen(function* () {
      const idle = (skipped: TickReport["skipped"]) => ({ skipped, started: 0, overlapped: 0, rescued: 0 })
      if (yield* Ref.get(stopping)) return { report: idle("stopped"), interval: config.interval }
      const switches = yield* readSwitches
      const interval = switches.interval
      if (switches.paused) return { report: idle("paused"), interval }
      if (!switches.enabled) return { report: idle("disabled"), interval }
      const limit = Math.min(config.batchSize, config.workers - (yield* Ref.get(inFlight)))
      if (limit <= 0) return { report: idle("busy"), interval }
      const now = yield* clockNow
      // The job tables are read only when something may be due there (or a poll has passed): a busy queue then
      // pays nothing for them. Whatever this runner changes about jobs resets the check.
      const nothing = { claimed: [] as Array<Claimed>, overlapped: 0, rescued: 0 }
      const { claimed, overlapped, rescued } =
        now.getTime() >= jobsCheckAt
          ? yield* Effect.tap(claim(now, limit, interval), () =>
              Effect.map(store.nextWakeAt(now), (wakeAt) => {
                const pollAt = now.getTime() + Duration.toMillis(interval)
                jobsCheckAt = Option.isSome(wakeAt) ? Math.min(wakeAt.value.getTime(), pollAt) : pollAt
              })
            )
          : nothing
      for (const c of claimed) {
        yield* Ref.update(inFlight, (n) => n + 1)
        yield* Ref.update(stats, (s) => ({ ...s, started: s.started + 1 }))
        yield* FiberSet.run(executions, execute(c))
      }
      const queued = Option.isSome(queue) ? yield* claimQueue(queue.value, now, limit - claimed.length) : 0
      return { report: { started: claimed.length + queued, queued, overlapped, rescued }, interval }
    })

    // A tick asked for explicitly looks at everything, the job tables included.
    const tick: Effect.Effect<TickReport, JobStoreError | SettingsError | QueueStoreError> = Effect.suspend(() => {
      jobsCheckAt = 0
      return Effect.map(tickWithInterval, (t) => t.report)
    })

    /** How long to sleep after a tick: until the next poll, or the next slot or retry if that comes first. */
    const nextDelay = (report: TickReport, interval: Duration.Duration) =>
      Effect.gen(function* () {
        const pollMs = Duration.toMillis(interval)
        // Paused, disabled or full: only the poll (or a wake-up) can change that.
        if (report.skipped !== undefined) return pollMs
        if ((yield* Ref.get(inFlight)) >= config.workers) return pollMs
        // A full batch: more may be due right now.
        if (report.started >= config.batchSize) return 0
        const now = yield* clockNow
        // The tick already asked the store when jobs are next due (jobsCheckAt); ask again only if something this
        // runner did since (a finished run, a new retry) reset it.
        const wakeAtMs =
          jobsCheckAt > 0
            ? jobsCheckAt
            : Option.match(yield* store.nextWakeAt(now), {
                onNone: () => now.getTime() + pollMs,
                onSome: (d) => d.getTime()
              })
        // Work already due but not taken (locked by another instance): look again shortly, never spin.
        return Math.min(pollMs, Math.max(50, wakeAtMs - now.getTime()))
      })

    // The loop ends itself when stopping (checked between ticks): a tick in progress completes, so work it has
    // claimed is also started, and `stop` then waits for it like any running handler.
    const loop: Effect.Effect<void> = Effect.gen(function* () {
      let failures = 0
      while (!(yield* Ref.get(stopping))) {
        const delayMs = yield* tickWithInterval.pipe(
          Effect.flatMap(({ interval, report }) => nextDelay(report, interval)),
          Effect.tap(() => {
            failures = 0
          }),
          Effect.catchAll((e) => {
            failures++
            // The database may be away: back off, never crash, resume by itself.
            const backoff = Math.min(60_000, 1000 * 2 ** Math.min(6, failures - 1))
            return Effect.as(Effect.logError(`tick failed (retrying in ${backoff} ms): ${e.message}`), backoff)
          })
        )
        yield* Queue.takeAll(wake)
        if (yield* Ref.get(stopping)) return
        yield* Effect.raceFirst(Effect.sleep(Duration.millis(delayMs)), Queue.take(wake))
      }
    })

    const start = Effect.gen(function* () {
      if (!config.enabled) return
      if (Option.isSome(yield* Ref.get(loopFiber)) || (yield* Ref.get(stopping))) return
      if (Option.isSome(queue)) {
        // New items and semaphore changes wake the idle runner at once; the poll stays the fallback.
        yield* Scope.extend(
          queue.value.subscribe(() => Queue.unsafeOffer(wake, undefined)),
          scope
        )
      }
      const fiber = yield* Effect.forkIn(loop, scope)
      yield* Ref.set(loopFiber, Option.some(fiber))
    })

    const stop = Effect.gen(function* () {
      if (yield* Ref.getAndSet(stopping, true)) return
      const fiber = yield* Ref.get(loopFiber)
      if (Option.isSome(fiber)) {
        // Not interrupted mid-tick: a claim committed but not yet started would stay `running` until its lease
        // expired. Woken, the loop finishes its tick and ends; interrupted only if that takes the grace period.
        yield* Queue.offer(wake, undefined)
        yield* Fiber.await(fiber.value).pipe(
          Effect.interruptible,
          Effect.timeoutTo({
            duration: config.gracePeriod,
            onSuccess: () => Effect.void,
            onTimeout: () => Fiber.interrupt(fiber.value)
          }),
          Effect.flatten
        )
      }
      // Interruptible: stop often runs in a scope finalizer (uninterruptible), where the timeout could not
      // otherwise cut the wait short.
      const drained = yield* FiberSet.awaitEmpty(executions).pipe(
        Effect.interruptible,
        Effect.timeoutTo({
          duration: config.gracePeriod,
          onSuccess: () => true,
          onTimeout: () => false
        })
      )
      if (!drained) {
        yield* Effect.logWarning(`grace period of ${Duration.format(config.gracePeriod)} over: interrupting handlers`)
        yield* FiberSet.clear(executions)
      }
      if (Option.isSome(queue)) {
        // Release what was cut short, so another instance takes it at once, and leave the live workers.
        const now = yield* clockNow
        yield* queue.value.recoverStuck(now, owner).pipe(
          Effect.zipRight(queue.value.unregisterWorker(owner)),
          Effect.catchAll((e) => Effect.logError(`could not release queue leases at stop: ${e.message}`))
        )
      }
    })

    yield* Effect.addFinalizer(() => stop)

    const defineJobs = (
      jobs: ReadonlyArray<RecurringJob>,
      options?: { readonly disableOthers?: boolean | undefined }
    ) =>
      Effect.gen(function* () {
        const now = yield* clockNow
        jobsCheckAt = 0
        if (options?.disableOthers === true) {
          const names = jobs.map((j) => j.name)
          const disabled = yield* store.disableJobsExcept(names, now)
          if (disabled > 0) yield* Effect.logInfo(`disabled ${disabled} job(s) no longer defined in code`)
        }
        return yield* store.upsertJobs(
          jobs.map((j) => ({
            name: j.name,
            taskType: j.taskType,
            schedule: Schedule.encode(j.schedule),
            payload:
              j.payload === undefined ? "" : typeof j.payload === "string" ? j.payload : JSON.stringify(j.payload),
            nextRunAt: Schedule.next(j.schedule, now),
            missedSlots: j.missedSlots ?? null,
            overlap: j.overlap ?? "skip"
          })),
          now
        )
      })

    return Runner.of({
      register,
      start,
      stop,
      tick,
      wake: Queue.offer(wake, undefined).pipe(Effect.asVoid),
      defineJobs,
      running: Ref.get(inFlight),
      stats: Ref.get(stats),
      owner,
      config
    })
  })

/** The runner as a layer; closing the layer's scope stops it (gracefully, within the grace period). */
export const layer = (config: SchedulerConfigInput = {}): Layer.Layer<Runner, never, JobStore> =>
  Layer.scoped(Runner, make(config))
