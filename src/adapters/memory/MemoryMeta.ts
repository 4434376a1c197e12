/**
 * `scheduler_meta` in memory: the key/value rows that the memory Settings and the memory queue's semaphore share,
 * with Postgres's rules (a `scheduler.paused` write is stored as the semaphore row) and its wake-ups (every change
 * calls the subscribers, as the table's NOTIFY trigger does).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { SEMAPHORE_KEY, semaphoreFor, settingText } from "../../domain/SettingValues.js"
import { SettingKeys } from "../../ports/Settings.js"

/** The shared in-memory `scheduler_meta`. */
export class MemoryMeta extends Context.Tag("kairos/MemoryMeta")<
  MemoryMeta,
  {
    /** The stored text of a key. */
    readonly get: (key: string) => string | undefined
    /** Writes a key (`undefined` deletes it); Left with a message when `scheduler.paused` is not a boolean. */
    readonly set: (key: string, value: boolean | number | string | undefined) => Either.Either<void, string>
    /** Calls `listener` after every change, until the scope closes. */
    readonly subscribe: (listener: () => void) => Effect.Effect<void, never, Scope.Scope>
  }
>() {}

/** A fresh `scheduler_meta`, starting from `initial` (written with the same rules as `set`). */
export const make = (initial: Readonly<Record<string, boolean | number | string>> = {}): MemoryMeta["Type"] => {
  const rows = new Map<string, string>()
  const listeners = new Set<() => void>()
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
    for (const listener of listeners) listener()
    return Either.right(undefined)
  }
  for (const [key, value] of Object.entries(initial)) set(key, value)
  return MemoryMeta.of({
    get: (key) => rows.get(key === SettingKeys.paused ? SEMAPHORE_KEY : key),
    set,
    subscribe: (listener) =>
      Effect.acquireRelease(
        Effect.sync(() => listeners.add(listener)),
        () => Effect.sync(() => listeners.delete(listener))
      ).pipe(Effect.asVoid)
  })
}

/** Provides a fresh in-memory `scheduler_meta`. */
export const layer = (initial: Readonly<Record<string, boolean | number | string>> = {}): Layer.Layer<MemoryMeta> =>
  Layer.sync(MemoryMeta, () => make(initial))
