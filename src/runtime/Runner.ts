/**
 * The runner: a loop that claims due work from its sources (scheduled runs, queue items) up to the free capacity,
 * runs handlers on its workers, and sleeps until the next slot, retry or poll — or until woken. Around it, long-lived
 * fibers, each a module of its own: the lease keeper (one renewal round for every execution), the results writer,
 * the timeout watch, the loop's alarm, the heartbeat, retention and the queue's vacuum. None of them ends on any cause
 * while the runner runs. Composed here as a scoped service: closing its scope stops it.
 */
import * as Duration from "effect/Duration"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import fs from "node:fs"
import os from "node:os"
import { randomBytes } from "node:crypto"
import * as Retry from "../domain/Retry.js"
import type { ScheduledJob } from "../domain/ScheduledJob.js"
import {
  leaseTimes,
  validate,
  withDefaults,
  type SchedulerConfig,
  type SchedulerConfigInput
} from "../domain/SchedulerConfig.js"
import type { InvalidConfigError, InvalidRetryError } from "../domain/errors.js"
import { now as clockNow } from "../ports/Clock.js"
import { JobStore, type JobStoreError } from "../ports/JobStore.js"
import { QueueStore } from "../ports/QueueStore.js"
import { Settings } from "../ports/Settings.js"
import { WakeUps } from "../ports/WakeUps.js"
import { WorkerRegistry } from "../ports/WorkerRegistry.js"
import {
  type Handler,
  type HandlerOptions,
  isEffect,
  isTransactional,
  type TransactionalHandler,
  type TransactionalOptions
} from "./Handler.js"
import * as Capacity from "./Capacity.js"
import * as Heartbeat from "./Heartbeat.js"
import * as LeaseKeeper from "./LeaseKeeper.js"
import * as LimitsView from "./LimitsView.js"
import * as Loop from "./Loop.js"
import * as Metrics from "./Metrics.js"
import { type ExecutionReport, type Lane, type LaneContext, makeLane, type Registered } from "./Pipeline.js"
import type { ClaimRequest } from "./WorkSource.js"
import * as QueueSource from "./QueueSource.js"
import * as RetentionRound from "./RetentionRound.js"
import * as Signal from "./Signal.js"
import * as VacuumRound from "./VacuumRound.js"
import * as ResultsWriter from "./ResultsWriter.js"
import * as ScheduledSource from "./ScheduledSource.js"
import { boundedStep, forkSupervised, supervised } from "./Supervised.js"
import * as Switches from "./Switches.js"
import * as TimeoutWatch from "./TimeoutWatch.js"

export type { RecurringJob } from "./ScheduledSource.js"
export type { ExecutionReport } from "./Pipeline.js"
export type { TickError, TickReport } from "./Loop.js"
export { tickFailureBackoff } from "./Loop.js"

/** The configuration, plus an optional listener. */
export interface RunnerOptions extends SchedulerConfigInput {
  /**
   * Called, synchronously on the hot path, as each execution ends (a command line prints a line per execution).
   * Keep it cheap; what it throws is ignored. Absent, nothing is built per execution for it.
   */
  readonly onExecution?: ((report: ExecutionReport) => void) | undefined
}

/**
 * Counters of a runner's executions: started, and finished ok or failed (whatever the failure, an interrupted one
 * included). A claim that never started (handed back at a stop) is none of them.
 */
export interface RunnerStats {
  readonly started: number
  readonly ok: number
  readonly failed: number
}

