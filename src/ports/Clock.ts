/**
 * Time. Effect's own `Clock` serves as the port: the runner reads `now` and sleeps through it, so Effect's
 * `TestClock` (wrapped by the memory adapter's `FakeClock`) drives the whole runtime deterministically.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"

/** The current time from Effect's Clock, as a `Date`. */
export const now: Effect.Effect<Date> = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
