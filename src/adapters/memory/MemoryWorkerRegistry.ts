/**
 * The worker registry in memory: the MemoryDatabase's `scheduler_workers` rows (tests read them there).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { WorkerRegistry } from "../../ports/WorkerRegistry.js"
import { MemoryDatabase } from "./MemoryDatabase.js"

/** The registry over the MemoryDatabase in context. */
export const make: Effect.Effect<WorkerRegistry["Type"], never, MemoryDatabase> = Effect.map(MemoryDatabase, (db) =>
  WorkerRegistry.of({
    register: (id, taskTypes, now, liveUntil) =>
      Effect.sync(() => {
        const existing = db.workers.get(id)
        db.workers.set(id, {
          id,
          taskTypes: [...taskTypes],
          startedAt: existing?.startedAt ?? now,
          heartbeatAt: now,
          liveUntil
        })
      }),
    unregister: (id) => Effect.sync(() => void db.workers.delete(id))
  })
)

/** The registry as a layer over the MemoryDatabase in context. */
export const layer: Layer.Layer<WorkerRegistry, never, MemoryDatabase> = Layer.effect(WorkerRegistry, make)
