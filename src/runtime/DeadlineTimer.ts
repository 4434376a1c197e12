/**
 * One deadline timer: sleeps until the earliest of its deadlines, and is woken early when a sooner one is set.
 * The runner's loop alarm (its next poll, slot or retry) and its timeout watch (handlers past their timeout, leases
 * no longer trusted) are each one: a single sleeping fiber, instead of a timer per sleep or per execution.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Signal from "./Signal.js"

export interface DeadlineTimer {
  /** A deadline was set at `atMs`: the timer wakes early only when it sleeps until later than that. */
  readonly sooner: (atMs: number) => void
  /** One round: sleeps until the earliest deadline (or a sooner one), then runs what is due. Run it forever. */
  readonly round: Effect.Effect<void>
}

/**
 * A timer over `earliest` (the earliest deadline now, in ms; Infinity: none), calling `due` with the time once the
 * earliest deadline has come (it must settle or move what was due, or the timer calls it again at once).
 */
export const make = (options: {
  readonly earliest: () => number
  readonly due: (nowMs: number) => Effect.Effect<void>
}): DeadlineTimer => {
  const { due, earliest } = options
  const soonerSet = Signal.make()
  // What the timer sleeps until: a deadline set later than this need not wake it (it looks again when it wakes).
  let sleepingUntil = Number.POSITIVE_INFINITY
  const round = Effect.gen(function* () {
    const target = earliest()
    sleepingUntil = target
    if (target === Number.POSITIVE_INFINITY) return yield* soonerSet.take
    const nowMs = yield* Clock.currentTimeMillis
    if (target > nowMs) {
      yield* Effect.raceFirst(Effect.sleep(Duration.millis(target - nowMs)), soonerSet.take)
      return
    }
    yield* due(nowMs)
  })
  return {
    sooner: (atMs) => {
      if (atMs >= sleepingUntil) return
      sleepingUntil = atMs
      soonerSet.raise()
    },
    round
  }
}