/** The runner's interface. */
export class Runner extends Context.Tag("kairos/Runner")<
  Runner,
  {
    /**
     * Registers the handler of a task type. Registering a type again replaces its handler (and logs a warning).
     * Fails, registering nothing, when `options.retry` is not a valid policy. With `{ transactional: true }` the
     * handler runs inside a transaction of the store's, its success recorded in it (see `HandlerOptions`).
     */
    readonly register: {
      <A, E = never, R = never>(
        taskType: string,
        handler: TransactionalHandler<A, E, R>,
        options: TransactionalOptions
      ): Effect.Effect<void, InvalidRetryError, R>
      <A, E = never, R = never>(
        taskType: string,
        handler: Handler<A, E, R>,
        options?: HandlerOptions
      ): Effect.Effect<void, InvalidRetryError, R>
    }
    /** Ticks now and then every interval, in a fiber of the runner's scope. Does nothing when disabled by config. */
    readonly start: Effect.Effect<void>
    /** Stops claiming, waits for running handlers up to the grace period, then interrupts them. */
    readonly stop: Effect.Effect<void>
    /** One tick: claims due work up to the free capacity and starts it; never waits for handlers. */
    readonly tick: Effect.Effect<Loop.TickReport, Loop.TickError>
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

/** What the runner is made of: its configuration, stores, state and parts, shared by its operations below. */
interface Parts {
  readonly config: SchedulerConfig
  readonly owner: string
  readonly scope: Scope.Scope
  readonly queueStore: QueueStore["Type"]
  readonly jobStore: JobStore["Type"]
  readonly workerRegistry: WorkerRegistry["Type"]
  readonly wakeUps: WakeUps["Type"]
  readonly handlers: Map<string, Registered>
  /** The task types of the jobs this runner defined (a start warns about those without a handler). */
  readonly definedTypes: Set<string>
  readonly capacity: Capacity.Capacity
  /** Plain counters: they change once per execution, on the hot path. */
  readonly stats: { started: number; ok: number; failed: number }
  /** Raised when an execution ends: the queue's vacuum round looks at the dead rows then (see VacuumRound). */
  readonly executionEnded: Signal.Signal
  readonly state: { stopping: boolean; loopFiber: Fiber.RuntimeFiber<never, never> | undefined }
  readonly lanes: ReadonlyArray<Lane<Loop.TickError>>
  readonly scheduled: ScheduledSource.ScheduledSource
  readonly loop: Loop.Loop
  readonly switches: Switches.Switches
  /** The flow limits as this runner knows them (see LimitsView). */
  readonly limits: LimitsView.LimitsView
  readonly writer: ResultsWriter.ResultsWriter
  readonly keeper: LeaseKeeper.LeaseKeeper
  /** The longest a stop waits for one step that needs the database (`LeaseTimes.stopStepMs`). */
  readonly stopStep: Duration.Duration
  readonly heartbeat: Heartbeat.Heartbeat
}

/** What the pipeline needs of the runner: plain calls on the hot path, each a signal raised or a counter moved. */
const laneContext = (
  parts: Omit<Parts, "lanes" | "scheduled" | "heartbeat" | "limits">,
  more: {
    readonly lease: LaneContext["lease"]
    readonly deadline: (atMs: number) => void
    readonly requestAt: (now: Date, interval: Duration.Duration, force: boolean) => Omit<ClaimRequest, "limit">
    readonly onExecution: RunnerOptions["onExecution"]
  }
): LaneContext => {
  const { capacity, executionEnded, handlers, keeper, loop, state, stats, switches, writer } = parts
  const released = (chained: boolean) => {
    // The buffer ran low: claim more, unless all this could free is claimed again with its result (a chain).
    if (capacity.ended() && loop.needsTick(chained)) loop.wake.raise()
  }
  return {
    lease: more.lease,
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
      executionEnded.raise()
      released(chained)
    },
    dropped: () => released(false),
    resultsReady: writer.ready.raise,
    leasesHeld: keeper.held.raise,
    written: (chained) => {
      if (loop.needsTick(chained)) loop.wake.raise()
    },
    deadline: more.deadline,
    executed: withMetrics(listenSafely(more.onExecution)),
    // The writer claims along with a batch only while the last tick found the runner running: a switch changed
    // since then wakes the loop at once (NOTIFY), whose tick reads it and stops the chain.
    chain: Effect.gen(function* () {
      const live = switches.last()
      if (live === undefined || live.paused || !live.enabled || state.stopping) return undefined
      const room = capacity.room()
      if (room <= 0) return undefined
      return { ...more.requestAt(yield* clockNow, live.interval, false), limit: room }
    })
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
    const jobStore = yield* JobStore
    const workerRegistry = yield* WorkerRegistry
    const wakeUps = yield* WakeUps
    const scope = yield* Effect.scope
    const clock = yield* Effect.clock
    const owner = `${os.hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`
    const lease = leaseTimes(config)
    const handlers = new Map<string, Registered>()
    const taskTypes = () => [...handlers.keys()]
    // The workers and the buffer of work claimed ahead of them (see Capacity).
    const capacity = yield* Capacity.make(config)
    const state: Parts["state"] = { stopping: false, loopFiber: undefined }
    const switches = Switches.make(config, settings)
    // What a claim at `now` asks for (its limit aside): the tick's, and the results writer's along with a batch.
    const requestAt = (now: Date, interval: Duration.Duration, force: boolean) => ({
      now,
      owner,
      leaseUntil: new Date(now.getTime() + lease.leaseMs),
      taskTypes: taskTypes(),
      interval,
      force
    })
    // Filled below: the parts that go through every lane are made first, then the lanes that report to them.
    const lanes: Array<Lane<Loop.TickError>> = []
    const nowMs = () => clock.unsafeCurrentTimeMillis()
    const keeper = LeaseKeeper.make(lanes, lease)
    const loop = Loop.make({
      config,
      lease,
      capacity,
      lanes,
      switches,
      taskTypes,
      requestAt,
      nowMs,
      stopping: () => state.stopping,
      reachable: keeper.reachable
    })
    const writer = yield* ResultsWriter.make(lanes)
    const watch = TimeoutWatch.make(lanes)
    const core = {
      config,
      owner,
      scope,
      queueStore,
      jobStore,
      workerRegistry,
      wakeUps,
      handlers,
      definedTypes: new Set<string>(),
      capacity
    }
    const shared = {
      ...core,
      stats: { started: 0, ok: 0, failed: 0 },
      executionEnded: Signal.make(),
      state,
      loop,
      switches,
      writer,
      keeper,
      stopStep: Duration.millis(lease.stopStepMs)
    }
    const context = laneContext(shared, {
      lease,
      deadline: watch.sooner,
      requestAt,
      onExecution: input.onExecution
    })
    const scheduled = yield* ScheduledSource.make({ config, owner })
    const retryOf = (taskType: string) => handlers.get(taskType)?.retry
    const limits = yield* LimitsView.make
    lanes.push(
      makeLane(scheduled.source, context),
      makeLane(yield* QueueSource.make({ config, owner, retryOf, limits }), context)
    )
    const heartbeat = Heartbeat.make({ config, queueStore, workerRegistry, owner, taskTypes })
    const parts: Parts = { ...shared, lanes, scheduled, heartbeat, limits }
    yield* forkSupervised("lease renewal", keeper.round, scope, parts.stopStep)
    yield* forkSupervised("results writer", writer.round, scope, parts.stopStep)
    yield* forkSupervised("timeout watch", watch.round, scope, parts.stopStep)
    yield* Effect.addFinalizer(() => stop(parts))
    return Runner.of({
      register: (taskType, handler, options) => register(parts, taskType, handler, options),
      start: start(parts),
      stop: stop(parts),
      tick: Effect.map(loop.tick(true), (t) => t.report),
      wake: Effect.sync(() => {
        loop.lookEverywhere()
        loop.notQuiet()
        loop.wake.raise()
      }),
      defineJobs: (jobs, options = {}) =>
        Effect.gen(function* () {
          for (const job of jobs) parts.definedTypes.add(job.taskType)
          const defined = yield* scheduled.defineJobs(jobs, options, yield* clockNow)
          loop.wake.raise()
          return defined
        }),
      running: Effect.sync(capacity.running),
      stats: Effect.sync((): RunnerStats => ({ ...parts.stats })),
      owner,
      config
    })
  })

