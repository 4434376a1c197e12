/**
 * The runner under flow limits, on the memory adapters and the fake clock: a limit holds while handlers run, and a
 * change reaches the running runner at once (its wake-up), with no clock movement.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Ref } from "effect"
import { Limits, QueueStore, Runner } from "../../src/index.js"
import { FakeClock, MemoryQueueStore } from "../../src/testing.js"
import { settle, testLayer } from "../support/runner.js"

describe("Runner under flow limits", () => {
  it.scoped("a concurrency limit holds while handlers run; raising it starts more at once", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const limits = yield* Limits
      const memory = yield* MemoryQueueStore.MemoryQueue
      const gate = yield* Deferred.make<void>()
      const running = yield* Ref.make(0)
      const most = yield* Ref.make(0)
      yield* runner.register("pay", () =>
        Effect.gen(function* () {
          const now = yield* Ref.updateAndGet(running, (n) => n + 1)
          yield* Ref.update(most, (m) => Math.max(m, now))
          yield* Deferred.await(gate)
          yield* Ref.update(running, (n) => n - 1)
        })
      )
      yield* limits.set({ taskType: "pay", concurrency: 2 })
      yield* queue.enqueueMany(
        Array.from({ length: 6 }, (_, i) => ({ taskType: "pay", payload: `${i}`, thread: 1 })),
        new Date()
      )
      yield* runner.start
      yield* settle(Effect.map(Ref.get(running), (n) => n === 2))
      // A few more rounds: still two.
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      expect(yield* Ref.get(running)).toBe(2)
      // Raised live: the settings wake-up makes the runner read it, and two more start, with the clock still.
      yield* limits.set({ taskType: "pay", concurrency: 4 })
      yield* settle(Effect.map(Ref.get(running), (n) => n === 4))
      yield* Deferred.succeed(gate, undefined)
      yield* settle(Effect.map(memory.processed, (p) => p.length === 6))
      expect(yield* Ref.get(most)).toBe(4)
    }).pipe(Effect.provide(testLayer({ workers: 8, interval: "1 hour" })))
  )

  it.scoped("1 per group: each group's items run in order, the groups side by side", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const limits = yield* Limits
      const memory = yield* MemoryQueueStore.MemoryQueue
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* runner.register("event", (job) => Ref.update(seen, (xs) => [...xs, job.payload]))
      yield* limits.set({ taskType: "event", concurrency: 1, perGroup: true })
      const inputs = ["a", "b", "c"].flatMap((g) =>
        Array.from({ length: 4 }, (_, i) => ({ taskType: "event", payload: `${g}${i}`, group: g }))
      )
      yield* queue.enqueueMany(inputs, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 12))
      const order = yield* Ref.get(seen)
      for (const g of ["a", "b", "c"])
        expect(order.filter((p) => p.startsWith(g))).toEqual([0, 1, 2, 3].map((i) => `${g}${i}`))
    }).pipe(Effect.provide(testLayer({ workers: 8, interval: "1 hour" })))
  )

  it.scoped("a handler reads its item's group on the job (null without one, and for scheduled jobs)", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const seen = yield* Ref.make<Record<string, string | null>>({})
      yield* runner.register("event", (job) => Ref.update(seen, (xs) => ({ ...xs, [job.payload]: job.group })))
      yield* queue.enqueueMany(
        [
          { taskType: "event", payload: "grouped", group: "customer-42" },
          { taskType: "event", payload: "alone" }
        ],
        new Date()
      )
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
      expect(yield* Ref.get(seen)).toEqual({ grouped: "customer-42", alone: null })
    }).pipe(Effect.provide(testLayer({ workers: 8, interval: "1 hour" })))
  )

  it.scoped("a rate per group: each group starts N per window; the runner starts the rest when the window ends", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const limits = yield* Limits
      const memory = yield* MemoryQueueStore.MemoryQueue
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* runner.register("sync", (job) => Ref.update(seen, (xs) => [...xs, job.payload]))
      yield* limits.set({ taskType: "sync", rate: 2, per: "1 minute", ratePerGroup: true })
      yield* queue.enqueueMany(
        ["a", "b"].flatMap((g) => [0, 1, 2].map((i) => ({ taskType: "sync", payload: `${g}${i}`, group: g }))),
        new Date()
      )
      yield* runner.start
      // Two of each group in the first window, side by side; then nothing, however many rounds go by.
      yield* settle(Effect.map(memory.processed, (p) => p.length === 4))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      expect([...(yield* Ref.get(seen))].sort()).toEqual(["a0", "a1", "b0", "b1"])
      // The window ends (its poll interval is an hour): the runner looks again then, and each group's third starts.
      yield* FakeClock.advance("1 minute")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 6))
      expect((yield* Ref.get(seen)).slice(4).sort()).toEqual(["a2", "b2"])
    }).pipe(Effect.provide(testLayer({ workers: 8, interval: "1 hour" })))
  )
})
