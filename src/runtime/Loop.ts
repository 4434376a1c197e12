/**
 * The runner's loop: a tick claims due work from every lane up to the free capacity and starts it; then the loop
 * sleeps until the next poll, slot or retry — or until woken (new work, a freed worker, a setting changed). Its
 * alarm is a deadline timer of its own: the loop only ever waits for its wake-up signal.
 */
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as RetryPolicy from "effect/Schedule"
import * as Result from "../domain/Result.js"
import type { LeaseTimes, SchedulerConfig } from "../domain/SchedulerConfig.js"
import type { JobStoreError } from "../ports/JobStore.js"
import type { QueueStoreError } from "../ports/QueueStore.js"
import type { SettingsError } from "../ports/Settings.js"
import type { Subscription } from "../ports/WakeUps.js"
import { now as clockNow } from "../ports/Clock.js"
import type { Capacity } from "./Capacity.js"
import * as DeadlineTimer from "./DeadlineTimer.js"
import type { Lane } from "./Pipeline.js"
import * as Signal from "./Signal.js"
import type { Switches } from "./Switches.js"
import type { ClaimRequest } from "./WorkSource.js"

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

/** The errors a tick can end with. */
export type TickError = JobStoreError | SettingsError | QueueStoreError

/**
 * The wait after a failed tick: 1 s doubling up to a minute, exactly as logged. The database may be away; the loop
 * never ends. Wake-ups (a handler that finished, new work) do not cut it short: only `Loop.back` does, raised when the
 * database is reachable again (the wake-up listener reconnected) or the runner stops. A long outage therefore logs a
 * line at each doubling, then one a minute. A tick that lost its connection while the listener stayed connected
 * waits the first step only (see `reachableLoss`): no reconnect would come to end a longer wait.
 */
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

/**
 * Whether a failed tick lost its connection (a store's "Unavailable": the connection died, or none could be made)
 * while the database answers all the same: the wake-up listener, on a connection of its own, is connected. A
 * connection ended by the server (an operator's `pg_terminate_backend`, a pooler or proxy cutting it) fails the
 * statements on it, not the database.
 */
const reachableLoss = (cause: Cause.Cause<TickError>, listening: boolean): boolean => {
  if (!listening) return false
  const failure = Cause.failureOption(cause)
  return Option.isSome(failure) && failure.value.reason === "Unavailable"
}

/**
 * The failed ticks in a row: each logged with the wait before the next (the doubled wait after as many failures while
 * the database could not be reached, or the first step while it answers: `reachableLoss`); the first tick that
 * succeeds after them says so once.
 */
const makeFailures = (nowMs: () => number, reachable: () => void) => {
  let failures = 0
  // Of those, the ones while the database could not be reached: what the wait doubles with.
  let doublings = 0
  let subscription: Subscription | undefined
  return {
    any: () => failures > 0,
    listening: (s: Subscription) => {
      subscription = s
    },
    /** Logs a failed tick; returns the wait before the next (ms). */
    failed: (cause: Cause.Cause<TickError>) =>
      Effect.gen(function* () {
        failures++
        const reachable = reachableLoss(cause, subscription?.live() === true)
        if (!reachable) doublings++
        const backoff = yield* backoffAfter(reachable ? 1 : doublings)
        // Lines as few as in an outage: a failure that waits 1 s says so at the 1st, 2nd, 4th… failure in a row,
        // then every 64th (about a minute apart).
        if (reachable && (failures & (failures - 1)) !== 0 && failures % 64 !== 0) return Duration.toMillis(backoff)
        const until = reachable
          ? `its connection was lost; the database answers; ${failures} in a row`
          : "or as soon as the database is reachable again"
        const why = Result.errorMessage(Cause.squash(cause))
        yield* Effect.logError(`tick failed (retrying in ${Duration.format(backoff)}, ${until}): ${why}`, cause)
        return Duration.toMillis(backoff)
      }),
    // Said once per outage, by the first tick that succeeds after it: whether `back` cut the backoff short or it ran
    // out, the line marks when the runner had the database again; the tick's own length tells a slow first tick
    // (fresh connections) from a late start.
    succeeded: (startedAtMs: number) =>
      Effect.suspend(() => {
        if (failures === 0) return Effect.void
        const after = failures
        failures = 0
        doublings = 0
        reachable()
        return Effect.logInfo(
          `the database is reachable again: ticked after ${after} failed tick(s) (this tick took ${nowMs() - startedAtMs} ms)`
        )
      })
  }
}

