/**
 * The Semaphore contract (the pause switch): the runner's `switches.paused` reads what `Semaphore.isGreen` reads;
 * writes go through the Semaphore only (SettingsWriter refuses the key); every write wakes the WakeUps subscribers;
 * a missing row is green, and `startGreen: false` makes a database without a row start red (one with a row keeps it).
 * Run against the memory adapters (one MemoryDatabase) and the Postgres adapters (one schema).
 */
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Either, Option, type Layer } from "effect"
import {
  Semaphore,
  type SemaphoreOptions,
  SettingKeys,
  Settings,
  SettingsError,
  SettingsWriter,
  WakeUps
} from "../../src/index.js"

type Env = Settings | SettingsWriter | Semaphore | WakeUps

export interface SemaphoreSuiteOptions<R> {
  /**
   * How a subscriber hears of a write: `synchronously` (called before the write returns, as in memory) or
   * `eventually` (within a couple of seconds, as LISTEN/NOTIFY delivers it).
   */
  readonly wakes: "synchronously" | "eventually"
  /** Deletes the switch's row, as an operator's SQL could: the database then has none, as a fresh one. */
  readonly deleteRow: Effect.Effect<void, unknown, R>
  /** Builds another instance's Semaphore over the same database, as the adapter's layer does with `options`. */
  readonly startOver: (options: SemaphoreOptions) => Effect.Effect<Semaphore["Type"], unknown, R>
}

export const suite = <R>(name: string, portsLayer: Layer.Layer<Env | R, unknown>, options: SemaphoreSuiteOptions<R>) =>
  layer(portsLayer, { timeout: "60 seconds", excludeTestServices: true })(`Semaphore contract: ${name}`, (it) => {
    /** The switch as each reader sees it: [Semaphore.isGreen, Settings.switches.paused]. */
    const readings = Effect.gen(function* () {
      const semaphore = yield* Semaphore
      const settings = yield* Settings
      return [yield* semaphore.isGreen, (yield* settings.switches).paused] as const
    })
    const red = [false, true] as const
    const green = [true, false] as const

    /** Runs `write` with a fresh subscriber listening, and checks that the subscriber was woken by it. */
    const wakes = <E, R2>(what: string, write: Effect.Effect<unknown, E, R2>) =>
      Effect.scoped(
        Effect.gen(function* () {
          const wakeUps = yield* WakeUps
          const woken = yield* Deferred.make<void>()
          yield* wakeUps.subscribe(() => Deferred.unsafeDone(woken, Effect.void))
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

    it.effect("setRed and setGreen switch it, and the runner's switches read the same", () =>
      Effect.gen(function* () {
        const semaphore = yield* Semaphore
        yield* semaphore.setRed
        expect(yield* readings).toEqual(red)
        yield* semaphore.setRed
        expect(yield* readings).toEqual(red)
        yield* semaphore.setGreen
        expect(yield* readings).toEqual(green)
      })
    )

    it.effect("SettingsWriter refuses the switch (Invalid) and changes nothing", () =>
      Effect.gen(function* () {
        const writer = yield* SettingsWriter
        const semaphore = yield* Semaphore
        for (const before of [true, false]) {
          yield* before ? semaphore.setRed : semaphore.setGreen
          for (const [key, value] of [
            [SettingKeys.paused, !before],
            [SettingKeys.paused, undefined],
            ["semaphore", before ? "green" : "red"]
          ] as const) {
            const result = yield* Effect.either(writer.set(key, value))
            expect(Either.isLeft(result), `${key} = ${JSON.stringify(value)} was accepted`).toBe(true)
            const error = Either.getLeft(result).pipe(Option.getOrThrow)
            expect(error).toBeInstanceOf(SettingsError)
            expect(error.reason).toBe("Invalid")
            expect(yield* readings).toEqual(before ? red : green)
          }
        }
        yield* semaphore.setGreen
      })
    )

    it.effect("every write of the switch, and of the other live settings, wakes the subscribers", () =>
      Effect.gen(function* () {
        const semaphore = yield* Semaphore
        const writer = yield* SettingsWriter
        yield* wakes("Semaphore.setRed", semaphore.setRed)
        expect(yield* readings).toEqual(red)
        yield* wakes("Semaphore.setGreen", semaphore.setGreen)
        expect(yield* readings).toEqual(green)
        yield* wakes("SettingsWriter.set(scheduler.enabled, false)", writer.set(SettingKeys.enabled, false))
        yield* wakes("SettingsWriter.set(scheduler.enabled, undefined)", writer.set(SettingKeys.enabled, undefined))
        yield* wakes("SettingsWriter.set(scheduler.interval_seconds, 5)", writer.set(SettingKeys.intervalSeconds, 5))
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
      })
    )

    it.effect("a missing row is green; startGreen: false starts a database without one red, and keeps one", () =>
      Effect.gen(function* () {
        const semaphore = yield* Semaphore
        yield* semaphore.setRed
        yield* options.deleteRow
        expect(yield* readings).toEqual(green)
        // A second instance created to start red, on a database with no row: every reader sees red.
        const startedRed = yield* options.startOver({ startGreen: false })
        expect(yield* startedRed.isGreen).toBe(false)
        expect(yield* readings).toEqual(red)
        // A stored switch outlives restarts: starting red again does not override a green row, nor the default red.
        yield* semaphore.setGreen
        expect(yield* (yield* options.startOver({ startGreen: false })).isGreen).toBe(true)
        yield* semaphore.setRed
        expect(yield* (yield* options.startOver({})).isGreen).toBe(false)
        yield* options.deleteRow
        expect(yield* (yield* options.startOver({ startGreen: true })).isGreen).toBe(true)
        expect(yield* readings).toEqual(green)
      })
    )
  })
