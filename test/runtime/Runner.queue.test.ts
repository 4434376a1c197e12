/**
 * The runner with queue items on the memory adapters, under the fake clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Metric, Ref } from "effect"
import { Metrics, QueueStore, Runner, Schedule, Semaphore } from "../../src/index.js"
import { FakeClock, FakeStore, MemoryDatabase, MemoryQueueStore } from "../../src/testing.js"
import { settle, testLayer } from "../support/runner.js"

describe("Runner with queue items", () => {
  it.scoped("runs items by priority, then insertion order, and records each execution", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      yield* runner.register("mail", (job) => Ref.update(seen, (xs) => [...xs, job.payload]))
      for (const [payload, priority] of [
        ["a", 0],
        ["b", 5],
        ["c", 0],
        ["d", 9]
      ] as const) {
        yield* queue.enqueue({ taskType: "mail", payload, priority }, new Date())
      }
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 4))
      expect(yield* Ref.get(seen)).toEqual(["d", "b", "a", "c"])
      expect((yield* memory.processed).every((p) => p.status === "ok")).toBe(true)
      expect(yield* memory.items).toEqual([])
    }).pipe(Effect.provide(testLayer({ workers: 1, interval: "1 hour" })))
  )

  it.scoped("a new item wakes an idle runner at once: no clock movement, a one-hour poll", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* runner.register("mail", () => undefined)
      yield* runner.start
      yield* FakeClock.advance("1 minute")
      yield* queue.enqueue({ taskType: "mail", payload: "x" }, new Date())
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
    }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped("an idle runner wakes when a dead owner's lease expires and takes the item back, not a poll later", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* runner.register("mail", () => undefined)
      yield* queue.enqueue({ taskType: "mail", payload: "x" }, yield* FakeClock.now)
      // Another instance claimed it and died: its lease runs until 00:00:30.
      const now = yield* FakeClock.now
      const ghost = yield* queue.claimBatch({
        limit: 1,
        taskTypes: ["mail"],
        owner: "ghost",
        now,
        leaseUntil: new Date(now.getTime() + 30_000),
        repeatAfter: now
      })
      expect(ghost.length).toBe(1)
      yield* runner.start
      yield* FakeClock.advance("29 seconds")
      expect(yield* memory.processed).toEqual([])
      yield* FakeClock.advance("2 seconds")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
    }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped("an idle runner wakes when a delayed item is due (run_after), not before and not a poll later", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* runner.register("mail", () => undefined)
      const t0 = (yield* FakeClock.now).getTime()
      yield* queue.enqueue({ taskType: "mail", payload: "later", runAfter: new Date(t0 + 90_000) }, new Date(t0))
      // Due after the other one, and enqueued while the runner sleeps: it must wake for the earlier one still.
      yield* runner.start
      yield* settle(Effect.succeed(true))
      yield* queue.enqueue({ taskType: "mail", payload: "sooner", runAfter: new Date(t0 + 30_000) }, new Date(t0))
      yield* FakeClock.advance("29 seconds")
      yield* settle(Effect.succeed(true))
      expect(yield* memory.processed).toEqual([])
      yield* FakeClock.advance("1 second")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      expect((yield* memory.processed)[0]!.payload).toBe("sooner")
      yield* FakeClock.advance("59 seconds")
      yield* settle(Effect.succeed(true))
      expect((yield* memory.processed).length).toBe(1)
      yield* FakeClock.advance("1 second")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
      expect((yield* memory.processed).map((p) => [p.payload, p.startedAt.getTime() - t0])).toEqual([
        ["sooner", 30_000],
        ["later", 90_000]
      ])
    }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped(
    "a task type's retry policy: a failing item runs again after each backoff (an hour's poll), then is given up",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const runner = yield* Runner.Runner
        const queue = yield* QueueStore
        const memory = yield* MemoryQueueStore.MemoryQueue
        const t0 = (yield* FakeClock.now).getTime()
        yield* runner.register("flaky", (job) => Effect.fail(new Error(`attempt ${job.attempt} failed`)), {
          retry: { attempts: 3, backoff: { type: "exponential", delay: "10 seconds" } }
        })
        yield* runner.register(
          "healing",
          (job) => (job.attempt < 2 ? Effect.fail(new Error("not yet")) : Effect.void),
          {
            retry: { attempts: 5, backoff: "30s" }
          }
        )
        yield* queue.enqueue({ taskType: "flaky", payload: "f" }, new Date(t0))
        yield* queue.enqueue({ taskType: "healing", payload: "h" }, new Date(t0))
        yield* runner.start
        yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
        // Backoffs of 10 s then 20 s for `flaky`; 30 s for `healing`, which succeeds at its second attempt.
        yield* FakeClock.advance("9 seconds")
        yield* settle(Effect.succeed(true))
        expect((yield* memory.processed).length).toBe(2)
        yield* FakeClock.advance("1 second")
        yield* settle(Effect.map(memory.processed, (p) => p.length === 3))
        yield* FakeClock.advance("20 seconds")
        yield* settle(Effect.map(memory.processed, (p) => p.length === 5))
        const log = (yield* memory.processed).map((p) => [p.taskType, p.status, (p.startedAt.getTime() - t0) / 1000])
        expect(log).toEqual([
          ["flaky", "error", 0],
          ["healing", "error", 0],
          ["flaky", "error", 10],
          ["flaky", "error", 30],
          ["healing", "ok", 30]
        ])
        // Three attempts spent: `flaky` is given up; nothing is left queued.
        expect(yield* memory.items).toEqual([])
      }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped("an invalid retry policy refuses the registration and names the field", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const error = yield* Effect.flip(runner.register("x", () => undefined, { retry: { attempts: 2.5 } }))
      expect(error).toMatchObject({ _tag: "InvalidRetryError", field: "attempts", value: 2.5 })
    }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped("a failing handler is an error row; max_runs 2 runs twice; unknown types stay queued", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* runner.register("flaky", (job) =>
        job.attempt === 1 ? Effect.fail(new Error("first fails")) : Effect.void
      )
      yield* queue.enqueue({ taskType: "flaky", payload: "x", maxRuns: 2 }, new Date())
      yield* queue.enqueue({ taskType: "nobody", payload: "y" }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
      expect((yield* memory.processed).map((p) => [p.status, p.errorMsg])).toEqual([
        ["error", "first fails"],
        ["ok", ""]
      ])
      expect((yield* memory.items).map((i) => i.taskType)).toEqual(["nobody"])
    }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
  )

  it.scoped("thread 0 runs one execution of a type at a time; a max_runs 3 thread 1 item runs three at once", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const running = yield* Ref.make<ReadonlyArray<string>>([])
      const gate = yield* Deferred.make<void>()
      yield* runner.register("t", (job) =>
        Effect.gen(function* () {
          yield* Ref.update(running, (xs) => [...xs, job.payload])
          yield* Deferred.await(gate)
        })
      )
      yield* queue.enqueue({ taskType: "t", payload: "seq1" }, new Date())
      yield* queue.enqueue({ taskType: "t", payload: "seq2" }, new Date())
      yield* queue.enqueue({ taskType: "t", payload: "conc", maxRuns: 3, thread: 1 }, new Date())
      yield* runner.start
      yield* settle(Effect.map(Ref.get(running), (xs) => xs.length === 4))
      expect([...(yield* Ref.get(running))].sort()).toEqual(["conc", "conc", "conc", "seq1"])
      yield* Deferred.succeed(gate, undefined)
      yield* settle(Effect.map(memory.processed, (p) => p.length === 5))
      expect((yield* memory.processed).filter((p) => p.payload === "conc").length).toBe(3)
    }).pipe(Effect.provide(testLayer({ workers: 8, interval: "1 hour" })))
  )

  it.scoped("the semaphore set to red stops new starts of both kinds; green resumes", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const store = yield* FakeStore.FakeStore
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      const semaphore = yield* Semaphore
      yield* semaphore.setRed
      yield* runner.start
      yield* queue.enqueue({ taskType: "t", payload: "x" }, new Date())
      yield* FakeClock.advance("5 minutes")
      expect((yield* memory.processed).length).toBe(0)
      expect((yield* store.runsOf("j")).length).toBe(0)
      yield* semaphore.setGreen
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      yield* FakeClock.advance("1 minute")
      expect((yield* store.runsOf("j")).length).toBeGreaterThanOrEqual(1)
    }).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
  )

  it.scoped("jobs and queue items share the worker budget", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const store = yield* FakeStore.FakeStore
      const gate = yield* Deferred.make<void>()
      yield* runner.register("t", () => Deferred.await(gate))
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("1 minute")
      expect(yield* runner.running).toBe(1)
      for (let i = 0; i < 5; i++) yield* queue.enqueue({ taskType: "t", payload: String(i), thread: 1 }, new Date())
      yield* settle(Effect.map(runner.running, (n) => n === 3))
      expect(yield* runner.running).toBe(3)
      expect((yield* store.runsOf("j")).length).toBe(1)
      yield* Deferred.succeed(gate, undefined)
    }).pipe(Effect.provide(testLayer({ workers: 3, interval: "1 hour" })))
  )
})

describe("Runner queue limits and workers", () => {
  it.scoped("the rate limit caps the items started per poll interval, however often the runner ticks", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const gate = yield* Deferred.make<void>()
      yield* runner.register("t", () => Deferred.await(gate))
      for (let i = 0; i < 10; i++) yield* queue.enqueue({ taskType: "t", payload: String(i), thread: 1 }, new Date())
      expect(yield* runner.tick).toMatchObject({ started: 2, queued: 2 })
      // A tick right after, or one woken by finished executions, starts nothing until the interval has passed.
      expect(yield* runner.tick).toMatchObject({ started: 0, queued: 0 })
      yield* Deferred.succeed(gate, undefined)
      yield* settle(Effect.map(runner.running, (n) => n === 0))
      expect(yield* runner.tick).toMatchObject({ started: 0, queued: 0 })
      yield* FakeClock.advance("59 minutes")
      expect(yield* runner.tick).toMatchObject({ started: 0, queued: 0 })
      yield* FakeClock.advance("1 minute")
      expect(yield* runner.tick).toMatchObject({ started: 2, queued: 2 })
      yield* settle(Effect.map(runner.running, (n) => n === 0))
    }).pipe(Effect.provide(testLayer({ workers: 10, rateLimit: 2, interval: "1 hour" })))
  )

  it.scoped("a started runner registers itself and its task types, heartbeats, and leaves at stop", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const db = yield* MemoryDatabase.MemoryDatabase
      // The registered workers live at `now`, as scheduler_workers is read.
      const liveWorkers = (now: Date) =>
        Effect.sync(() => [...db.workers.values()].filter((w) => w.liveUntil.getTime() > now.getTime()))
      yield* runner.register("a", () => undefined)
      yield* runner.register("b", () => undefined)
      yield* runner.start
      const at = (iso: string) => new Date(Date.parse(iso))
      yield* settle(Effect.map(liveWorkers(at("2026-01-01T00:00:00Z")), (ws) => ws.length === 1))
      const live = yield* liveWorkers(at("2026-01-01T00:00:00Z"))
      expect(live.map((w) => [w.id, [...w.taskTypes].sort(), w.heartbeatAt.toISOString()])).toEqual([
        [runner.owner, ["a", "b"], "2026-01-01T00:00:00.000Z"]
      ])
      // Live for three heartbeats.
      expect(live[0]!.liveUntil.toISOString()).toBe("2026-01-01T00:30:00.000Z")
      // The heartbeat has a timer of its own: with a one-day poll, it still refreshes every 10 minutes.
      yield* FakeClock.advance("25 minutes")
      const later = yield* liveWorkers(at("2026-01-01T00:45:00Z"))
      expect(later.map((w) => w.heartbeatAt.toISOString())).toEqual(["2026-01-01T00:20:00.000Z"])
      yield* runner.stop
      expect(yield* liveWorkers(at("2026-01-01T00:25:00Z"))).toEqual([])
    }).pipe(Effect.provide(testLayer({ interval: "1 day", heartbeatInterval: "10 minutes" })))
  )
  it.scoped("retention: a started runner prunes the execution log to keepLast at start, then every `every`", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* runner.register("mail", () => undefined)
      for (const payload of ["a", "b", "c", "d", "e"]) yield* queue.enqueue({ taskType: "mail", payload }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 5))
      // The first round ran at start, before anything was logged: five rows until the next round, an hour later.
      yield* FakeClock.advance("59 minutes")
      expect((yield* memory.processed).length).toBe(5)
      yield* FakeClock.advance("1 minute")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
      expect((yield* memory.processed).map((p) => p.payload)).toEqual(["d", "e"])
    }).pipe(
      Effect.provide(testLayer({ interval: "1 day", retention: { processedItems: { keepLast: 2 }, every: "1 hour" } }))
    )
  )
  it.scoped(
    "metrics count executions by kind, task type and outcome; an Effect handler runs in a kairos.execute span",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const runner = yield* Runner.Runner
        const queue = yield* QueueStore
        const memory = yield* MemoryQueueStore.MemoryQueue
        // The registry is global: task types of this test's own.
        const ok = `metrics-ok-${Math.random().toString(36).slice(2)}`
        const bad = `metrics-bad-${Math.random().toString(36).slice(2)}`
        const spans = yield* Ref.make<ReadonlyArray<unknown>>([])
        yield* runner.register(ok, () =>
          Effect.flatMap(Effect.currentSpan, (span) =>
            Ref.update(spans, (xs) => [...xs, [span.name, span.attributes.get("kairos.task_type")]])
          ).pipe(Effect.orDie)
        )
        yield* runner.register(bad, () => {
          throw new Error("no")
        })
        for (let i = 0; i < 3; i++) yield* queue.enqueue({ taskType: ok, payload: "" }, new Date())
        yield* queue.enqueue({ taskType: bad, payload: "" }, new Date())
        yield* runner.start
        yield* settle(Effect.map(memory.processed, (p) => p.length === 4))
        const count = (taskType: string, outcome: string) =>
          Effect.map(
            Metric.value(
              Metrics.executions.pipe(
                Metric.tagged("kind", "queue"),
                Metric.tagged("task_type", taskType),
                Metric.tagged("outcome", outcome)
              )
            ),
            (c) => c.count
          )
        expect(yield* count(ok, "ok")).toBe(3)
        expect(yield* count(ok, "failed")).toBe(0)
        expect(yield* count(bad, "failed")).toBe(1)
        const durations = yield* Metric.value(
          Metrics.executionDuration.pipe(Metric.tagged("kind", "queue"), Metric.tagged("task_type", ok))
        )
        expect(durations.count).toBe(3)
        expect(yield* Ref.get(spans)).toEqual([
          ["kairos.execute", ok],
          ["kairos.execute", ok],
          ["kairos.execute", ok]
        ])
      }).pipe(Effect.provide(testLayer({ workers: 1, interval: "1 hour" })))
  )
})
