/**
 * Live switches the runner reads on every tick (from `scheduler_meta` in Postgres).
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"

/** Reading a setting failed. */
export class SettingsError extends Data.TaggedError("SettingsError")<{
  readonly reason: "Unavailable" | "Invalid" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** The keys the runner reads, every tick. */
export const SettingKeys = {
  /** `true` pauses every tick. The same switch as the `semaphore` (red = paused), stored as it, however written. */
  paused: "scheduler.paused",
  /** `false` makes ticks skip like a pause; overrides the config's `enabled`. */
  enabled: "scheduler.enabled",
  /** The poll interval in seconds; overrides the config's `interval`. */
  intervalSeconds: "scheduler.interval_seconds"
} as const

/** The live switches, read together once per tick. */
export interface Switches {
  /** `scheduler.paused` (the semaphore: red = paused). */
  readonly paused: boolean
  /** `scheduler.enabled`, when set. */
  readonly enabled: Option.Option<boolean>
  /** `scheduler.interval_seconds`, when set to a positive integer. */
  readonly intervalSeconds: Option.Option<number>
}

/** Typed settings. A key that is not set reads as `None`; a malformed value reads as unset. */
export class Settings extends Context.Tag("kairos/Settings")<
  Settings,
  {
    readonly getBool: (key: string) => Effect.Effect<Option.Option<boolean>, SettingsError>
    readonly getInt: (key: string) => Effect.Effect<Option.Option<number>, SettingsError>
    /** The three live switches in one read (one round trip in Postgres). */
    readonly switches: Effect.Effect<Switches, SettingsError>
  }
>() {}

/** Changes settings (tests, the CLI, an admin endpoint). `undefined` removes a key. */
export class SettingsWriter extends Context.Tag("kairos/SettingsWriter")<
  SettingsWriter,
  {
    readonly set: (key: string, value: boolean | number | string | undefined) => Effect.Effect<void, SettingsError>
  }
>() {}
