/**
 * The Settings contract, run against MemorySettings and PgSettings.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Option, type Layer } from "effect"
import { SettingKeys, Settings, SettingsWriter } from "../../src/index.js"

export const suite = (name: string, settingsLayer: Layer.Layer<Settings | SettingsWriter, unknown>) =>
  layer(settingsLayer, { timeout: "60 seconds", excludeTestServices: true })(`Settings contract: ${name}`, (it) => {
    it.effect("an unset key reads as None; set values read back, live", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        expect(yield* settings.getBool("kairos.test.unset")).toEqual(Option.none())
        expect(yield* settings.getInt("kairos.test.unset")).toEqual(Option.none())
        yield* writer.set(SettingKeys.intervalSeconds, 15)
        expect(yield* settings.getInt(SettingKeys.intervalSeconds)).toEqual(Option.some(15))
        yield* writer.set(SettingKeys.intervalSeconds, 30)
        expect(yield* settings.getInt(SettingKeys.intervalSeconds)).toEqual(Option.some(30))
        yield* writer.set(SettingKeys.enabled, false)
        expect(yield* settings.getBool(SettingKeys.enabled)).toEqual(Option.some(false))
        yield* writer.set(SettingKeys.enabled, undefined)
        expect(yield* settings.getBool(SettingKeys.enabled)).toEqual(Option.none())
      })
    )

    it.effect("scheduler.paused switches on and off", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.paused, true)
        expect(yield* settings.getBool(SettingKeys.paused)).toEqual(Option.some(true))
        yield* writer.set(SettingKeys.paused, false)
        expect(yield* settings.getBool(SettingKeys.paused)).toEqual(Option.some(false))
      })
    )

    it.effect("a malformed value reads as unset instead of failing", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        yield* writer.set("kairos.test.malformed", "twelve")
        expect(yield* settings.getInt("kairos.test.malformed")).toEqual(Option.none())
        expect(yield* settings.getBool("kairos.test.malformed")).toEqual(Option.none())
        yield* writer.set("kairos.test.text-int", "42")
        expect(yield* settings.getInt("kairos.test.text-int")).toEqual(Option.some(42))
      })
    )
  })