export interface Loop {
  /**
   * The loop's wake-up: raised by new work, a freed worker, a written batch, a setting changed, its alarm. Ignored
   * while a failed tick's backoff runs (see `back`).
   */
  readonly wake: Signal.Signal
  /**
   * Ends a failed tick's backoff at once: the database is reachable again (the wake-up listener reconnected), or the
   * runner stops. Raised while no backoff runs, it is forgotten at the next tick, which is about to look anyway.
   */
  readonly back: Signal.Signal
  /**
   * Whether an execution that ended (or a batch written) calls for a tick. One after a chained result may be skipped
   * when the last tick's queue claim took less than it asked (nothing else was claimable then), no wake-up came
   * since, and that tick was recent enough for the rescue of expired leases, which ticks do, not to fall behind.
   */
  readonly needsTick: (chained: boolean) => boolean
  /** Something may have changed unseen (an explicit wake, or a store's "jobs" notice): the next tick looks at all. */
  readonly lookEverywhere: () => void
  /** Work may have arrived (any notice): a tick may not be skipped after a chained result. */
  readonly notQuiet: () => void
  /** The runner's wake-up subscription: while it listens, the database answers (see `reachableLoss`). */
  readonly listening: (subscription: Subscription) => void
  /** One tick, plus the poll interval it read. */
  readonly tick: (
    force: boolean
  ) => Effect.Effect<{ readonly report: TickReport; readonly interval: Duration.Duration }, TickError>
  /** One round of the loop: a tick, then a sleep. Interrupts itself once the runner is stopping. */
  readonly round: Effect.Effect<void>
  /** The loop's alarm: run its rounds forever in a fiber of the runner. */
  readonly alarm: Effect.Effect<void>
}

export const make = (options: {
  readonly config: SchedulerConfig
  readonly lease: LeaseTimes
  readonly capacity: Capacity
  readonly lanes: ReadonlyArray<Lane<TickError>>
  readonly switches: Switches
  readonly stopping: () => boolean
  readonly taskTypes: () => ReadonlyArray<string>
  readonly requestAt: (now: Date, interval: Duration.Duration, force: boolean) => Omit<ClaimRequest, "limit">
  readonly nowMs: () => number
  /** Called by the first tick that succeeds after failed ones (the lease keeper renews at once then). */
  readonly reachable: () => void
}): Loop => {
  const { capacity, config, lanes, lease, nowMs, requestAt, stopping, switches, taskTypes } = options
  const wake = Signal.make()
  const back = Signal.make()
  let queueQuiet = false
  let lastTickAtMs = Number.NEGATIVE_INFINITY
  const failures = makeFailures(nowMs, options.reachable)
  // Set by an explicit `wake`: the next tick also reads the job tables, whatever they were last known to hold.
  let everywhere = false
  // The time the loop asked to be woken at (its next poll, slot or retry), and what its alarm raises then: `wake`, or
  // `back` at the end of a failed tick's backoff (which no wake-up may cut short).
  let alarmAtMs = Number.POSITIVE_INFINITY
  let alarmRaises = wake
  const alarm = DeadlineTimer.make({
    earliest: () => alarmAtMs,
    due: () =>
      Effect.sync(() => {
        alarmAtMs = Number.POSITIVE_INFINITY
        alarmRaises.raise()
      })
  })

  const tick = makeTick({
    capacity,
    config,
    lanes,
    requestAt,
    switches,
    stopping,
    onTick: (atMs, quiet) => {
      if (atMs !== undefined) lastTickAtMs = atMs
      queueQuiet = quiet
    }
  })
  const nextDelay = makeNextDelay(config, capacity, lanes, taskTypes)

  /** Waits until `ms` have passed or `signal` was raised, whichever is first. */
  const sleepOrWake = (ms: number, signal: Signal.Signal) =>
    Effect.suspend(() => {
      if (ms <= 0) return Effect.yieldNow()
      const atMs = nowMs() + ms
      alarmAtMs = atMs
      alarmRaises = signal
      alarm.sooner(atMs)
      return signal.take
    })

  const tickAndPlan = Effect.suspend(() => {
    const force = everywhere
    everywhere = false
    const startedAtMs = nowMs()
    return tick(force).pipe(
      Effect.tap(() => failures.succeeded(startedAtMs)),
      // What the tick started begins before the sleep is planned (which may cost a statement to build and send):
      // the workers take their first executions in the yield.
      Effect.flatMap(({ interval, report }) =>
        report.started > 0
          ? Effect.zipRight(Effect.yieldNow(), nextDelay(report, interval))
          : nextDelay(report, interval)
      ),
      Effect.catchAllCause((cause) => (Cause.isInterruptedOnly(cause) ? Effect.interrupt : failures.failed(cause)))
    )
  })

  // The loop ends itself when stopping (checked between ticks): a tick in progress completes, and `stop` then hands
  // back what it claimed. A wake-up sent during a tick stays raised (taken before the tick, not after), so the sleep
  // that follows ends at once — unless the tick failed: its backoff then runs as logged, and only `back` (raised
  // during the tick too: the listener may reconnect while the tick fails) or its end resumes the loop.
  const round = Effect.gen(function* () {
    if (stopping()) return yield* Effect.interrupt
    // Awake: the alarm set for the last sleep no longer stands (a tick in progress is not woken again by it).
    alarmAtMs = Number.POSITIVE_INFINITY
    wake.clear()
    back.clear()
    const delayMs = yield* tickAndPlan
    if (stopping()) return yield* Effect.interrupt
    yield* sleepOrWake(delayMs, failures.any() ? back : wake)
  })

  return {
    wake,
    back,
    needsTick: (chained) => !chained || !queueQuiet || nowMs() - lastTickAtMs >= lease.freshnessMs,
    lookEverywhere: () => {
      everywhere = true
    },
    notQuiet: () => {
      queueQuiet = false
    },
    listening: failures.listening,
    tick,
    round,
    alarm: alarm.round
  }
}

