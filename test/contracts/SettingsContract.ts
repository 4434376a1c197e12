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

    it.effect("switches reads the three live switches at once; a malformed or non-positive interval is unset", () =>
      Effect.gen(function* () {
        const settings = yield* Settings
        const writer = yield* SettingsWriter
        yield* writer.set(SettingKeys.paused, undefined)
        yield* writer.set(SettingKeys.enabled, undefined)
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
        expect(yield* settings.switches).toEqual({
          paused: false,
          enabled: Option.none(),
          intervalSeconds: Option.none()
        })
        yield* writer.set(SettingKeys.paused, true)
        yield* writer.set(SettingKeys.enabled, false)
        yield* writer.set(SettingKeys.intervalSeconds, 7)
        expect(yield* settings.switches).toEqual({
          paused: true,
          enabled: Option.some(false),
          intervalSeconds: Option.some(7)
        })
        yield* writer.set(SettingKeys.paused, false)
        yield* writer.set(SettingKeys.enabled, "yes")
        expect(yield* settings.switches).toEqual({
          paused: false,
          enabled: Option.some(true),
          intervalSeconds: Option.some(7)
        })
        for (const bad of [0, -5, "soon", 1.5]) {
          yield* writer.set(SettingKeys.intervalSeconds, bad)
          expect((yield* settings.switches).intervalSeconds, `interval ${String(bad)}`).toEqual(Option.none())
        }
        yield* writer.set(SettingKeys.enabled, "perhaps")
        expect((yield* settings.switches).enabled).toEqual(Option.none())
        yield* writer.set(SettingKeys.enabled, undefined)
        yield* writer.set(SettingKeys.intervalSeconds, undefined)
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
