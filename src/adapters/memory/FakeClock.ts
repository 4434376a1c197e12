/**
 * A clock tests move by hand. It is Effect's TestClock: the runner reads the time and sleeps through Effect's
 * Clock, so moving this clock wakes the runner exactly when its next slot or poll comes, with no real waiting.
 * Inside `it.effect` (from @effect/vitest) the TestClock is already installed; elsewhere provide `layer`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Predicate from "effect/Predicate"
import * as TestClock from "effect/TestClock"
import * as TestContext from "effect/TestContext"
import { now as clockNow } from "../../ports/Clock.js"

/** Sets the clock to `date`, running everything scheduled until then. */
export const set = (date: Date | string): Effect.Effect<void> => TestClock.setTime(new Date(date).getTime())

/** Moves the clock forward by `duration`, running everything scheduled on the way, in order. */
export const advance = (duration: Duration.DurationInput): Effect.Effect<void> => TestClock.adjust(duration)

/** The fake clock's current time. */
export const now: Effect.Effect<Date> = clockNow

/** Moves the clock forward to `date` (never backwards). */
export const advanceTo = (date: Date | string): Effect.Effect<void> =>
  Effect.flatMap(clockNow, (current) =>
    TestClock.adjust(Duration.millis(Math.max(0, new Date(date).getTime() - current.getTime())))
  )

/** Installs Effect's test services (the TestClock among them) for programs not run by `it.effect`. */
export const layer: Layer.Layer<never> = TestContext.TestContext

/**
 * Makes the current TestClock advance quickly. Before running each due sleeper, Effect's TestClock waits until every
 * fiber is suspended, checking across `setTimeout(0)` turns: at least 1 ms each, ~4 ms per wake-up, ~1.5 s for a
 * daily loop over a year. `setImmediate` turns check the same thing (no timer is involved in a fake-time test) in
 * microseconds. Does nothing when the clock is not a TestClock.
 */
export const quick: Effect.Effect<void> = Effect.flatMap(TestClock.testClock(), (clock) =>
  Effect.sync(() => {
    if (!Predicate.hasProperty(clock, "yieldTimer")) return
    Object.assign(clock, {
      yieldTimer: Effect.async<void>((resume) => {
        const handle = setImmediate(() => resume(Effect.void))
        return Effect.sync(() => clearImmediate(handle))
      })
    })
  })
)
