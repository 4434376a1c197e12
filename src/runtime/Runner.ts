/**
 * The runner: a loop that claims due work from its sources (scheduled runs, queue items) up to the free capacity,
 * runs handlers in fibers it owns, and sleeps until the next slot, retry or poll — or until woken. Around it, three
 * long-lived fibers: one lease renewal round for every execution, one results writer, one heartbeat. None of them
 * ends on any cause while the runner runs. Composed as a scoped service: closing its scope stops it.
 */
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as RetryPolicy from "effect/Schedule"
import * as Scope from "effect/Scope"
import fs from "node:fs"
import os from "node:os"
import { randomBytes } from "node:crypto"
import * as Result from "../domain/Result.js"
import * as Retention from "../domain/Retention.js"
import * as Retry from "../domain/Retry.js"
import * as Metrics from "./Metrics.js"
import type { ScheduledJob } from "../domain/ScheduledJob.js"
import { validate, withDefaults, type SchedulerConfig, type SchedulerConfigInput } from "../domain/SchedulerConfig.js"
import type { InvalidConfigError, InvalidRetryError } from "../domain/errors.js"
import { now as clockNow } from "../ports/Clock.js"
import { JobStore, type JobStoreError } from "../ports/JobStore.js"
import { QueueStore, type QueueStoreError } from "../ports/QueueStore.js"
import { Settings, type SettingsError } from "../ports/Settings.js"
import { type Subscription, WakeUps } from "../ports/WakeUps.js"
import { WorkerRegistry } from "../ports/WorkerRegistry.js"
import { type Handler, type HandlerOptions, isEffect } from "./Handler.js"
import * as Capacity from "./Capacity.js"
import * as QueueSource from "./QueueSource.js"
import * as ScheduledSource from "./ScheduledSource.js"
import {
  type ExecutionReport,
  type Lane,
  type LaneContext,
  makeLane,
  type Registered,
  renewEvery
} from "./WorkSource.js"

export type { RecurringJob } from "./ScheduledSource.js"
export type { ExecutionReport } from "./WorkSource.js"

/** The configuration, plus an optional listener. */
export interface RunnerOptions extends SchedulerConfigInput {
  /**
   * Called, synchronously on the hot path, as each execution ends (a command line prints a line per execution).
   * Keep it cheap; what it throws is ignored. Absent, nothing is built per execution for it.
   */
  readonly onExecution?: ((report: ExecutionReport) => void) | undefined
}

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
  /** Executions whose owner was lost (lease expired), taken back. */
  readonly rescued: number
}

/** Counters of a runner's executions: started, and finished ok or failed (whatever the failure). */
export interface RunnerStats {
  readonly started: number
  readonly ok: number
  readonly failed: number
}

/** The errors a tick can end with. */
export type TickError = JobStoreError | SettingsError | QueueStoreError

/** The runner's interface. */
export class Runner extends Context.Tag("kairos/Runner")<
  Runner,
  {
    /**
     * Registers the handler of a task type. Registering a type again replaces its handler (and logs a warning).
     * Fails, registering nothing, when `options.retry` is not a valid policy.
     */
    readonly register: <A, E = never, R = never>(
      taskType: string,
      handler: Handler<A, E, R>,
      options?: HandlerOptions
    ) => Effect.Effect<void, InvalidRetryError, R>
    /** Ticks now and then every interval, in a fiber of the runner's scope. Does nothing when disabled by config. */
    readonly start: Effect.Effect<void>
    /** Stops claiming, waits for running handlers up to the grace period, then interrupts them. */
    readonly stop: Effect.Effect<void>
    /** One tick: claims due work up to the free capacity and starts it; never waits for handlers. */
    readonly tick: Effect.Effect<TickReport, TickError>
    /**
     * Wakes an idle runner now (new work arrived, or a job's next slot was changed by another program): its next
     * tick looks at everything. The poll stays the fallback.
     */
    readonly wake: Effect.Effect<void>
    /**
     * Upserts recurring jobs by name; a changed schedule recomputes the next slot. With `disableOthers`, every
     * other enabled job (one removed from code) is disabled.
     */
    readonly defineJobs: (
      jobs: ReadonlyArray<ScheduledSource.RecurringJob>,
      options?: { readonly disableOthers?: boolean | undefined }
    ) => Effect.Effect<ReadonlyArray<ScheduledJob>, JobStoreError>
    /** Executions running now in this process. */
    readonly running: Effect.Effect<number>
    /** Counters since this runner was built: executions started, succeeded and failed (both kinds of work). */
    readonly stats: Effect.Effect<RunnerStats>
    /** This runner's owner id, as written on the leases it holds and in `scheduler_workers`. */
    readonly owner: string
    /** The configuration with defaults applied. */
    readonly config: SchedulerConfig
  }
