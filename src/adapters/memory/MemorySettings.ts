/**
 * Settings held in memory (over the MemoryDatabase's `scheduler_meta`), changeable by tests while the runner reads
 * them live. A change wakes the runner, as a change of `scheduler_meta` does in Postgres. The pause switch is the
 * Semaphore's (MemorySemaphore): the writer refuses `scheduler.paused`, and `switches.paused` reads the switch as
 * `Semaphore.isGreen` does.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { isGreen, parseBool, parseInt, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import { pauseSwitchRefused, SettingKeys, Settings, SettingsError, SettingsWriter } from "../../ports/Settings.js"
import { layer as databaseLayer, MemoryDatabase } from "./MemoryDatabase.js"

type Value = boolean | number | string

/** The handle tests use to change settings. */
export class MemorySettings extends Context.Tag("kairos/MemorySettings")<
  MemorySettings,
  {
    /** Sets a key; `undefined` removes it. Dies on `scheduler.paused` (use the Semaphore). */
    readonly set: (key: string, value: Value | undefined) => Effect.Effect<void>
  }
>() {}

/** Settings, its writer and the MemorySettings handle over the MemoryDatabase in context. */
export const layerFromDatabase: Layer.Layer<Settings | SettingsWriter | MemorySettings, never, MemoryDatabase> =
  Layer.effectContext(
    Effect.gen(function* () {
      const db = yield* MemoryDatabase
      const write = (key: string, value: Value | undefined) =>
        Effect.suspend(() =>
          key === SettingKeys.paused || key === SEMAPHORE_KEY
            ? Effect.fail(pauseSwitchRefused())
            : Either.match(db.set(key, value), {
                onLeft: (message) => Effect.fail(new SettingsError({ reason: "Invalid", message })),
                onRight: () => Effect.void
              })
        )
      const settings = Settings.of({
        switches: Effect.sync(() => ({
          paused: !isGreen(db.get(SEMAPHORE_KEY)),
          enabled: Option.flatMap(Option.fromNullable(db.get(SettingKeys.enabled)), parseBool),
          intervalSeconds: Option.flatMap(Option.fromNullable(db.get(SettingKeys.intervalSeconds)), parseInt).pipe(
            Option.filter((n) => n > 0)
          )
        }))
      })
      return Context.make(Settings, settings).pipe(
        Context.add(MemorySettings, MemorySettings.of({ set: (key, value) => Effect.orDie(write(key, value)) })),
        Context.add(SettingsWriter, SettingsWriter.of({ set: write }))
      )
    })
  )

/**
 * Settings, its writer, the MemorySettings handle and the MemoryDatabase they are stored in, starting from
 * `initial`. Build the other memory ports over the same MemoryDatabase (`Layer.provideMerge`).
 */
export const layer = (
  initial: Readonly<Record<string, Value>> = {}
): Layer.Layer<Settings | SettingsWriter | MemorySettings | MemoryDatabase> =>
  layerFromDatabase.pipe(Layer.provideMerge(databaseLayer(initial)))
