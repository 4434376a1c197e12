/**
 * The runner's copy of the flow limits (see ports/Limits): which of its task types are claimed under limits. Read
 * when a tick needs them and nothing says the last read still holds — a limit changed (a "settings" wake-up), the
 * wake-up subscription is not listening, or a poll interval passed — so a runner whose types have no limit pays one
 * small query per poll interval, never one per claim; a change reaches running workers at once (NOTIFY).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { FlowLimit } from "../domain/Limits.js"
import { Limits } from "../ports/Limits.js"
import { QueueStoreError } from "../ports/QueueStore.js"
import type { Subscription } from "../ports/WakeUps.js"

export interface LimitsView {
  /** The limits by task type, read again when the last read may be stale (see above). */
  readonly current: (
    nowMs: number,
    intervalMs: number
  ) => Effect.Effect<ReadonlyMap<string, FlowLimit>, QueueStoreError>
  /** The limits as last read (none before the first read). */
  readonly last: () => ReadonlyMap<string, FlowLimit>
  /** A limit may have changed: the next tick reads them. */
  readonly changed: () => void
  /** The runner's wake-up subscription: while it listens, a change is announced. */
  readonly listening: (subscription: Subscription) => void
}

const none: ReadonlyMap<string, FlowLimit> = new Map()

/** The view over the Limits port in context; without one, no type has limits and nothing is read. */
export const make: Effect.Effect<LimitsView> = Effect.map(Effect.serviceOption(Limits), (port) => {
  let subscription: Subscription | undefined
  let changes = 0
  let read = { atMs: Number.NEGATIVE_INFINITY, changes: -1 }
  let limits = none
  return {
    current: (nowMs, intervalMs) =>
      Option.match(port, {
        onNone: () => Effect.succeed(none),
        onSome: (port) => {
          if (subscription?.live() === true && read.changes === changes && nowMs - read.atMs < intervalMs)
            return Effect.succeed(limits)
          const at = changes
          return port.list.pipe(
            Effect.map((list) => {
              limits = new Map(list.map((l) => [l.taskType, l] as const))
              read = { atMs: nowMs, changes: at }
              return limits
            }),
            // A runner that cannot read its limits claims nothing: the tick fails, and is tried again.
            Effect.mapError(
              (e) =>
                new QueueStoreError({
                  reason: e.reason === "Unavailable" ? "Unavailable" : "Unknown",
                  message: e.message,
                  cause: e
                })
            )
          )
        }
      }),
    last: () => limits,
    changed: () => {
      changes++
    },
    listening: (s) => {
      subscription = s
    }
  }
})
