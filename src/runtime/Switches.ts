/**
 * The runner's live switches (paused, enabled, poll interval): the config supplies the defaults, settings override
 * them. A read costs a round trip before every claim, so the last one is used again while nothing can have changed
 * them unseen (see `current`).
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"
import type { Subscription } from "../ports/WakeUps.js"
import type { Settings, SettingsError } from "../ports/Settings.js"

/** The switches as a tick reads them. */
export interface LiveSwitches {
  readonly paused: boolean
  readonly enabled: boolean
  readonly interval: Duration.Duration
}

export interface Switches {
  /**
   * The switches for a tick: the last read while the store's subscription listens, announced no settings change
   * since, and it was read within the poll interval; read again otherwise. `force` (an explicit tick, or one after
   * "jobs") always reads.
   */
  readonly current: (force: boolean) => Effect.Effect<LiveSwitches, SettingsError>
  /** The switches as the last tick read them; undefined once a settings change was announced since. */
  readonly last: () => LiveSwitches | undefined
  /** A settings change was announced (or may have been missed): the next tick reads them. */
  readonly changed: () => void
  /** The store's wake-up subscription, once the runner started: while it listens, announced changes are seen. */
  readonly listening: (subscription: Subscription) => void
}

export const make = (config: SchedulerConfig, settings: Settings["Type"]): Switches => {
  let lastSwitches: LiveSwitches | undefined
  let subscription: Subscription | undefined
  let settingsChanges = 0
  let readAt = { atMs: Number.NEGATIVE_INFINITY, changes: -1 }
  const read = Effect.map(
    settings.switches,
    (s): LiveSwitches => ({
      paused: s.paused,
      enabled: Option.getOrElse(s.enabled, () => config.enabled),
      interval: Option.match(s.intervalSeconds, { onNone: () => config.interval, onSome: Duration.seconds })
    })
  )
  const current = (force: boolean) =>
    Effect.gen(function* () {
      const nowMs = yield* Clock.currentTimeMillis
      const last = lastSwitches
      if (
        !force &&
        last !== undefined &&
        subscription?.live() === true &&
        readAt.changes === settingsChanges &&
        nowMs - readAt.atMs < Duration.toMillis(last.interval)
      ) {
        return last
      }
      const changes = settingsChanges
      const switches = yield* read
      lastSwitches = switches
      readAt = { atMs: nowMs, changes }
      return switches
    })
  return {
    current,
    last: () => lastSwitches,
    changed: () => {
      settingsChanges++
      // The writer stops chaining claims until a tick has read the change.
      lastSwitches = undefined
    },
    listening: (s) => {
      subscription = s
    }
  }
}
