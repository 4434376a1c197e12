/**
 * The lease keeper: one renewal round for every held lease of every lane, every third of a lease (see
 * `leaseTimes`), and at once when the database is reachable again after a round failed; asleep while nothing is
 * held. A lease a round finds lost aborts its execution.
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
  /**
   * The database is reachable again (the wake-up listener reconnected, or a tick succeeded after failed ones). If the
   * last round failed, the next comes at once, not a renewal period later: what the database kept of the rounds
   * before the outage may be less than this runner trusts (a failover to a standby that lagged loses the last
   * renewals), and the lease it holds may end before the next period's round.
   */
  readonly reachable: () => void
  /** One round: asleep while nothing is held, then a renewal period (less after `reachable`), then every renewal. */
  readonly round: Effect.Effect<void>
}

export const make = <E>(lanes: ReadonlyArray<Lane<E>>, lease: LeaseTimes): LeaseKeeper => {
  const held = Signal.make()
  const early = Signal.make()
  // The last round failed, and no early round was asked for since: the listener's reconnect and the tick that then
  // succeeded ask for one early round, not two.
  let failed = false
  const every = Effect.sleep(Duration.millis(lease.renewEveryMs))
  const round = Effect.gen(function* () {
    if (lanes.every((l) => l.leased() === 0)) {
      yield* held.take
      // Nothing was held through the outage: the leases taken since are fresh.
      failed = false
      early.clear()
    }
    yield* Effect.raceFirst(every, early.take)
    const now = yield* clockNow
    const leaseUntil = new Date(now.getTime() + lease.leaseMs)
    let renewed = true
    for (const lane of lanes) if (!(yield* lane.renew(leaseUntil, now))) renewed = false
    failed = !renewed
  })
  return {
    held,
    reachable: () => {
      if (!failed) return
      failed = false
      early.raise()
    },
    round
  }
}
