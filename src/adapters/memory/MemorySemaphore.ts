/**
 * The pause switch in memory: the semaphore row of the MemoryDatabase's `scheduler_meta`, read as the Postgres
 * adapter reads its row. Every write notifies the listeners ("settings").
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { GREEN, isGreen, RED, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import { Semaphore, type SemaphoreOptions } from "../../ports/Semaphore.js"
import { MemoryDatabase } from "./MemoryDatabase.js"

/** The switch over the MemoryDatabase in context. */
export const make: Effect.Effect<Semaphore["Type"], never, MemoryDatabase> = Effect.map(MemoryDatabase, (db) =>
  Semaphore.of({
    isGreen: Effect.sync(() => isGreen(db.get(SEMAPHORE_KEY))),
    setGreen: Effect.sync(() => void db.set(SEMAPHORE_KEY, GREEN)),
    setRed: Effect.sync(() => void db.set(SEMAPHORE_KEY, RED))
  })
)

/** Writes `red` when the database has no switch row yet; leaves one that exists (`startGreen: false`). */
export const startRed: Effect.Effect<void, never, MemoryDatabase> = Effect.map(MemoryDatabase, (db) => {
  if (db.get(SEMAPHORE_KEY) === undefined) db.set(SEMAPHORE_KEY, RED)
})

/** The switch as a layer over the MemoryDatabase in context; with `startGreen: false`, no row starts red. */
export const layer = (options: SemaphoreOptions = {}): Layer.Layer<Semaphore, never, MemoryDatabase> =>
  Layer.effect(Semaphore, options.startGreen === false ? Effect.zipRight(startRed, make) : make)
