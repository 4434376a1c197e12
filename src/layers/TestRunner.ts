/**
 * Everything a test of recurring jobs and queue items needs, in one layer: a Runner over the memory adapters (the
 * MemoryJobStore, the memory queue, MemorySettings, the pause switch, the worker registry and wake-ups, all over one
 * MemoryDatabase), driven by Effect's TestClock (use it inside `it.effect` / `it.scoped` of @effect/vitest, or provide
 * `FakeClock.layer`).
 *
 * The runner sleeps straight to the next slot, retry or poll; the poll defaults to a day and the heartbeat to a
 * week: a simulated year of a daily job costs a few hundred wake-ups, about half a second.
 */
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import * as FakeClock from "../adapters/memory/FakeClock.js"
import * as MemoryDatabase from "../adapters/memory/MemoryDatabase.js"
import * as MemoryJobStore from "../adapters/memory/MemoryJobStore.js"
import * as MemoryLimits from "../adapters/memory/MemoryLimits.js"
import * as MemoryQueueStore from "../adapters/memory/MemoryQueueStore.js"
import * as MemorySemaphore from "../adapters/memory/MemorySemaphore.js"
import * as MemorySettings from "../adapters/memory/MemorySettings.js"
import * as MemoryWakeUps from "../adapters/memory/MemoryWakeUps.js"
import * as MemoryWorkerRegistry from "../adapters/memory/MemoryWorkerRegistry.js"
import type { InvalidConfigError } from "../domain/errors.js"
import type { SchedulerConfigInput } from "../domain/SchedulerConfig.js"
import type { JobStore } from "../ports/JobStore.js"
import type { Limits } from "../ports/Limits.js"
import type { QueueStore } from "../ports/QueueStore.js"
import type { Semaphore, SemaphoreOptions } from "../ports/Semaphore.js"
import type { Settings, SettingsWriter } from "../ports/Settings.js"
import type { WakeUps } from "../ports/WakeUps.js"
import type { WorkerRegistry } from "../ports/WorkerRegistry.js"
import * as Runner from "../runtime/Runner.js"

/** The defaults `layer` fills in under a test clock: a long poll and heartbeat (new work wakes the runner anyway). */
export const testDefaults: SchedulerConfigInput = { interval: "1 day", heartbeatInterval: "7 days" }

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

/** The memory ports besides the stores — the pause switch, the worker registry, wake-ups — over one MemoryDatabase. */
export const controlPorts = (
  options: SemaphoreOptions = {}
): Layer.Layer<Semaphore | WorkerRegistry | WakeUps, never, MemoryDatabase.MemoryDatabase> =>
  Layer.mergeAll(MemorySemaphore.layer(options), MemoryWorkerRegistry.layer, MemoryWakeUps.layer)

/** Every memory port (and the handles tests inspect them with) over one MemoryDatabase starting from `settings`. */
export const memoryPorts = (
  settings: Readonly<Record<string, boolean | number | string>> = {},
  options: SemaphoreOptions = {}
): Layer.Layer<
  | MemoryJobStore.MemoryJobStore
  | JobStore
  | QueueStore
  | MemoryQueueStore.MemoryQueue
  | MemorySettings.MemorySettings
  | MemoryDatabase.MemoryDatabase
  | Settings
  | SettingsWriter
  | Semaphore
  | WorkerRegistry
  | WakeUps
  | Limits
> =>
  Layer.mergeAll(
    MemoryJobStore.layer,
    MemoryQueueStore.layerFromDatabase,
    MemoryLimits.layer,
    MemorySettings.layerFromDatabase,
    controlPorts(options)
  ).pipe(Layer.provideMerge(MemoryDatabase.layer(settings)))

/**
 * A Runner with `config` (over `testDefaults`) on the memory ports (`memoryPorts`, the database starting from
 * `settings`), all exposed to the test.
 */
export const layer = (
  config: SchedulerConfigInput = {},
  settings: Readonly<Record<string, boolean | number | string>> = {}
): Layer.Layer<
  | Runner.Runner
  | MemoryJobStore.MemoryJobStore
  | JobStore
  | QueueStore
  | MemoryQueueStore.MemoryQueue
  | MemorySettings.MemorySettings
  | MemoryDatabase.MemoryDatabase
  | Settings
  | SettingsWriter
  | Semaphore
  | WorkerRegistry
  | WakeUps
  | Limits,
  InvalidConfigError
> =>
  StopAtEnd.pipe(
    Layer.provideMerge(Runner.layer({ ...testDefaults, ...config })),
    Layer.provideMerge(memoryPorts(settings)),
    Layer.provideMerge(Layer.effectDiscard(FakeClock.quick))
  )
