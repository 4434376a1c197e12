/**
 * Settings held in memory, changeable by tests while the runner reads them live.
 */
import { Context, Effect, Layer, Option, Ref } from "effect"
import { Settings, SettingsWriter } from "../../ports/Settings.js"

type Value = boolean | number | string

/** The handle tests use to change settings. */
export class MemorySettings extends Context.Tag("kairos/MemorySettings")<
  MemorySettings,
  {
    /** Sets a key; `undefined` removes it. */
    readonly set: (key: string, value: Value | undefined) => Effect.Effect<void>
  }
>() {}

const toBool = (v: Value): Option.Option<boolean> =>
  typeof v === "boolean"
    ? Option.some(v)
    : typeof v === "number"
      ? Option.some(v !== 0)
      : ["true", "1", "yes", "on"].includes(v.toLowerCase())
        ? Option.some(true)
        : ["false", "0", "no", "off"].includes(v.toLowerCase())
          ? Option.some(false)
          : Option.none()

const toInt = (v: Value): Option.Option<number> => {
  const n = typeof v === "number" ? v : typeof v === "string" ? Number(v) : Number.NaN
  return Number.isInteger(n) ? Option.some(n) : Option.none()
}

/** Provides Settings, its writer and the MemorySettings handle, starting from `initial`. */
export const layer = (
  initial: Readonly<Record<string, Value>> = {}
): Layer.Layer<Settings | SettingsWriter | MemorySettings> =>
  Layer.effectContext(
    Effect.gen(function* () {
      const ref = yield* Ref.make(new Map<string, Value>(Object.entries(initial)))
      const read = (key: string) => Effect.map(Ref.get(ref), (m) => Option.fromNullable(m.get(key)))
      const settings = Settings.of({
        getBool: (key) => Effect.map(read(key), Option.flatMap(toBool)),
        getInt: (key) => Effect.map(read(key), Option.flatMap(toInt))
      })
      const handle = MemorySettings.of({
        set: (key, value) =>
          Ref.update(ref, (m) => {
            const copy = new Map(m)
            if (value === undefined) copy.delete(key)
            else copy.set(key, value)
            return copy
          })
      })
      return Context.make(Settings, settings).pipe(
        Context.add(MemorySettings, handle),
        Context.add(SettingsWriter, SettingsWriter.of({ set: handle.set }))
      )
    })
  )
