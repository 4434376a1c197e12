/**
 * Live switches the runner reads on every tick (from `scheduler_meta` in Postgres).
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"

/** Reading or writing a setting failed; `Invalid` for a value (or key) the setting does not take. */
export class SettingsError extends Data.TaggedError("SettingsError")<{
  readonly reason: "Unavailable" | "Invalid" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** The keys the runner reads, every tick. */
export const SettingKeys = {
  /**
   * The pause switch as a setting (`true` = red). Code reads and writes the switch through the `Semaphore` port only
   * (`SettingsWriter` refuses this key); plain SQL may still write this row, and it is stored as the semaphore.
   */
  paused: "scheduler.paused",
  /** `false` makes ticks skip like a pause; overrides the config's `enabled`. */
  enabled: "scheduler.enabled",
  /** The poll interval in seconds; overrides the config's `interval`. */
  intervalSeconds: "scheduler.interval_seconds"
} as const

/** The live switches, read together once per tick. */
export interface Switches {
  /** The pause switch, read as `Semaphore.isGreen` reads it (red = paused). */
  readonly paused: boolean
  /** `scheduler.enabled`, when set. */
  readonly enabled: Option.Option<boolean>
  /** `scheduler.interval_seconds`, when set to a positive integer. */
  readonly intervalSeconds: Option.Option<number>
}

/** The live settings. A key that is not set reads as `None`; a malformed value reads as unset. */
export class Settings extends Context.Tag("kairos/Settings")<
  Settings,
  {
    /** The three live switches in one read (one round trip in Postgres): the tick path reads nothing else. */
    readonly switches: Effect.Effect<Switches, SettingsError>
  }
>() {}

/**
 * Changes settings (tests, the CLI, an admin endpoint). `undefined` removes a key. The pause switch is not a setting
 * here: `scheduler.paused` is refused (`Invalid`); write it through the `Semaphore` port.
 */
export class SettingsWriter extends Context.Tag("kairos/SettingsWriter")<
  SettingsWriter,
  {
    readonly set: (key: string, value: boolean | number | string | undefined) => Effect.Effect<void, SettingsError>
  }
>() {}

/** The error `SettingsWriter.set` gives for the pause switch. */
export const pauseSwitchRefused = (): SettingsError =>
  new SettingsError({
    reason: "Invalid",
    message: `${SettingKeys.paused} is the pause switch: set it through the Semaphore port (setGreen / setRed)`
  })
