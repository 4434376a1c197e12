/**
 * A clock tests move by hand. It is Effect's TestClock: the runner reads the time and sleeps through Effect's
 * Clock, so moving this clock wakes the runner exactly when its next slot or poll comes, with no real waiting.
 * Inside `it.effect` (from @effect/vitest) the TestClock is already installed; elsewhere provide `layer`.
 */
import { Duration, Effect, Layer, TestClock, TestContext } from "effect"
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