>() {}

/** The wait after a failed tick: 1 s doubling up to a minute. The database may be away; the loop never ends. */
export const tickFailureBackoff = RetryPolicy.exponential("1 second").pipe(
  RetryPolicy.union(RetryPolicy.spaced("1 minute"))
)

/** The delay after `failures` failed ticks in a row, read off `tickFailureBackoff` without sleeping. */
const backoffAfter = (failures: number) =>
  Effect.map(
    RetryPolicy.run(
      RetryPolicy.delays(tickFailureBackoff),
      0,
      Array.from({ length: Math.min(failures, 8) }, () => 0)
    ),
    (delays) => Option.getOrElse(Chunk.last(delays), () => Duration.seconds(1))
  )

/** After a failed tick, how long wake-ups are ignored before they may end the backoff early (ms). */
const WAKE_AFTER_FAILURE_MS = 2000

/** Runs `self` forever; a failure or defect of one round is logged and the next round goes on. */
const supervised = (name: string, round: Effect.Effect<void>): Effect.Effect<never> =>
  Effect.forever(
    round.pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logError(`${name} failed (going on): ${Result.errorMessage(Cause.squash(cause))}`, cause)
      )
    )
  )

/** Every execution counts in the metrics (see Metrics), then reaches the user's listener, if any. */
const withMetrics =
  (listener: ((report: ExecutionReport) => void) | undefined) =>
  (report: ExecutionReport): void => {
    Metrics.recordExecution(report)
    listener?.(report)
  }

/** A listener whose throws cannot reach the runner; undefined stays undefined (nothing to call). */
const listenSafely = (
  listener: ((report: ExecutionReport) => void) | undefined
): ((report: ExecutionReport) => void) | undefined =>
  listener === undefined
    ? undefined
    : (report) => {
        try {
          listener(report)
        } catch {
          // The listener's problem: the execution is recorded all the same.
        }
      }

/** Builds a runner in the current scope, over its stores and settings. */
export const make = (
  input: RunnerOptions = {}
): Effect.Effect<
  Runner["Type"],
  InvalidConfigError,
  JobStore | QueueStore | Settings | WorkerRegistry | WakeUps | Scope.Scope
