/**
 * A runner on the memory adapters for runtime tests: FakeStore, MemorySettings, Effect's TestClock.
 */
import { Effect, Fiber, FiberRef, HashSet, Layer, Logger, Ref, TestClock } from "effect"
import type { SchedulerConfigInput } from "../../src/domain/SchedulerConfig.js"
import * as FakeStore from "../../src/adapters/memory/FakeStore.js"
import * as MemorySettings from "../../src/adapters/memory/MemorySettings.js"
import * as Runner from "../../src/runtime/Runner.js"

/** FakeStore + MemorySettings + a Runner with `config`, all exposed. */
export const testLayer = (config: SchedulerConfigInput = {}, settings: Record<string, boolean | number> = {}) =>
  StopAtEnd.pipe(
    Layer.provideMerge(Runner.layer(config)),
    Layer.provideMerge(Layer.merge(FakeStore.layer, MemorySettings.layer(settings)))
  )

/**
 * Stops the runner under the fake clock when the test's scope closes (before the runner's own finalizer), so a
 * test that ends — or fails — with a handler still running does not wait for a clock nobody moves.
 */
const StopAtEnd: Layer.Layer<never, never, Runner.Runner> = Layer.scopedDiscard(
  Effect.addFinalizer(() => Effect.suspend(() => stopUnderFakeClock))
)

/** Runs `self` with a logger that records every line (level and message) into the returned ref. */
export const captureLogs = <A, E, R>(self: (lines: Ref.Ref<ReadonlyArray<string>>) => Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const lines = yield* Ref.make<ReadonlyArray<string>>([])
    const logger = Logger.make(({ logLevel, message }) => {
      const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
      Ref.update(lines, (xs) => [...xs, `${logLevel.label} ${text}`]).pipe(Effect.runSync)
    })
    return yield* Effect.locally(self(lines), FiberRef.currentLoggers, HashSet.make(logger))
  })

/** Lets forked fibers run until `condition` holds (no clock movement); fails after many rounds. */
export const settle = (condition: Effect.Effect<boolean>, rounds = 200): Effect.Effect<void, Error> =>
  Effect.gen(function* () {
    for (let i = 0; i < rounds; i++) {
      if (yield* condition) return
      yield* Effect.yieldNow()
      yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
    }
    return yield* Effect.fail(new Error("condition never held"))
  })

/**
 * Stops the runner under the fake clock: the grace period is clock time, so it is advanced while `stop` waits.
 * (A test whose scope closes with a handler still running would otherwise wait for a clock nobody moves.)
 */
export const stopUnderFakeClock = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  const stopping = yield* Effect.fork(runner.stop)
  yield* TestClock.adjust(runner.config.gracePeriod)
  yield* Fiber.join(stopping)
})
