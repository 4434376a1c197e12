/**
 * The runner's workers and the buffer of work claimed ahead of them.
 *
 * Work is claimed ahead of free workers into a small buffer (leases renewed like any other), so a worker whose
 * handler returns takes the next execution at once instead of waiting for a tick. The buffer holds what keeps every
 * worker busy for about `BUFFER_MS` at the handlers' recent pace (a moving average of their durations): at least one
 * execution per worker, at most a batch. Quick handlers then drain a batch per claim; slow ones leave the rest of the
 * queue to other instances. Buffered executions start in claim order.
 */
import { Clock, Effect, Ref } from "effect"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"

/** How long the buffer should keep the workers busy at the handlers' recent pace. */
const BUFFER_MS = 50

export interface Capacity {
  /** How many more executions may be claimed now (0: full). */
  readonly room: Effect.Effect<number>
  /** An execution was claimed: it counts until it ends. */
  readonly claimed: Effect.Effect<void>
  /** Runs a handler on one of the workers: waits for a free one (claim order), holds it until done. */
  readonly onWorker: <A>(self: Effect.Effect<A>) => Effect.Effect<A>
  /** An execution ended; true when the buffer ran low, so it is time to claim again. */
  readonly ended: Effect.Effect<boolean>
  /** Handlers running now. */
  readonly running: Effect.Effect<number>
}

export const make = (config: SchedulerConfig): Effect.Effect<Capacity> =>
  Effect.gen(function* () {
    const permits = yield* Effect.makeSemaphore(config.workers)
    /** Claimed and not yet ended (running, or waiting for a worker). */
    const outstanding = yield* Ref.make(0)
    const busy = yield* Ref.make(0)
    let averageMs = BUFFER_MS
    const buffer = () =>
      Math.min(
        config.batchSize,
        Math.max(config.workers, Math.floor((config.workers * BUFFER_MS) / Math.max(averageMs, 0.01)))
      )

    const onWorker = <A>(self: Effect.Effect<A>) =>
      permits.withPermits(1)(
        Effect.acquireUseRelease(
          Effect.zipRight(
            Ref.update(busy, (n) => n + 1),
            Clock.currentTimeMillis
          ),
          () => self,
          (startedAt) =>
            Effect.flatMap(Clock.currentTimeMillis, (endedAt) => {
              averageMs = averageMs * 0.9 + Math.max(0, endedAt - startedAt) * 0.1
              return Ref.update(busy, (n) => n - 1)
            })
        )
      )

    return {
      room: Effect.map(Ref.get(outstanding), (n) =>
        Math.max(0, Math.min(config.batchSize, config.workers + buffer() - n))
      ),
      claimed: Ref.update(outstanding, (n) => n + 1),
      onWorker,
      // Claim again once the buffer runs low, not after every execution: the claim then overlaps the handlers.
      ended: Effect.gen(function* () {
        const left = yield* Ref.updateAndGet(outstanding, (n) => n - 1)
        return left - (yield* Ref.get(busy)) <= Math.floor(buffer() / 2)
      }),
      running: Ref.get(busy)
    }
  })
