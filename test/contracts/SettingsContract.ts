/**
 * The Settings contract, run against MemorySettings and PgSettings. (The pause switch is the Semaphore's: see
 * SemaphoreContract.)
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Option, type Layer } from "effect"
import { SettingKeys, Settings, SettingsWriter } from "../../src/index.js"

export const suite = (name: string, settingsLayer: Layer.Layer<Settings | SettingsWriter, unknown>) =>
  layer(settingsLayer, { timeout: "60 seconds", excludeTestServices: true })(`Settings contract: ${name}`, (it) => {
    it.effect("an unset switch reads as None; set values read back, live", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.enabled, undefined)
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
        expect(yield* settings.switches).toEqual({
          paused: false,
          enabled: Option.none(),
          intervalSeconds: Option.none()
        })
        yield* writer.set(SettingKeys.intervalSeconds, 15)
        expect((yield* settings.switches).intervalSeconds).toEqual(Option.some(15))
        yield* writer.set(SettingKeys.intervalSeconds, 30)
        expect((yield* settings.switches).intervalSeconds).toEqual(Option.some(30))
        yield* writer.set(SettingKeys.enabled, false)
        expect((yield* settings.switches).enabled).toEqual(Option.some(false))
        yield* writer.set(SettingKeys.enabled, undefined)
        expect((yield* settings.switches).enabled).toEqual(Option.none())
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
      })
    )

    it.effect("switches reads the live switches at once; a malformed or non-positive interval is unset", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.enabled, false)
        yield* writer.set(SettingKeys.intervalSeconds, 7)
        expect(yield* settings.switches).toEqual({
          paused: false,
          enabled: Option.some(false),
          intervalSeconds: Option.some(7)
        })
        yield* writer.set(SettingKeys.enabled, "yes")
        expect(yield* settings.switches).toEqual({
          paused: false,
          enabled: Option.some(true),
          intervalSeconds: Option.some(7)
        })
        yield* writer.set(SettingKeys.intervalSeconds, "42")
        expect((yield* settings.switches).intervalSeconds).toEqual(Option.some(42))
        for (const bad of [0, -5, "soon", 1.5, "twelve"]) {
          yield* writer.set(SettingKeys.intervalSeconds, bad)
          expect((yield* settings.switches).intervalSeconds, `interval ${String(bad)}`).toEqual(Option.none())
        }
        yield* writer.set(SettingKeys.enabled, "perhaps")
        expect((yield* settings.switches).enabled).toEqual(Option.none())
        yield* writer.set(SettingKeys.enabled, undefined)
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
      })
    )

    it.effect("other keys are stored without touching the switches", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        const before = yield* settings.switches
        yield* writer.set("kairos.test.malformed", "twelve")
        yield* writer.set("kairos.test.flag", true)
        expect(yield* settings.switches).toEqual(before)
        yield* writer.set("kairos.test.malformed", undefined)
        yield* writer.set("kairos.test.flag", undefined)
      })
    )
  })
