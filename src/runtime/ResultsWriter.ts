/**
 * The results writer: one fiber records what finished, a batch per statement, for every lane. Whatever finishes
 * while a batch is written goes in the next one. Flushes hold a lock, so `stop` can write what is left after the
 * writer's batch in flight.
 */
import * as Effect from "effect/Effect"
import type { Lane } from "./Pipeline.js"
import * as Signal from "./Signal.js"

export interface ResultsWriter {
  /** A result is waiting (raised once per batch, not once per result: it de-duplicates). */
  readonly ready: Signal.Signal
  /** Writes everything waiting, under the lock. */
  readonly flushAll: Effect.Effect<void>
  /** One round: waits for results, then writes them. */
  readonly round: Effect.Effect<void>
}

export const make = <E>(lanes: ReadonlyArray<Lane<E>>): Effect.Effect<ResultsWriter> =>
  Effect.map(Effect.makeSemaphore(1), (lock) => {
    const ready = Signal.make()
    const flushAll = lock.withPermits(1)(
      Effect.gen(function* () {
        while (lanes.some((l) => l.pending() > 0)) for (const lane of lanes) yield* lane.flush
      })
    )
    return { ready, flushAll, round: Effect.zipRight(ready.take, flushAll) }
  })