/** Registers (or replaces) the handler of a task type, with the services it requires from where it registers. */
const register = <A, E = never, R = never>(
  parts: Parts,
  taskType: string,
  handler: Handler<A, E, R> | TransactionalHandler<A, E, R>,
  options?: HandlerOptions | TransactionalOptions
): Effect.Effect<void, InvalidRetryError, R> =>
  Effect.gen(function* () {
    const context = yield* Effect.context<R>()
    // A transactional handler's second argument is its transaction (see Pipeline), typed as such at `register`.
    const call = handler as Handler<A, E, R>
    const run: Handler<unknown, unknown, never> = (job, abort) => {
      const out = call(job, abort)
      return isEffect(out) ? Effect.provide(out as Effect.Effect<A, E, R>, context) : out
    }
    const takesSignal = handler.length >= 2
    const retry = options?.retry === undefined ? undefined : yield* Retry.parse(options.retry)
    const timeout =
      options?.timeout === undefined ? parts.config.timeout : withDefaults({ timeout: options.timeout }).timeout
    if (parts.handlers.has(taskType)) {
      yield* Effect.logWarning(`handler for task type "${taskType}" registered again: the new one replaces it`)
    }
    const transactional = isTransactional(options)
    parts.handlers.set(taskType, {
      run,
      timeout,
      timeoutMs: Duration.toMillis(timeout),
      takesSignal,
      retry,
      transactional
    })
    parts.heartbeat.handlersChanged.raise()
  })

