/**
 * A runner on the memory adapters for runtime tests: FakeStore, MemorySettings, Effect's TestClock.
 */
import { Effect, FiberRef, HashSet, Layer, Logger, Ref } from "effect"
import * as MemoryDatabase from "../../src/adapters/memory/MemoryDatabase.js"
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import * as MemorySettings from "../../src/adapters/memory/MemorySettings.js"
import * as TestRunner from "../../src/layers/TestRunner.js"

/** Stops the runner under the fake clock (its grace period is clock time). */
export const stopUnderFakeClock = TestRunner.stop

/** FakeStore + MemorySettings + a Runner with `config`, all exposed; stopped under the fake clock at the end. */
export const testLayer = TestRunner.layer

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
 * The memory queue, settings, pause switch, worker registry and wake-ups (one MemoryDatabase), for runners built over
 * a JobStore of the test's own.
 */
export const memoryQueueAndSettings = Layer.mergeAll(
  MemoryQueueStore.layerFromDatabase,
  MemorySettings.layerFromDatabase,
  TestRunner.controlPorts()
).pipe(Layer.provideMerge(MemoryDatabase.layer()))