> =>
  Effect.gen(function* () {
    const config = yield* validate(input)
    const settings = yield* Settings
    const queueStore = yield* QueueStore
    const workerRegistry = yield* WorkerRegistry
    const wakeUps = yield* WakeUps
    const jobStore = yield* JobStore
    const scope = yield* Effect.scope
    const owner = `${os.hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const leaseMs = Duration.toMillis(config.leaseDuration)
    const leaseUntil = (now: Date) => new Date(now.getTime() + leaseMs)

    // Handlers by task type.
    const handlers = new Map<string, Registered>()
    const taskTypes = () => [...handlers.keys()]

    // The workers and the buffer of work claimed ahead of them (see Capacity).
    const capacity = yield* Capacity.make(config)
    // Plain counters: they change once per execution, on the hot path.
    const stats = { started: 0, ok: 0, failed: 0 }
    const stopping = yield* Ref.make(false)
    const loopFiber = yield* Ref.make<Option.Option<Fiber.RuntimeFiber<never, never>>>(Option.none())
    // Signals: sliding queues of one, so a signal sent at any moment waits until it is taken, and never piles up.
    const wake = yield* Queue.sliding<void>(1)
    const resultsReady = yield* Queue.sliding<void>(1)
    const leasesHeld = yield* Queue.sliding<void>(1)
    const handlersChanged = yield* Queue.sliding<void>(1)
    const signal = (queue: Queue.Queue<void>) => Effect.asVoid(Queue.offer(queue, undefined))
    // The same, from plain code on the hot path (no Effect to run).
    const signalNow = (queue: Queue.Queue<void>) => void queue.unsafeOffer(undefined)
    // The loop's wake-up, sent by every execution that ends while the buffer runs low: offered once until the loop
    // takes it (an offer to a queue nobody waits on still costs Effect's queue an allocation). Every take of `wake`
    // goes through `takeWake`, which clears the flag first, so a signal sent after it is offered again.
    let wakeQueued = false
    const wakeNow = () => {
      if (wakeQueued) return
      wakeQueued = true
      signalNow(wake)
    }
    const takeWake = (take: (queue: Queue.Queue<void>) => Effect.Effect<unknown>) =>
      Effect.suspend(() => {
        wakeQueued = false
        return Effect.asVoid(take(wake))
      })
    // The writer is signalled once per batch, not once per result: reset when it takes the signal.
    let writerSignalled = false
    // Whether a tick may be skipped after a chained result (see `needsTick`): the last tick's queue claim took less
    // than it asked (nothing else was claimable then), no wake-up came since, and that tick was recent enough for
    // the rescue of expired leases, which ticks do, not to fall behind.
    let queueQuiet = false
    let lastTickAtMs = Number.NEGATIVE_INFINITY
    const clock = yield* Effect.clock
    const needsTick = (chained: boolean) =>
      !chained || !queueQuiet || clock.unsafeCurrentTimeMillis() - lastTickAtMs >= leaseMs / 3
    // The timeout watch is woken only by a deadline sooner than the one it sleeps until.
    const deadlineSooner = yield* Queue.sliding<void>(1)
    let watchedUntil = Number.POSITIVE_INFINITY
    const definedTypes = new Set<string>()
    // What a claim at `now` asks for (its limit aside): the tick's, and the results writer's along with a batch.
    const requestAt = (now: Date, interval: Duration.Duration, force: boolean) => ({
      now,
      owner,
      leaseUntil: leaseUntil(now),
      taskTypes: taskTypes(),
      interval,
      force
    })
    // The switches as the last tick read them (see `chain`); undefined once a settings change was announced.
    let lastSwitches:
      | { readonly paused: boolean; readonly enabled: boolean; readonly interval: Duration.Duration }
      | undefined
    // The store's wake-up subscription, once started, and how many settings changes it announced: the switches last
    // read are trusted while it listens and announced none since (see `currentSwitches`).
    let subscription: Subscription | undefined
    let settingsChanges = 0
    let readSwitchesAt = { atMs: Number.NEGATIVE_INFINITY, changes: -1 }

    const laneContext: LaneContext = {
      handler: (taskType: string) => handlers.get(taskType),
      submit: capacity.submit,
      started: () => {
        stats.started++
        capacity.started()
      },
      stopped: capacity.stopped,
      ended: (result, chained) => {
        // Interrupted (a forced stop, a lost lease) counts as a failure too: every failure is counted.
        if (result === undefined || result.failed) stats.failed++
        else stats.ok++
        // The buffer ran low: claim more, unless all this could free is claimed again with its result (a chain).
        if (capacity.ended() && needsTick(chained)) wakeNow()
      },
      resultsReady: () => {
        if (writerSignalled) return
        writerSignalled = true
        signalNow(resultsReady)
      },
      leasesHeld: () => signalNow(leasesHeld),
      written: (chained) => {
        if (needsTick(chained)) wakeNow()
      },
      deadline: (atMs) => {
        if (atMs >= watchedUntil) return
        watchedUntil = atMs
        signalNow(deadlineSooner)
      },
      executed: withMetrics(listenSafely(input.onExecution)),
      // The writer claims along with a batch only while the last tick found the runner running: a switch changed
      // since then wakes the loop at once (NOTIFY), whose tick reads it and stops the chain.
      chain: Effect.gen(function* () {
        const live = lastSwitches
        if (live === undefined || live.paused || !live.enabled) return undefined
        if (yield* Ref.get(stopping)) return undefined
        const room = capacity.room()
        if (room <= 0) return undefined
        return { ...requestAt(yield* clockNow, live.interval, false), limit: room }
      })
    }
    const scheduled = yield* ScheduledSource.make({ config, owner })
    const lanes: ReadonlyArray<Lane<TickError>> = [
      makeLane(scheduled.source, laneContext),
      makeLane(
        yield* QueueSource.make({ config, owner, retryOf: (taskType) => handlers.get(taskType)?.retry }),
        laneContext
      )
    ]

    const register = <A, E = never, R = never>(taskType: string, handler: Handler<A, E, R>, options?: HandlerOptions) =>
      Effect.gen(function* () {
        const context = yield* Effect.context<R>()
        const run: Handler<unknown, unknown, never> = (job, abort) => {
          const out = handler(job, abort)
          return isEffect(out) ? Effect.provide(out as Effect.Effect<A, E, R>, context) : out
        }
        const takesSignal = handler.length >= 2
        const retry = options?.retry === undefined ? undefined : yield* Retry.parse(options.retry)
        const timeout =
          options?.timeout === undefined ? config.timeout : withDefaults({ timeout: options.timeout }).timeout
        if (handlers.has(taskType)) {
          yield* Effect.logWarning(`handler for task type "${taskType}" registered again: the new one replaces it`)
        }
        handlers.set(taskType, { run, timeout, timeoutMs: Duration.toMillis(timeout), takesSignal, retry })
        yield* signal(handlersChanged)
      })

    /** The live switches: the config supplies the defaults, settings override them every tick. */
    const readSwitches = Effect.map(settings.switches, (s) => ({
      paused: s.paused,
      enabled: Option.getOrElse(s.enabled, () => config.enabled),
      interval: Option.match(s.intervalSeconds, { onNone: () => config.interval, onSome: Duration.seconds })
    }))

    /**
     * The switches for a tick. A read costs a round trip before every claim, so the last one is used again while
     * nothing can have changed them unseen: the subscription listens (a change wakes the runner, announced as
     * "settings"; one missed during an outage is followed by a "jobs" wake-up), none was announced since, and it
     * was read within the poll interval. An explicit tick, or one after "jobs", always reads.
     */
    const currentSwitches = (force: boolean) =>
      Effect.gen(function* () {
        const nowMs = yield* Clock.currentTimeMillis
        const last = lastSwitches
        if (
          !force &&
          last !== undefined &&
          subscription?.live() === true &&
          readSwitchesAt.changes === settingsChanges &&
          nowMs - readSwitchesAt.atMs < Duration.toMillis(last.interval)
        ) {
          return last
        }
        const changes = settingsChanges
        const switches = yield* readSwitches
        lastSwitches = switches
        readSwitchesAt = { atMs: nowMs, changes }
        return switches
      })

    /** One tick, plus the poll interval it read (the loop sleeps by it). */
    const tickOnce = (force: boolean) =>
      Effect.gen(function* () {
        const idle = (skipped: TickReport["skipped"]): TickReport => ({
          skipped,
          started: 0,
          overlapped: 0,
          rescued: 0
        })
        queueQuiet = false
        if (yield* Ref.get(stopping)) return { report: idle("stopped"), interval: config.interval }
        const switches = yield* currentSwitches(force)
        const interval = switches.interval
        if (switches.paused) return { report: idle("paused"), interval }
        if (!switches.enabled) return { report: idle("disabled"), interval }
        let room = capacity.room()
        const now = yield* clockNow
        lastTickAtMs = now.getTime()
        const request = requestAt(now, interval, force)
        if (room <= 0) {
          // Every worker busy: only what takes no worker (an overlapped slot recorded as skipped) is done now.
          let overlapped = 0
          let rescued = 0
          for (const lane of lanes) {
            if (!lane.plansWhenFull) continue
            const report = yield* lane.claimAndStart({ ...request, limit: 0 })
            overlapped += report.overlapped
            rescued += report.rescued
          }
          return { report: { ...idle("busy"), overlapped, rescued }, interval }
        }
        let started = 0
        let queued = 0
        let overlapped = 0
        let rescued = 0
        for (const lane of lanes) {
          const report = yield* lane.claimAndStart({ ...request, limit: room })
          room -= report.started
          started += report.started
          if (lane.kind === "queue") {
            queued += report.started
            // It took less than it could: nothing else of the queue was claimable.
            queueQuiet = room > 0
          }
          overlapped += report.overlapped
          rescued += report.rescued
        }
        return { report: { started, queued, overlapped, rescued }, interval }
      })

    /** How long to sleep after a tick: until the next poll, or the next slot, retry or rate window if sooner. */
    const nextDelay = (report: TickReport, interval: Duration.Duration) =>
      Effect.gen(function* () {
        const pollMs = Duration.toMillis(interval)
        // Paused, disabled or stopped: only the poll or a wake-up (a setting changed) can change that.
        if (report.skipped !== undefined && report.skipped !== "busy") return pollMs
        // Full: capacity freed wakes the runner; meanwhile only the sources that plan when full need a look.
        const full = report.skipped === "busy" || capacity.room() <= 0
        // A full batch: more may be due right now.
        if (!full && report.started >= config.batchSize) return 0
        const now = yield* clockNow
        let wakeAtMs = now.getTime() + pollMs
        for (const lane of lanes) {
          if (full && !lane.plansWhenFull) continue
          const at = yield* lane.nextWakeAt(now, taskTypes())
          if (Option.isSome(at)) wakeAtMs = Math.min(wakeAtMs, at.value.getTime())
        }
        // Work already due but not taken (locked by another instance): look again shortly, never spin.
        return Math.min(pollMs, Math.max(50, wakeAtMs - now.getTime()))
      })

    // The loop ends itself when stopping (checked between ticks): a tick in progress completes, so work it has
    // claimed is also started, and `stop` then waits for it like any running handler. A wake-up sent during a tick
    // stays in its queue (taken before the tick, not after), so the sleep that follows ends at once.
    let failures = 0
    // Set by an explicit `wake`: the next tick also reads the job tables, whatever they were last known to hold
    // (another program may have changed a job's next slot).
    let lookEverywhere = false

    // The loop's alarm. The loop sleeps by waiting for a wake-up only; a fiber of its own sleeps until the time the
    // loop asked to be woken at (its next poll, slot or retry) and sends that wake-up. A wake-up then resumes the loop
    // at once, instead of ending a race of two fibers forked for every sleep (and interrupting the loser).
    let alarmAtMs = Number.POSITIVE_INFINITY
    const alarmSooner = yield* Queue.sliding<void>(1)
    const alarmRound = Effect.gen(function* () {
      const target = alarmAtMs
      if (target === Number.POSITIVE_INFINITY) return yield* Queue.take(alarmSooner)
      const nowMs = yield* Clock.currentTimeMillis
      if (target > nowMs) {
        // Woken early when the loop asks for a sooner time; a later one is seen when this sleep ends.
        yield* Effect.raceFirst(Effect.sleep(Duration.millis(target - nowMs)), Queue.take(alarmSooner))
        return
      }
      alarmAtMs = Number.POSITIVE_INFINITY
      signalNow(wake)
    })
    /** Waits until `ms` have passed or a wake-up came, whichever is first. */
    const sleepOrWake = (ms: number) =>
      Effect.suspend(() => {
        if (ms <= 0) return Effect.yieldNow()
        const atMs = clock.unsafeCurrentTimeMillis() + ms
        const sooner = atMs < alarmAtMs
        alarmAtMs = atMs
        if (sooner) signalNow(alarmSooner)
        return takeWake(Queue.take)
      })

    const loopRound = Effect.gen(function* () {
      if (yield* Ref.get(stopping)) return yield* Effect.interrupt
      // Awake: the alarm set for the last sleep no longer stands (a tick in progress is not woken again by it).
      alarmAtMs = Number.POSITIVE_INFINITY
      yield* takeWake(Queue.takeAll)
      const force = lookEverywhere
      lookEverywhere = false
      const delayMs = yield* tickOnce(force).pipe(
        // What the tick started begins before the sleep is planned (which may cost a statement to build and send):
        // the workers take their first executions in the yield.
        Effect.flatMap(({ interval, report }) =>
          report.started > 0
            ? Effect.zipRight(Effect.yieldNow(), nextDelay(report, interval))
            : nextDelay(report, interval)
        ),
        Effect.tap(() => {
          failures = 0
        }),
        Effect.catchAllCause((cause) =>
          Effect.gen(function* () {
            if (Cause.isInterruptedOnly(cause)) return yield* Effect.interrupt
            failures++
            const backoff = yield* backoffAfter(failures)
            yield* Effect.logError(
              `tick failed (retrying in ${Duration.format(backoff)}): ${Result.errorMessage(Cause.squash(cause))}`,
              cause
            )
            return Duration.toMillis(backoff)
          })
        )
      )
      if (yield* Ref.get(stopping)) return yield* Effect.interrupt
      if (failures > 0 && delayMs > WAKE_AFTER_FAILURE_MS) {
        // After a failed tick the backoff holds: wake-ups (every handler that finishes, the listener reconnecting)
        // end it only once a moment has passed, so an outage is retried, and logged, a bounded number of times.
        yield* Effect.sleep(Duration.millis(WAKE_AFTER_FAILURE_MS))
        if (yield* Ref.get(stopping)) return yield* Effect.interrupt
        yield* takeWake(Queue.takeAll)
        yield* sleepOrWake(delayMs - WAKE_AFTER_FAILURE_MS)
        return
      }
      yield* sleepOrWake(delayMs)
    })

    // One renewal round for every held lease, every third of a lease; asleep while nothing is held.
    const renewalRound = Effect.gen(function* () {
      if (lanes.every((l) => l.leased() === 0)) yield* Queue.take(leasesHeld)
      yield* Effect.sleep(renewEvery(config.leaseDuration))
      const now = yield* clockNow
      for (const lane of lanes) yield* lane.renew(leaseUntil(now), now)
    })

    // The results writer: whatever finished while the previous batch was written goes in the next one. Flushes
    // hold a lock, so `stop` can write what is left after the writer's batch in flight.
    const flushLock = yield* Effect.makeSemaphore(1)
    const flushAll = flushLock.withPermits(1)(
      Effect.gen(function* () {
        while (lanes.some((l) => l.pending() > 0)) for (const lane of lanes) yield* lane.flush
      })
    )
    const writerRound = Effect.zipRight(
      Effect.zipRight(
        Queue.take(resultsReady),
        Effect.sync(() => {
          writerSignalled = false
        })
      ),
      flushAll
    )

    // The timeout watch, one for every handler's pending promise (instead of a timer per execution) and every lease:
    // sleeps until the earliest deadline, or until a sooner one is set; settles what has run out as timed out and
    // aborts executions whose lease was not confirmed in time (a renewal that fails or hangs does not count).
    const timeoutRound = Effect.gen(function* () {
      const earliest = Math.min(...lanes.map((l) => l.earliestDeadline()))
      watchedUntil = earliest
      if (earliest === Number.POSITIVE_INFINITY) return yield* Queue.take(deadlineSooner)
      const nowMs = yield* Clock.currentTimeMillis
      if (earliest > nowMs) {
        yield* Effect.raceFirst(Effect.sleep(Duration.millis(earliest - nowMs)), Queue.take(deadlineSooner))
      }
      const at = yield* Clock.currentTimeMillis
      for (const lane of lanes) yield* lane.expire(at)
    })

    // The heartbeat: on a timer of its own (whatever the poll), asleep while there is nothing to report (no handler
    // registered). A worker counts as live for three heartbeats.
    const heartbeatRound = Effect.gen(function* () {
      if (handlers.size === 0) yield* Queue.take(handlersChanged)
      // This round registers the handlers as they are now: a change announced before it (the registrations made
      // before start) is covered, and would otherwise end its sleep at once for a second, identical registration.
      yield* Queue.takeAll(handlersChanged)
      const now = yield* clockNow
      const liveFor = Duration.toMillis(config.heartbeatInterval) * 3
      yield* workerRegistry
        .register(owner, taskTypes(), now, new Date(now.getTime() + liveFor))
        .pipe(Effect.catchAll((e) => Effect.logWarning(`heartbeat failed: ${e.message}`)))
      // The queue-depth gauge, refreshed with the heartbeat (one count query per heartbeat, not per tick).
      yield* queueStore.pendingCount().pipe(
        Effect.flatMap((n) => Metric.set(Metrics.queueDepth, n)),
        Effect.ignore
      )
      yield* Effect.raceFirst(Effect.sleep(config.heartbeatInterval), Queue.take(handlersChanged))
    })

    // Retention, when configured: batches of a thousand rows (each its own short statement, skipping rows another
    // instance is pruning) until one comes back short, then a sleep of `retention.every`.
    const retentionRound = Effect.gen(function* () {
      const { jobRuns, processedItems } = config.retention
      const now = yield* clockNow
      const executions = Retention.isActive(processedItems)
        ? yield* Retention.pruneAll(queueStore.pruneProcessed, processedItems, now)
        : 0
      const runs = Retention.isActive(jobRuns) ? yield* Retention.pruneAll(jobStore.pruneRuns, jobRuns, now) : 0
      if (executions + runs > 0)
        yield* Effect.logInfo(`retention: pruned ${executions} execution(s), ${runs} job run(s)`)
      yield* Effect.sleep(config.retention.every)
    }).pipe(
      Effect.catchAll((e) =>
        Effect.zipRight(
          Effect.logWarning(`retention failed (trying again later): ${e.message}`),
          Effect.sleep(config.retention.every)
        )
      )
    )

    yield* Effect.forkIn(supervised("lease renewal", renewalRound), scope)
    yield* Effect.forkIn(supervised("results writer", writerRound), scope)
    yield* Effect.forkIn(supervised("timeout watch", timeoutRound), scope)

    const start = Effect.gen(function* () {
      if (!config.enabled) return
      if (Option.isSome(yield* Ref.get(loopFiber)) || (yield* Ref.get(stopping))) return
      for (const taskType of definedTypes) {
        if (!handlers.has(taskType)) {
          yield* Effect.logWarning(
            `jobs of task type "${taskType}" are defined but no handler is registered: this runner leaves them due`
          )
        }
      }
      // A handler that ends the process (process.exit) takes every execution of this runner with it: nothing can be
      // recorded then, but the process says why it is going, on stderr, synchronously (all an exit hook may do).
      const lastWord = (code: number) => {
        if (capacity.running() === 0) return
        const types = lanes.flatMap((l) => l.runningTaskTypes())
        try {
          fs.writeSync(
            2,
            `kairos: the process is exiting (code ${code}) while ${capacity.running()} execution(s) ran ` +
              `(task types: ${types.join(", ")}): did a handler call process.exit? Their work runs again once its ` +
              `leases expire (${Duration.format(config.leaseDuration)}).\n`
          )
        } catch {
          // stderr closed: nothing more to do.
        }
      }
      process.on("exit", lastWord)
      yield* Effect.addFinalizer(() => Effect.sync(() => void process.off("exit", lastWord))).pipe(Scope.extend(scope))
      // New items and settings changes wake the idle runner at once; the poll stays the fallback.
      subscription = yield* Scope.extend(
        wakeUps.subscribe((topic) => {
          // An operator changed a job, or changes may have been missed: the next tick reads the job tables whatever
          // they were last known to hold, and the settings.
          if (topic === "jobs") lookEverywhere = true
          queueQuiet = false
          if (topic !== "queue") {
            settingsChanges++
            // The writer stops chaining claims until a tick has read the change.
            lastSwitches = undefined
          }
          signalNow(wake)
        }),
        scope
      )
      yield* Effect.forkIn(supervised("heartbeat", heartbeatRound), scope)
      if (Retention.isActive(config.retention.processedItems) || Retention.isActive(config.retention.jobRuns))
        yield* Effect.forkIn(supervised("retention", retentionRound), scope)
      // Not in the scope: its finalizers run in reverse order, so a loop forked into it here would be interrupted
      // before `stop` (registered earlier) runs — mid-tick, after a claim committed and before its executions
      // started, leaving them leased and never run. `stop`, the scope's finalizer, ends the loop instead.
      yield* Effect.forkIn(supervised("runner alarm", alarmRound), scope)
      const fiber = yield* Effect.forkDaemon(supervised("runner loop", loopRound))
      yield* Ref.set(loopFiber, Option.some(fiber))
    })

    const stop = Effect.gen(function* () {
      if (yield* Ref.getAndSet(stopping, true)) return
      const fiber = yield* Ref.get(loopFiber)
      if (Option.isSome(fiber)) {
        // Not interrupted mid-tick: a claim committed but not yet started would stay leased until its lease
        // expired. Woken, the loop finishes its tick and ends; interrupted only if that takes the grace period.
        yield* signal(wake)
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
      const drained = yield* capacity.awaitIdle.pipe(
        Effect.interruptible,
        Effect.timeoutTo({ duration: config.gracePeriod, onSuccess: () => true, onTimeout: () => false })
      )
      if (!drained) {
        yield* Effect.logWarning(`grace period of ${Duration.format(config.gracePeriod)} over: interrupting handlers`)
        yield* capacity.interruptAll
      }
      // What finished is recorded; what was cut short is handed back, so another instance takes it at once.
      yield* flushAll
      const now = yield* clockNow
      for (const lane of lanes) yield* lane.releaseInterrupted(now)
      yield* workerRegistry
        .unregister(owner)
        .pipe(Effect.catchAll((e) => Effect.logError(`could not leave scheduler_workers at stop: ${e.message}`)))
    })

    yield* Effect.addFinalizer(() => stop)

    const defineJobs = (
      jobs: ReadonlyArray<ScheduledSource.RecurringJob>,
      options: { readonly disableOthers?: boolean | undefined } = {}
    ) =>
      Effect.gen(function* () {
        for (const job of jobs) definedTypes.add(job.taskType)
        const defined = yield* scheduled.defineJobs(jobs, options, yield* clockNow)
        yield* signal(wake)
        return defined
      })

    return Runner.of({
      register,
      start,
      stop,
      tick: Effect.map(tickOnce(true), (t) => t.report),
      wake: Effect.zipRight(
        Effect.sync(() => {
          lookEverywhere = true
          queueQuiet = false
        }),
        signal(wake)
      ),
      defineJobs,
      running: Effect.sync(capacity.running),
      stats: Effect.sync((): RunnerStats => ({ ...stats })),
      owner,
      config
    })
  })

/** The runner as a layer; closing the layer's scope stops it (gracefully, within the grace period). */
export const layer = (
  config: RunnerOptions = {}
): Layer.Layer<Runner, InvalidConfigError, JobStore | QueueStore | Settings | WorkerRegistry | WakeUps> =>
  Layer.scoped(Runner, make(config))