// A handler that ends the process (process.exit) takes every execution of this runner with it: nothing can be
// recorded then, but the process says why it is going, on stderr, synchronously (all an exit hook may do).
const lastWordAtExit =
  ({ capacity, config, lanes }: Parts) =>
  (code: number) => {
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

/** Starts the loop and the fibers that run only once started (heartbeat, retention, the queue's vacuum). */
const start = (parts: Parts): Effect.Effect<void> =>
  Effect.gen(function* () {
    const { config, keeper, limits, loop, queueStore, scope, state, stopStep, switches, wakeUps } = parts
    if (!config.enabled || state.loopFiber !== undefined || state.stopping) return
    for (const taskType of parts.definedTypes) {
      if (!parts.handlers.has(taskType)) {
        yield* Effect.logWarning(
          `jobs of task type "${taskType}" are defined but no handler is registered: this runner leaves them due`
        )
      }
    }
    const lastWord = lastWordAtExit(parts)
    process.on("exit", lastWord)
    yield* Effect.addFinalizer(() => Effect.sync(() => void process.off("exit", lastWord))).pipe(Scope.extend(scope))
    // New items and settings changes wake the idle runner at once; the poll stays the fallback.
    const subscription = yield* Scope.extend(
      wakeUps.subscribe(
        (topic) => {
          // An operator changed a job, or changes may have been missed: the next tick reads the job tables whatever
          // they were last known to hold, and the settings.
          if (topic === "jobs") loop.lookEverywhere()
          loop.notQuiet()
          if (topic !== "queue") {
            switches.changed()
            limits.changed()
          }
          loop.wake.raise()
        },
        // The database is reachable again: a backoff after failed ticks ends now, and the leases held are renewed
        // now (the outage's renewals failed; a failover may have lost earlier ones).
        () => {
          loop.back.raise()
          keeper.reachable()
        }
      ),
      scope
    )
    switches.listening(subscription)
    limits.listening(subscription)
    loop.listening(subscription)
    yield* forkSupervised("heartbeat", parts.heartbeat.round, scope, stopStep)
    if (RetentionRound.isActive(config))
      yield* forkSupervised("retention", RetentionRound.round(config, queueStore, parts.jobStore), scope, stopStep)
    if (config.vacuumDeadRows > 0) {
      const vacuum = VacuumRound.make({
        config,
        queueStore,
        owner: parts.owner,
        executionEnded: parts.executionEnded
      })
      yield* forkSupervised("queue vacuum", vacuum.round, scope, stopStep)
    }
    // Not in the scope: its finalizers run in reverse order, so a loop forked into it here would be interrupted
    // before `stop` (registered earlier) runs — mid-tick, after a claim committed and before its executions
    // started, leaving them leased and never run. `stop`, the scope's finalizer, ends the loop instead.
    yield* forkSupervised("runner alarm", loop.alarm, scope, stopStep)
    state.loopFiber = yield* Effect.forkDaemon(supervised("runner loop", loop.round))
  })

// What a stop cancelled before it started goes back at once, for another instance to take.
const handBack = (lanes: Parts["lanes"]) =>
  Effect.gen(function* () {
    const now = yield* clockNow
    for (const lane of lanes) yield* lane.releaseCancelled(now)
  })

/**
 * Stops claiming, waits for running handlers up to the grace period (counted from the stop: the tick in progress and
 * the handlers share it), then interrupts them. Each step that waits on the database (handing back, a tick's or a
 * handler's interruption, the last writes) waits at most `stopStepMs`, a third of the lease (`leaseTimes`): on a
 * database that stopped answering (a frozen pooler, a network that drops packets) a stop must still end. What those
 * steps did not write is not lost: its leases expire and another instance takes it over.
 */
const stop = (parts: Parts): Effect.Effect<void> =>
  Effect.gen(function* () {
    const { capacity, config, lanes, loop, state } = parts
    if (state.stopping) return
    state.stopping = true
    const atMost = boundedStep(parts.stopStep)
    // One grace period from the stop, whatever waited first: a tick that took part of it leaves the handlers the rest.
    const graceEnds = (yield* clockNow).getTime() + Duration.toMillis(config.gracePeriod)
    const graceLeft = Effect.map(clockNow, (now) => Duration.millis(Math.max(0, graceEnds - now.getTime())))
    // Stop means stop: nothing more starts. Executions claimed ahead into the buffer are handed back now, not run
    // during the grace period; what the tick in progress, or a write in flight, still claims is handed back as it
    // comes (see the lanes' `startClaimed`).
    capacity.close()
    yield* atMost("handing back what was claimed ahead", handBack(lanes))
    const fiber = state.loopFiber
    if (fiber !== undefined) {
      // Not interrupted mid-tick: a claim committed but not yet started would stay leased until its lease
      // expired. Woken, the loop finishes its tick and ends; interrupted only if that takes the grace period.
      loop.wake.raise()
      loop.back.raise()
      yield* Fiber.await(fiber).pipe(
        Effect.interruptible,
        Effect.timeoutTo({
          duration: yield* graceLeft,
          onSuccess: () => Effect.void,
          onTimeout: () => atMost("interrupting the tick in progress", Fiber.interrupt(fiber))
        }),
        Effect.flatten
      )
    }
    // Interruptible: stop often runs in a scope finalizer (uninterruptible), where the timeout could not
    // otherwise cut the wait short.
    const drained = yield* capacity.awaitIdle.pipe(
      Effect.interruptible,
      Effect.timeoutTo({ duration: yield* graceLeft, onSuccess: () => true, onTimeout: () => capacity.running() === 0 })
    )
    if (!drained) {
      yield* Effect.logWarning(`grace period of ${Duration.format(config.gracePeriod)} over: interrupting handlers`)
      yield* atMost("interrupting the handlers", capacity.interruptAll)
    }
    // What finished is recorded; what was cut short is handed back, so another instance takes it at once.
    yield* atMost(
      "recording the last results and handing back what was cut short",
      Effect.gen(function* () {
        yield* parts.writer.flushAll
        const now = yield* clockNow
        for (const lane of lanes) yield* lane.releaseInterrupted(now)
        yield* parts.workerRegistry
          .unregister(parts.owner)
          .pipe(Effect.catchAll((e) => Effect.logError(`could not leave scheduler_workers at stop: ${e.message}`)))
      })
    )
  })

/** The runner as a layer; closing the layer's scope stops it (gracefully, within the grace period). */
export const layer = (
  config: RunnerOptions = {}
): Layer.Layer<Runner, InvalidConfigError, JobStore | QueueStore | Settings | WorkerRegistry | WakeUps> =>
  Layer.scoped(Runner, make(config))
