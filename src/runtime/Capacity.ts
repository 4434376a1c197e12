/**
 * The runner's workers and the buffer of work claimed ahead of them.
 *
 * Work is claimed ahead of free workers into a small buffer (leases renewed like any other), so a worker whose
 * handler returns takes the next execution at once instead of waiting for a tick. The buffer holds what keeps every
 * worker busy for about `BUFFER_MS` at the handlers' recent pace (a moving average of their durations): at least one
 * execution per worker, at most a batch. Quick handlers then drain a batch per claim; slow ones leave the rest of the
 * queue to other instances.
 *
 * A worker runs buffered executions one after another, in claim order, while there are any. It is plain code driven
 * by its executions' ends, not a fiber: a plain or async handler costs no fiber and no Effect step, and a burst of
 * quick executions costs a few workers, not one per execution. Bookkeeping is plain counters: it runs once per
 * execution, on the hot path.
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"

/** How long the buffer should keep the workers busy at the handlers' recent pace. */
const BUFFER_MS = 50

/** Executions a worker runs back to back, without waiting, before it lets the rest of the process go on. */
const BURST = 64

/** What a worker lends the execution it runs. */
export interface Worker {
  /** The time, read through the runner's clock (ms). */
  readonly now: () => number
  /** Runs an Effect in a fiber of the runner: a forced stop interrupts it. */
  readonly fork: <A>(effect: Effect.Effect<A>) => Fiber.RuntimeFiber<A>
  /** The execution `Task.run` left running has ended: the worker goes on to the next. Call it once. */
  readonly done: () => void
  /** How to cut the running execution short at a forced stop (a pending promise is settled as stopped). */
  readonly onStop: (stop: () => void) => void
}

/** One claimed execution waiting for a worker. */
export interface Task {
  /**
   * Runs the execution on `worker`. True when it ended before returning (a plain handler); false when it runs on
   * (a promise, an Effect), and `worker.done()` is called once it ends. Never throws.
   */
  readonly run: (worker: Worker) => boolean
  /** The task will never run (a forced stop): its claim is handed back. */
  readonly cancel: () => void
}

export interface Capacity {
  /** How many more executions may be claimed now (0: full). */
  readonly room: () => number
  /** Hands claimed executions to the workers (claim order); they count until they end. */
  readonly submit: (tasks: ReadonlyArray<Task>) => Effect.Effect<void>
  /** A handler started on a worker. */
  readonly started: () => void
  /** A started handler returned after `tookMs` (undefined: it was interrupted). */
  readonly stopped: (tookMs: number | undefined) => void
  /** An execution ended, run or not: it no longer counts. True when the buffer ran low (time to claim again). */
  readonly ended: () => boolean
  /** Handlers running now. */
  readonly running: () => number
  /** Resolves when no worker is left (nothing running or buffered). */
  readonly awaitIdle: Effect.Effect<void>
  /**
   * A stop: nothing starts any more. Buffered executions are cancelled now, and any submitted later (a claim that was
   * in flight) at once; running ones go on.
   */
  readonly close: () => void
  /** A forced stop: buffered executions are cancelled and running ones interrupted. */
  readonly interruptAll: Effect.Effect<void>
}

/**
 * A worker's own state, reused for every execution it runs; a worker that retires is kept for the next burst of
 * work (at most `workers` are ever made), so a claim's batch costs no new workers.
 */
interface Pump extends Worker {
  stop: (() => void) | undefined
  /** Inside `Task.run` now; `doneEarly`: the execution ended before `run` returned. */
  inRun: boolean
  doneEarly: boolean
  /** Working now (not retired). */
  active: boolean
  /** Starts the worker in a microtask, as a forked fiber would start (made once per worker). */
  readonly kick: () => void
}

/** A FIFO with a moving head: shift() on a large array is linear. */
class TaskBuffer {
  private queue: Array<Task> = []
  private head = 0
  get size(): number {
    return this.queue.length - this.head
  }
  push(task: Task): void {
    this.queue.push(task)
  }
  next(): Task | undefined {
    if (this.head >= this.queue.length) return undefined
    const task = this.queue[this.head]!
    this.queue[this.head++] = undefined as never
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head)
      this.head = 0
    }
    return task
  }
  /** Empties the buffer, returning what it held in order. */
  takeAll(): Array<Task> {
    const all = this.queue.slice(this.head)
    this.queue = []
    this.head = 0
    return all
  }
}

/**
 * How many executions the buffer holds: up to two batches. A claim (at most a batch) is made while a batch is still
 * buffered, so quick handlers have work while it is in flight, and each claim takes a whole batch rather than the
 * half just freed. The tick's claim and one made along with a write of results may cross: each takes the room it
 * saw, so one batch more may be held for a moment.
 */
const bufferSize = (config: SchedulerConfig, averageMs: number): number =>
  Math.min(
    2 * config.batchSize,
    Math.max(config.workers, Math.floor((config.workers * BUFFER_MS) / Math.max(averageMs, 0.01)))
  )

/** What the workers need of the capacity they work for. */
interface PumpHost {
  readonly next: () => Task | undefined
  readonly retire: (pump: Pump) => void
  readonly fork: <A>(effect: Effect.Effect<A>) => Fiber.RuntimeFiber<A>
  readonly now: () => number
}

