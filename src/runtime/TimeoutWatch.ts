/**
 * The timeout watch, one for every execution of every lane (instead of a timer per execution), whatever its kind of
 * handler: a deadline timer over the earliest handler timeout and lease-trust deadline. It ends what has run out as
 * timed out (a pending promise settled, an Effect handler's fiber interrupted) and aborts executions whose lease was
 * not confirmed in time (a renewal that fails or hangs does not count).
 */
import * as Effect from "effect/Effect"
import * as DeadlineTimer from "./DeadlineTimer.js"
import type { Lane } from "./Pipeline.js"

export const make = <E>(lanes: ReadonlyArray<Lane<E>>): DeadlineTimer.DeadlineTimer =>
  DeadlineTimer.make({
    earliest: () => {
      let earliest = Number.POSITIVE_INFINITY
      for (const lane of lanes) earliest = Math.min(earliest, lane.earliestDeadline())
      return earliest
    },
    due: (nowMs) => Effect.forEach(lanes, (lane) => lane.expire(nowMs), { discard: true })
  })
