/**
 * The runner's workers and the buffer of work claimed ahead of them.
 *
 * Work is claimed ahead of free workers into a small buffer (leases renewed like any other), so a worker whose
 * handler returns takes the next execution at once instead of waiting for a tick. The buffer holds what keeps every
 * worker busy for about `BUFFER_MS` at the handlers' recent pace (a moving average of their durations): at least one
 * execution per worker, at most a batch. Quick handlers then drain a batch per claim; slow ones leave the rest of the
 * queue to other instances.
 *
 * A worker is a fiber that runs buffered executions one after another, in claim order, while there are any: a
 * burst of quick executions costs a few fibers, not one per execution. Bookkeeping is plain counters: it runs once
 * per execution, on the hot path.
 */
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import type * as Scope from "effect/Scope"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"

/** How long the buffer should keep the workers busy at the handlers' recent pace. */
const BUFFER_MS = 50

/** One claimed execution waiting for a worker. */
export interface Task {
  /** Runs the execution on the current worker, reading the time through `now` (the worker's clock). Never fails. */
  readonly run: (now: () => number) => Effect.Effect<void>
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
  /** A forced stop: buffered executions are cancelled and running ones interrupted. */
  readonly interruptAll: Effect.Effect<void>
}

export const make = (config: SchedulerConfig): Effect.Effect<Capacity, never, Scope.Scope> =>
  Effect.gen(function* () {
    const workers = yield* FiberSet.make<void, never>()
    /** Claimed and not yet ended (running, or waiting for a worker). */
    let outstanding = 0
    let busy = 0
    let alive = 0
    let averageMs = BUFFER_MS
    // A FIFO with a moving head: shift() on a large array is linear.
    let queue: Array<Task> = []
    let head = 0
    // Up to two batches: a claim (at most a batch) is made while a batch is still buffered, so quick handlers
    // have work while it is in flight, and each claim takes a whole batch rather than the half just freed.
    const buffer = () =>
      Math.min(
        2 * config.batchSize,
        Math.max(config.workers, Math.floor((config.workers * BUFFER_MS) / Math.max(averageMs, 0.01)))
      )
    const next = (): Task | undefined => {
      if (head >= queue.length) return undefined
      const task = queue[head]!
      queue[head++] = undefined as never
      if (head > 1024 && head * 2 > queue.length) {
        queue = queue.slice(head)
        head = 0
      }
      return task
    }

    // Runs buffered tasks until none is left, then ends. Interrupted (a lost lease, a forced stop), it ends too, and
    // a replacement takes over whatever is still buffered.
    const worker: Effect.Effect<void> = Effect.clockWith((clock) => {
      const now = () => clock.unsafeCurrentTimeMillis()
      const loop: Effect.Effect<void> = Effect.suspend(() => {
        const task = next()
        return task === undefined ? Effect.void : Effect.zipRight(task.run(now), loop)
      })
      return loop
    })
    const spawn = (): Effect.Effect<void> =>
      Effect.suspend(() => {
        const n = Math.min(config.workers - alive, queue.length - head)
        if (n <= 0) return Effect.void
        alive += n
        const one = FiberSet.run(
          workers,
          worker.pipe(
            Effect.ensuring(
              Effect.suspend(() => {
                alive--
                return spawn()
              })
            )
          )
        )
        return Effect.asVoid(Effect.replicateEffect(one, n, { discard: true }))
      })

    return {
      room: () => {
        const free = Math.max(0, Math.min(config.batchSize, config.workers + buffer() - outstanding))
        // A claim costs a round trip whatever its size: while work is outstanding, claim only once the buffer ran
        // low (`ended` says when), so claims come in batches, not one per finished execution.
        return outstanding > 0 && free < Math.max(1, Math.floor(buffer() / 2)) ? 0 : free
      },
      submit: (tasks) =>
        Effect.suspend(() => {
          if (tasks.length === 0) return Effect.void
          outstanding += tasks.length
          for (const task of tasks) queue.push(task)
          return spawn()
        }),
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
      awaitIdle: FiberSet.awaitEmpty(workers),
      interruptAll: Effect.suspend(() => {
        const cancelled = queue.slice(head)
        queue = []
        head = 0
        for (const task of cancelled) task.cancel()
        return FiberSet.clear(workers)
      })
    }
  })
