/**
 * The runner with items that wait for other items, on the memory adapters under the fake clock: a handler's return
 * value is recorded as its output and reaches what waited for it as `job.inputs`; a failure for good stops what
 * waits downstream.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Ref } from "effect"
import { QueueStore, Runner } from "../../src/index.js"
import { FakeClock, MemoryQueueStore } from "../../src/testing.js"
import { settle, testLayer } from "../support/runner.js"

describe("Runner with flows", () => {
  it.scoped("outputs reach downstream handlers as job.inputs, keyed by step key or by id", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const seen = yield* Ref.make<ReadonlyArray<unknown>>([])
      yield* runner.register("render", (job) => Effect.succeed({ pdf: `${job.payload}.pdf` }))
      yield* runner.register("capture", async () => ({ charge: "ch_1" }))
      yield* runner.register("quiet", () => undefined)
      yield* runner.register("send", (job) => Ref.update(seen, (xs) => [...xs, job.inputs]))
      const flow = yield* queue.enqueueFlow(
        [
          { key: "send", taskType: "send", after: ["render", "capture"] },
          { key: "render", taskType: "render", payload: "A-1" },
          { key: "capture", taskType: "capture" }
        ],
        new Date()
      )
      const quiet = yield* queue.enqueue({ taskType: "quiet" }, new Date())
      yield* queue.enqueue({ taskType: "send", after: [quiet.id, flow["render"]!] }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 5))
      expect(yield* Ref.get(seen)).toContainEqual({ render: { pdf: "A-1.pdf" }, capture: { charge: "ch_1" } })
      expect(yield* Ref.get(seen)).toContainEqual({ [quiet.id]: null, [flow["render"]!]: { pdf: "A-1.pdf" } })
      const log = yield* memory.processed
      expect(log.find((p) => p.queueItemId === flow["render"])!.output).toEqual({ pdf: "A-1.pdf" })
      // Nothing returned: no output recorded.
      expect(log.find((p) => p.queueItemId === quiet.id)!.output).toBeUndefined()
    }).pipe(Effect.provide(testLayer({ workers: 2, interval: "1 hour" })))
  )

  it.scoped("a step that fails for good: what waits for it never runs, and is logged once as not run", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const ran = yield* Ref.make(0)
      yield* runner.register("charge", () => Effect.fail(new Error("card declined")))
      yield* runner.register("send", () => Ref.update(ran, (n) => n + 1))
      const flow = yield* queue.enqueueFlow(
        [
          { key: "charge", taskType: "charge" },
          { key: "send", taskType: "send", after: ["charge"] },
          { key: "thank", taskType: "send", after: ["send"] }
        ],
        new Date()
      )
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 3))
      expect(yield* Ref.get(ran)).toBe(0)
      expect((yield* memory.processed).map((p) => [p.queueItemId, p.status, p.errorMsg])).toEqual([
        [flow["charge"], "error", "card declined"],
        [flow["send"], "error", `not run: it waited for item ${flow["charge"]}, which failed`],
        [flow["thank"], "error", `not run: it waited for item ${flow["send"]}, which did not run`]
      ])
      expect(yield* memory.items).toEqual([])
    }).pipe(Effect.provide(testLayer({ workers: 2, interval: "1 hour" })))
  )
})
