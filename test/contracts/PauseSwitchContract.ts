/**
 * One pause switch across two ports: `scheduler.paused` (Settings) and the queue's semaphore (QueueStore) are the
 * same stored row, whichever port writes it, and every write wakes the queue's subscribers. Run against the memory
 * adapters (one MemoryMeta) and the Postgres adapters (one schema).
 */
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Either, Option, type Layer } from "effect"
import { QueueStore, SettingKeys, Settings, SettingsError, SettingsWriter } from "../../src/index.js"

const T0 = new Date("2026-01-01T00:00:00Z")

export interface PauseSwitchOptions {
  /**
   * How a subscriber hears of a write: `synchronously` (called before the write returns, as in memory) or
   * `eventually` (within a couple of seconds, as LISTEN/NOTIFY delivers it).
   */
  readonly wakes: "synchronously" | "eventually"
}

type Env = Settings | SettingsWriter | QueueStore

export const suite = (name: string, storesLayer: Layer.Layer<Env, unknown>, options: PauseSwitchOptions) =>
  layer(storesLayer, { timeout: "60 seconds", excludeTestServices: true })(`Pause switch contract: ${name}`, (it) => {
    /** Reads the switch through every port: [getBool(paused), switches.paused, getSemaphore]. */
    const readings = Effect.gen(function* () {
      const settings = yield* Settings
      const queue = yield* QueueStore
      return [
        yield* settings.getBool(SettingKeys.paused),
        (yield* settings.switches).paused,
        yield* queue.getSemaphore()
      ] as const
    })
    const paused = [Option.some(true), true, false] as const
    const running = [Option.some(false), false, true] as const

    /** Runs `write` with a fresh subscriber listening, and checks that the subscriber was woken by it. */
    const wakes = <E, R>(what: string, write: Effect.Effect<unknown, E, R>) =>
      Effect.scoped(
        Effect.gen(function* () {
          const queue = yield* QueueStore
          const woken = yield* Deferred.make<void>()
          yield* queue.subscribe(() => Deferred.unsafeDone(woken, Effect.void))
          yield* write
          if (options.wakes === "synchronously") {
            expect(yield* Deferred.isDone(woken), `${what} woke the subscriber before returning`).toBe(true)
          } else {
            yield* Deferred.await(woken).pipe(
              Effect.timeoutFail({
                duration: "3 seconds",
                onTimeout: () => new Error(`${what} did not wake the subscriber within 3 seconds`)
              })
            )
          }
        })
      )

    it.effect("scheduler.paused written through Settings is the queue's semaphore", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.paused, true)
        expect(yield* readings).toEqual(paused)
        yield* writer.set(SettingKeys.paused, false)
        expect(yield* readings).toEqual(running)
        // Any boolean spelling is the same switch.
        yield* writer.set(SettingKeys.paused, "on")
        expect(yield* readings).toEqual(paused)
        yield* writer.set(SettingKeys.paused, "0")
        expect(yield* readings).toEqual(running)
      })
    )

    it.effect("the semaphore set through the queue is scheduler.paused", () =>
      Effect.gen(function* () {
        const queue = yield* QueueStore
        yield* queue.setSemaphore(false, T0)
        expect(yield* readings).toEqual(paused)
        yield* queue.setSemaphore(true, T0)
        expect(yield* readings).toEqual(running)
      })
    )

    it.effect("removing scheduler.paused unpauses: no row is green", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.paused, true)
        yield* writer.set(SettingKeys.paused, undefined)
        expect(yield* readings).toEqual([Option.none(), false, true])
      })
    )

    it.effect("a scheduler.paused value that is not a boolean is refused (Invalid) and changes nothing", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        for (const before of [true, false]) {
          yield* writer.set(SettingKeys.paused, before)
          for (const value of ["maybe", "", 2, "redish"] as const) {
            const result = yield* Effect.either(writer.set(SettingKeys.paused, value))
            expect(Either.isLeft(result), `scheduler.paused = ${JSON.stringify(value)} was accepted`).toBe(true)
            const error = Either.getLeft(result).pipe(Option.getOrThrow)
            expect(error).toBeInstanceOf(SettingsError)
            expect(error.reason).toBe("Invalid")
            expect(yield* readings).toEqual(before ? paused : running)
          }
        }
        yield* writer.set(SettingKeys.paused, false)
      })
    )

    it.effect("every way of writing the switch wakes the queue's subscribers", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        const queue = yield* QueueStore
        yield* wakes("SettingsWriter.set(scheduler.paused, true)", writer.set(SettingKeys.paused, true))
        expect(yield* queue.getSemaphore()).toBe(false)
        yield* wakes("SettingsWriter.set(scheduler.paused, false)", writer.set(SettingKeys.paused, false))
        expect(yield* queue.getSemaphore()).toBe(true)
        yield* wakes("QueueStore.setSemaphore(false)", queue.setSemaphore(false, T0))
        expect((yield* (yield* Settings).switches).paused).toBe(true)
        yield* wakes("QueueStore.setSemaphore(true)", queue.setSemaphore(true, T0))
        expect((yield* (yield* Settings).switches).paused).toBe(false)
        yield* writer.set(SettingKeys.paused, true)
        yield* wakes("SettingsWriter.set(scheduler.paused, undefined)", writer.set(SettingKeys.paused, undefined))
        expect(yield* queue.getSemaphore()).toBe(true)
      })
    )

    it.effect("the other live settings wake the queue's subscribers too", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        yield* wakes("SettingsWriter.set(scheduler.enabled, false)", writer.set(SettingKeys.enabled, false))
        yield* wakes("SettingsWriter.set(scheduler.enabled, undefined)", writer.set(SettingKeys.enabled, undefined))
        yield* wakes("SettingsWriter.set(scheduler.interval_seconds, 5)", writer.set(SettingKeys.intervalSeconds, 5))
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
      })
    )
  })
