/**
 * Settings held in memory (over the shared in-memory `scheduler_meta`), changeable by tests while the runner reads
 * them live. A change wakes the runner, as a change of `scheduler_meta` does in Postgres.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { isPaused, parseBool, parseInt, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import { SettingKeys, Settings, SettingsError, SettingsWriter } from "../../ports/Settings.js"
import { layer as metaLayer, MemoryMeta } from "./MemoryMeta.js"

type Value = boolean | number | string

/** The handle tests use to change settings. */
export class MemorySettings extends Context.Tag("kairos/MemorySettings")<
  MemorySettings,
  {
    /** Sets a key; `undefined` removes it. Dies on a `scheduler.paused` value that is not a boolean. */
    readonly set: (key: string, value: Value | undefined) => Effect.Effect<void>
  }
>() {}

/** Settings, its writer and the MemorySettings handle over the MemoryMeta in context. */
export const layerFromMeta: Layer.Layer<Settings | SettingsWriter | MemorySettings, never, MemoryMeta> =
  Layer.effectContext(
    Effect.gen(function* () {
      const meta = yield* MemoryMeta
      const read = (key: string) => Effect.sync(() => Option.fromNullable(meta.get(key)))
      const write = (key: string, value: Value | undefined) =>
        Effect.suspend(() =>
          Either.match(meta.set(key, value), {
            onLeft: (message) => Effect.fail(new SettingsError({ reason: "Invalid", message })),
            onRight: () => Effect.void
          })
        )
      const settings = Settings.of({
        getBool: (key) => Effect.map(read(key), Option.flatMap(parseBool)),
        getInt: (key) => Effect.map(read(key), Option.flatMap(parseInt)),
        switches: Effect.sync(() => ({
          paused: isPaused(meta.get(SEMAPHORE_KEY)),
          enabled: Option.flatMap(Option.fromNullable(meta.get(SettingKeys.enabled)), parseBool),
          intervalSeconds: Option.flatMap(Option.fromNullable(meta.get(SettingKeys.intervalSeconds)), parseInt).pipe(
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
 * Settings, its writer, the MemorySettings handle and the MemoryMeta they are stored in, starting from `initial`.
 * Give the memory queue the same MemoryMeta (`Layer.provideMerge`) so its semaphore is this `scheduler.paused`.
 */
export const layer = (
  initial: Readonly<Record<string, Value>> = {}
): Layer.Layer<Settings | SettingsWriter | MemorySettings | MemoryMeta> =>
  layerFromMeta.pipe(Layer.provideMerge(metaLayer(initial)))
