/**
 * Flow control's limits in memory: the MemoryDatabase's `queue_limits` rows, which the memory queue's claim obeys.
 * A change notifies "settings", as the table's NOTIFY trigger does in Postgres.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import { parse } from "../../domain/Limits.js"
import { Limits } from "../../ports/Limits.js"
import { MemoryDatabase } from "./MemoryDatabase.js"

/** The limits over the MemoryDatabase in context. */
export const make: Effect.Effect<Limits["Type"], never, MemoryDatabase> = Effect.map(MemoryDatabase, (db) =>
  Limits.of({
    list: Effect.sync(() => [...db.limits.values()].sort((a, b) => (a.taskType < b.taskType ? -1 : 1))),
    set: (input) =>
      Either.match(parse(input), {
        onLeft: (e) => Effect.fail(e),
        onRight: (limit) =>
          Effect.sync(() => {
            db.limits.set(limit.taskType, limit)
            db.notify("settings")
            return limit
          })
      }),
    clear: (taskType) =>
      Effect.sync(() => {
        const had = db.limits.delete(taskType)
        db.notify("settings")
        return had
      })
  })
)

/** The limits as a layer over the MemoryDatabase in context. */
export const layer: Layer.Layer<Limits, never, MemoryDatabase> = Layer.effect(Limits, make)
