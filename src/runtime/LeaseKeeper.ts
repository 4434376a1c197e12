/**
 * The lease keeper: one renewal round for every held lease of every lane, every third of a lease (see
 * `leaseTimes`); asleep while nothing is held. A lease a round finds lost aborts its execution.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { LeaseTimes } from "../domain/SchedulerConfig.js"
import { now as clockNow } from "../ports/Clock.js"
import type { Lane } from "./Pipeline.js"
import * as Signal from "./Signal.js"

export interface LeaseKeeper {
  /** Leases are now held (raised by a lane that held none). */
  readonly held: Signal.Signal
  /** One round: asleep while nothing is held, then a renewal period, then every lease renewed. */
  readonly round: Effect.Effect<void>
}

export const make = <E>(lanes: ReadonlyArray<Lane<E>>, lease: LeaseTimes): LeaseKeeper => {
  const held = Signal.make()
  const every = Duration.millis(lease.renewEveryMs)
  const round = Effect.gen(function* () {
    if (lanes.every((l) => l.leased() === 0)) yield* held.take
    yield* Effect.sleep(every)
    const now = yield* clockNow
    const leaseUntil = new Date(now.getTime() + lease.leaseMs)
    for (const lane of lanes) yield* lane.renew(leaseUntil, now)
  })
  return { held, round }
}
