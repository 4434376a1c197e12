/**
 * Everything a test of recurring jobs needs, in one layer: a Runner over a FakeStore and MemorySettings, driven by
 * Effect's TestClock (use it inside `it.effect` / `it.scoped` of @effect/vitest, or provide `FakeClock.layer`).
 */
import { Effect, Fiber, Layer, TestClock } from "effect"
import type { SchedulerConfigInput } from "../../domain/SchedulerConfig.js"
import type { JobStore } from "../../ports/JobStore.js"
import type { Settings, SettingsWriter } from "../../ports/Settings.js"
import * as Runner from "../../runtime/Runner.js"
import * as FakeStore from "./FakeStore.js"
import * as MemoryQueueStore from "./MemoryQueueStore.js"
import * as MemorySettings from "./MemorySettings.js"
import type { QueueStore } from "../../ports/QueueStore.js"

/**
 * Stops the runner while moving the fake clock through its grace period: the grace period is clock time, and a
 * test clock only moves when told to.
 */
export const stop: Effect.Effect<void, never, Runner.Runner> = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  const stopping = yield* Effect.fork(runner.stop)
  yield* TestClock.adjust(runner.config.gracePeriod)
  yield* Fiber.join(stopping)
})

// Registered after the runner, so it runs first when the test's scope closes — even when the test failed with a
// handler still running, which would otherwise wait for a clock nobody moves.
const StopAtEnd: Layer.Layer<never, never, Runner.Runner> = Layer.scopedDiscard(Effect.addFinalizer(() => stop))

/**
 * A Runner with `config` over a FakeStore, the memory queue and MemorySettings (starting from `settings`), all
 * exposed to the test.
 */
export const layer = (
  config: SchedulerConfigInput = {},
  settings: Readonly<Record<string, boolean | number | string>> = {}
): Layer.Layer<
  | Runner.Runner
  | FakeStore.FakeStore
  | JobStore
  | QueueStore
  | MemoryQueueStore.MemoryQueue
  | MemorySettings.MemorySettings
  | Settings
  | SettingsWriter
> =>
  StopAtEnd.pipe(
    Layer.provideMerge(Runner.layer(config)),
    Layer.provideMerge(Layer.mergeAll(FakeStore.layer, MemoryQueueStore.layer, MemorySettings.layer(settings)))
  )