// A worker runs buffered executions until none is left, then retires; an Effect handler gets a fiber of its own
// (see `fork`). After a burst of executions that end at once it goes on in a microtask, so other fibers (the
// results writer, the tick) are not starved by a buffer of quick handlers.
const drain = (pump: Pump, host: PumpHost): void => {
  for (let burst = 0; burst < BURST; burst++) {
    const task = host.next()
    if (task === undefined) return host.retire(pump)
    pump.inRun = true
    pump.doneEarly = false
    let ended: boolean
    try {
      ended = task.run(pump)
    } catch (defect) {
      // A bug of the runner's own: logged, and the worker goes on.
      ended = true
      host.fork(Effect.logError("a worker's execution failed unexpectedly (going on)", defect))
    }
    pump.inRun = false
    if (!ended && !pump.doneEarly) return
  }
  queueMicrotask(() => drain(pump, host))
}

const makePump = (host: PumpHost): Pump => {
  const pump: Pump = {
    stop: undefined,
    inRun: false,
    doneEarly: false,
    active: false,
    kick: () => drain(pump, host),
    now: host.now,
    fork: host.fork,
    done: () => {
      pump.stop = undefined
      if (pump.inRun) pump.doneEarly = true
      else drain(pump, host)
    },
    onStop: (stop) => {
      pump.stop = stop
    }
  }
  return pump
}

export const make = (config: SchedulerConfig): Effect.Effect<Capacity, never, Scope.Scope> =>
  Effect.gen(function* () {
    // The fibers of Effect handlers (and of the odd log line): a forced stop, or the runner's scope closing,
    // interrupts them.
    const fibers = yield* FiberSet.make<unknown, unknown>()
    // The runtime and clock of the fiber that last submitted work: executions run with its services, as a fiber it
    // forked would.
    let runtime: Runtime.Runtime<never> | undefined
    let clockNow: () => number = () => Date.now()
    // Every worker made, and those retired (ready to work again); `active` count the others.
    const pumps: Array<Pump> = []
    const retired: Array<Pump> = []
    let active = 0
    const idleWaiters: Array<() => void> = []
    /** Claimed and not yet ended (running, or waiting for a worker). */
    let outstanding = 0
    let busy = 0
    let averageMs = BUFFER_MS
    const queue = new TaskBuffer()
    const buffer = () => bufferSize(config, averageMs)
    let closed = false
    const cancelBuffered = () => {
      for (const task of queue.takeAll()) task.cancel()
    }

    const fork = <A>(effect: Effect.Effect<A>): Fiber.RuntimeFiber<A> => {
      const fiber = Runtime.runFork(runtime!)(effect)
      FiberSet.unsafeAdd(fibers, fiber)
      return fiber
    }

    const retire = (pump: Pump) => {
      pump.active = false
      pump.stop = undefined
      retired.push(pump)
      if (--active > 0) return
      for (const resolve of idleWaiters.splice(0)) resolve()
    }

    const host: PumpHost = { next: () => queue.next(), retire, fork, now: () => clockNow() }
    const spawn = () => {
      const n = Math.min(config.workers - active, queue.size)
      for (let i = 0; i < n; i++) {
        let pump = retired.pop()
        if (pump === undefined) pumps.push((pump = makePump(host)))
        pump.active = true
        active++
        // Started after the submitting fiber's step, as a forked fiber would be.
        queueMicrotask(pump.kick)
      }
    }

    return {
      room: () => {
        const free = Math.max(0, Math.min(config.batchSize, config.workers + buffer() - outstanding))
        // A claim costs a round trip whatever its size: while work is outstanding, claim only once the buffer ran
        // low (`ended` says when), so claims come in batches, not one per finished execution.
        return outstanding > 0 && free < Math.max(1, Math.floor(buffer() / 2)) ? 0 : free
      },
      submit: (tasks) =>
        Effect.runtime<never>().pipe(
          Effect.flatMap((rt) =>
            Effect.clockWith((clock) =>
              Effect.sync(() => {
                if (tasks.length === 0) return
                runtime = rt
                clockNow = () => clock.unsafeCurrentTimeMillis()
                outstanding += tasks.length
                if (closed) {
                  for (const task of tasks) task.cancel()
                  return
                }
                for (const task of tasks) queue.push(task)
                spawn()
              })
            )
          )
        ),
      started: () => {
        busy++
      },
      stopped: (tookMs) => {
        busy--
        if (tookMs !== undefined) averageMs = averageMs * 0.9 + Math.max(0, tookMs) * 0.1
      },
      // Claim again once the buffer runs low, not after every execution: the claim then overlaps the handlers.
      ended: () => {
        outstanding--
        return outstanding - busy <= Math.floor(buffer() / 2)
      },
      running: () => busy,
      awaitIdle: Effect.async<void>((resume) => {
        if (active === 0) return resume(Effect.void)
        const waiter = () => resume(Effect.void)
        idleWaiters.push(waiter)
        return Effect.sync(() => {
          const i = idleWaiters.indexOf(waiter)
          if (i >= 0) idleWaiters.splice(i, 1)
        })
      }),
      close: () => {
        closed = true
        cancelBuffered()
      },
      interruptAll: Effect.suspend(() => {
        cancelBuffered()
        // Pending promises are settled as stopped (their workers then find nothing left and retire); Effect
        // handlers are interrupted, and their workers retire as their fibers end.
        for (const pump of pumps) if (pump.active) pump.stop?.()
        return FiberSet.clear(fibers)
      })
    }
  })