/** One tick: the switches, then a claim from every lane up to the free capacity. */
const makeTick =
  (options: {
    readonly config: SchedulerConfig
    readonly capacity: Capacity
    readonly lanes: ReadonlyArray<Lane<TickError>>
    readonly switches: Switches
    readonly stopping: () => boolean
    readonly requestAt: (now: Date, interval: Duration.Duration, force: boolean) => Omit<ClaimRequest, "limit">
    /** The tick's time (undefined: it claimed nothing), and whether the queue had nothing more to claim. */
    readonly onTick: (atMs: number | undefined, queueQuiet: boolean) => void
  }) =>
  (force: boolean) =>
    Effect.gen(function* () {
      const { capacity, config, lanes, onTick, requestAt, stopping, switches } = options
      const idle = (skipped: TickReport["skipped"]): TickReport => ({ skipped, started: 0, overlapped: 0, rescued: 0 })
      onTick(undefined, false)
      if (stopping()) return { report: idle("stopped"), interval: config.interval }
      const live = yield* switches.current(force)
      const interval = live.interval
      if (live.paused) return { report: idle("paused"), interval }
      if (!live.enabled) return { report: idle("disabled"), interval }
      let room = capacity.room()
      const now = yield* clockNow
      onTick(now.getTime(), false)
      if (room <= 0) {
        // Every worker busy: only what takes no worker (an overlapped slot recorded as skipped) is done now.
        let overlapped = 0
        let rescued = 0
        for (const lane of lanes) {
          if (!lane.plansWhenFull) continue
          const report = yield* lane.claimAndStart({ ...requestAt(yield* clockNow, interval, force), limit: 0 })
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
        // Each lane's claim at its own time: the one before it may have waited long (a loaded machine, a pool with
        // no free connection), and a lease reckoned from the tick's start would be that much shorter.
        const report = yield* lane.claimAndStart({ ...requestAt(yield* clockNow, interval, force), limit: room })
        room -= report.started
        started += report.started
        if (lane.kind === "queue") {
          queued += report.started
          // It took less than it could: nothing else of the queue was claimable.
          onTick(now.getTime(), room > 0)
        }
        overlapped += report.overlapped
        rescued += report.rescued
      }
      return { report: { started, queued, overlapped, rescued }, interval }
    })

/** How long to sleep after a tick: until the next poll, or the next slot, retry or rate window if sooner. */
const makeNextDelay =
  (
    config: SchedulerConfig,
    capacity: Capacity,
    lanes: ReadonlyArray<Lane<TickError>>,
    taskTypes: () => ReadonlyArray<string>
  ) =>
  (report: TickReport, interval: Duration.Duration) =>
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
