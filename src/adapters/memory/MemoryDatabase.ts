/**
 * The memory adapters' database: what the Postgres adapters share through their tables, the memory ones share
 * through this object — the `scheduler_meta` rows (with Postgres's rules: a `scheduler.paused` row is stored as the
 * semaphore row), the `scheduler_workers` rows, and the notifications (every change of `scheduler_meta` and every new
 * queue item notifies the listeners, as the tables' NOTIFY triggers do). Build the memory ports over one of it
 * (`Layer.provideMerge(MemoryDatabase.layer())`) and they agree as the Postgres ones do over one schema.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { FlowLimit } from "../../domain/Limits.js"
import { SEMAPHORE_KEY, semaphoreFor, settingText } from "../../domain/SettingValues.js"
import { SettingKeys } from "../../ports/Settings.js"
import type { WakeTopic } from "../../ports/WakeUps.js"
import type { WorkerInfo } from "../../ports/WorkerRegistry.js"

/** The shared in-memory database. */
export class MemoryDatabase extends Context.Tag("kairos/MemoryDatabase")<
  MemoryDatabase,
  {
    /** The stored text of a `scheduler_meta` key. */
    readonly get: (key: string) => string | undefined
    /**
     * Writes a `scheduler_meta` key (`undefined` deletes it) and notifies "settings", as an UPDATE of the table
     * does; Left with a message when `scheduler.paused` is not a boolean.
     */
    readonly set: (key: string, value: boolean | number | string | undefined) => Either.Either<void, string>
    /** The `scheduler_workers` rows, by id. */
    readonly workers: Map<string, WorkerInfo>
    /** The `queue_limits` rows, by task type (MemoryLimits writes them; the queue's claim obeys them). */
    readonly limits: Map<string, FlowLimit>
    /** The `kairos_limit_state` rows, by task type: the current rate window and its starts, the rotation's cursor. */
    readonly limitState: Map<string, LimitState>
    /** Notifies every listener, as a NOTIFY on the schema's channel does. */
    readonly notify: (topic: WakeTopic) => void
    /** Calls `listener` on every notification, until the scope closes. */
    readonly listen: (listener: (topic: WakeTopic) => void) => Effect.Effect<void, never, Scope.Scope>
  }
>() {}

/** A limited type's state, as its claims leave it. */
export interface LimitState {
  windowStart: number | null
  windowStarts: number
  groupCursor: string | null
  /** Under a rate per group: each group's starts in the window `windowStart` (`kairos_limit_group_windows`). */
  groupStarts: ReadonlyMap<string, number>
}

/** A fresh database, its `scheduler_meta` starting from `initial` (written with the same rules as `set`). */
export const make = (initial: Readonly<Record<string, boolean | number | string>> = {}): MemoryDatabase["Type"] => {
  const rows = new Map<string, string>()
  const listeners = new Set<(topic: WakeTopic) => void>()
  const notify = (topic: WakeTopic) => {
    for (const listener of listeners) listener(topic)
  }
  const set = (key: string, value: boolean | number | string | undefined): Either.Either<void, string> => {
    if (key === SettingKeys.paused) {
      if (value === undefined) rows.delete(SEMAPHORE_KEY)
      else {
        const semaphore = semaphoreFor(settingText(value))
        if (Option.isNone(semaphore))
          return Either.left(`scheduler.paused must be true or false (got ${String(value)})`)
        rows.set(SEMAPHORE_KEY, semaphore.value)
      }
    } else if (value === undefined) rows.delete(key)
    else rows.set(key, settingText(value))
    notify("settings")
    return Either.right(undefined)
  }
  for (const [key, value] of Object.entries(initial)) set(key, value)
  return MemoryDatabase.of({
    get: (key) => rows.get(key === SettingKeys.paused ? SEMAPHORE_KEY : key),
    set,
    workers: new Map(),
    limits: new Map(),
    limitState: new Map(),
    notify,
    listen: (listener) =>
      Effect.acquireRelease(
        Effect.sync(() => listeners.add(listener)),
        () => Effect.sync(() => listeners.delete(listener))
      ).pipe(Effect.asVoid)
  })
}

/** Provides a fresh in-memory database. */
export const layer = (initial: Readonly<Record<string, boolean | number | string>> = {}): Layer.Layer<MemoryDatabase> =>
  Layer.sync(MemoryDatabase, () => make(initial))
