/**
 * Wake-ups in memory: the MemoryDatabase's notifications (a new item, a change of `scheduler_meta`). Nothing can be
 * missed in memory, so a subscription is always live.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { type Subscription, WakeUps } from "../../ports/WakeUps.js"
import { MemoryDatabase } from "./MemoryDatabase.js"

const live: Subscription = { live: () => true }

/** The wake-ups over the MemoryDatabase in context. */
export const make: Effect.Effect<WakeUps["Type"], never, MemoryDatabase> = Effect.map(MemoryDatabase, (db) =>
  WakeUps.of({ subscribe: (wake) => Effect.as(db.listen(wake), live) })
)

/** The wake-ups as a layer over the MemoryDatabase in context. */
export const layer: Layer.Layer<WakeUps, never, MemoryDatabase> = Layer.effect(WakeUps, make)
