/**
 * The WorkerRegistry contract, run against the memory registry and the Postgres one. The port only writes: the
 * suite reads the registered workers through an inspector of each adapter's own.
 */
import { expect, layer } from "@effect/vitest"
import { Context, Effect, type Layer } from "effect"
import { type WorkerInfo, WorkerRegistry } from "../../src/index.js"

/** The workers live at `now` (their `liveUntil` later), by id. */
export class WorkerInspector extends Context.Tag("kairos/test/WorkerInspector")<
  WorkerInspector,
  { readonly live: (now: Date) => Effect.Effect<ReadonlyArray<WorkerInfo>> }
>() {}

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
const id = (label: string) => `${label}-${Math.random().toString(36).slice(2, 10)}`
const liveAt = (now: Date) => Effect.flatMap(WorkerInspector, (inspector) => inspector.live(now))

export const suite = (name: string, registryLayer: Layer.Layer<WorkerRegistry | WorkerInspector, unknown>) =>
  layer(registryLayer, { timeout: "60 seconds", excludeTestServices: true })(
    `WorkerRegistry contract: ${name}`,
    (it) => {
      it.effect("workers register with their task types, heartbeat and leave", () =>
        Effect.gen(function* () {
          const registry = yield* WorkerRegistry
          const worker = id("worker")
          yield* registry.register(worker, ["a", "b"], at(0), at(30))
          yield* registry.register(worker, ["a", "b", "c"], at(10), at(40))
          const live = (yield* liveAt(at(35))).filter((w) => w.id === worker)
          expect(
            live.map((w) => [
              w.taskTypes,
              w.startedAt.toISOString(),
              w.heartbeatAt.toISOString(),
              w.liveUntil.toISOString()
            ])
          ).toEqual([[["a", "b", "c"], at(0).toISOString(), at(10).toISOString(), at(40).toISOString()]])
          yield* registry.unregister(worker)
          expect((yield* liveAt(at(0))).filter((w) => w.id === worker)).toEqual([])
        })
      )

      it.effect("a worker is live until its liveUntil, which each heartbeat moves", () =>
        Effect.gen(function* () {
          const registry = yield* WorkerRegistry
          const [short, long] = [id("short"), id("long")]
          yield* registry.register(short, ["a"], at(0), at(10))
          yield* registry.register(long, ["a"], at(0), at(100))
          const ids = (s: number) =>
            Effect.map(liveAt(at(s)), (ws) => ws.map((w) => w.id).filter((w) => w === short || w === long))
          expect((yield* ids(9)).sort()).toEqual([short, long].sort())
          // Live means liveUntil is later than now: at liveUntil itself the worker is gone.
          expect(yield* ids(10)).toEqual([long])
          expect(yield* ids(99)).toEqual([long])
          expect(yield* ids(100)).toEqual([])
          // A heartbeat extends it, whatever the heartbeat's own time.
          yield* registry.register(short, ["a"], at(50), at(200))
          expect(yield* ids(150)).toEqual([short])
          yield* registry.unregister(short)
          yield* registry.unregister(long)
          // Unregistering a worker that is not there is no error.
          yield* registry.unregister(short)
        })
      )
    }
  )
