/**
 * Live switches (pause, enabled, poll interval), missed slots, overlap, worker capacity and graceful stop.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber, Layer, Ref } from "effect"
import {
  QueueStore,
  Runner,
  Schedule,
  Semaphore,
  SettingKeys,
  Settings,
  WakeUps,
  WorkerRegistry
} from "../../src/index.js"
import {
  FakeClock,
  FakeStore,
  MemoryDatabase,
  MemoryQueueStore,
  MemorySemaphore,
  MemorySettings,
  MemoryWakeUps,
  MemoryWorkerRegistry,
  TestRunner
} from "../../src/testing.js"
import { captureLogs, settle, stopUnderFakeClock, testLayer } from "../support/runner.js"

const iso = (d: Date | null) => d?.toISOString()

describe("Runner live settings", () => {
  it.scoped("no run starts while paused; runs resume after unpause", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const semaphore = yield* Semaphore
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T00:03:30Z")
      expect((yield* store.runsOf("j")).length).toBe(3)
      yield* semaphore.setRed
      yield* FakeClock.advanceTo("2026-01-01T00:10:30Z")
      const whilePaused = yield* store.runsOf("j")
      expect(whilePaused.length).toBe(3)
      yield* semaphore.setGreen
      yield* FakeClock.advanceTo("2026-01-01T00:15:30Z")
      const runs = yield* store.runsOf("j")
      expect(runs.length).toBeGreaterThan(3)
      // Nothing started inside the paused window.
      for (const r of runs) {
        const t = r.startedAt!.getTime()
        expect(t <= Date.parse("2026-01-01T00:03:30Z") || t >= Date.parse("2026-01-01T00:10:30Z")).toBe(true)
      }
      // Unpausing wakes the runner at once (00:10:30): one run for the latest missed slot, then every minute
      // again, no storm: no run for 00:04 … 00:09.
      expect(runs[3]!.startedAt?.toISOString()).toBe("2026-01-01T00:10:30.000Z")
      expect(runs.slice(3).map((r) => iso(r.scheduledFor))).toEqual([
        "2026-01-01T00:10:00.000Z",
        "2026-01-01T00:11:00.000Z",
        "2026-01-01T00:12:00.000Z",
        "2026-01-01T00:13:00.000Z",
        "2026-01-01T00:14:00.000Z",
        "2026-01-01T00:15:00.000Z"
      ])
    }).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
  )

  it.scoped("scheduler.enabled = false makes ticks do nothing until it is true again", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const settings = yield* MemorySettings.MemorySettings
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* settings.set(SettingKeys.enabled, false)
      yield* runner.start
      yield* FakeClock.advance("5 minutes")
      expect((yield* store.runsOf("j")).length).toBe(0)
      expect(yield* runner.tick).toMatchObject({ skipped: "disabled", started: 0 })
      yield* settings.set(SettingKeys.enabled, true)
      yield* FakeClock.advance("2 minutes")
      // Re-enabling wakes the runner at once (00:05): it runs the latest slot, then 00:06 and 00:07.
      expect((yield* store.runsOf("j")).map((r) => iso(r.scheduledFor))).toEqual([
        "2026-01-01T00:05:00.000Z",
        "2026-01-01T00:06:00.000Z",
        "2026-01-01T00:07:00.000Z"
      ])
    }).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
  )

  it.scoped("scheduler.interval_seconds changed at runtime changes the tick spacing", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const ticks = yield* TickCounter
      const settings = yield* MemorySettings.MemorySettings
      const runner = yield* Runner.Runner
      yield* runner.start
      yield* FakeClock.advance("10 minutes")
      // Ticks at 0, 1, …, 10 minutes with the 60 s interval.
      expect(yield* Ref.get(ticks)).toBe(11)
      yield* settings.set(SettingKeys.intervalSeconds, 10)
      yield* FakeClock.advance("10 minutes")
      // The change wakes the runner at once (00:10), which reads the new value; from then on every 10 s:
      // 00:10:10 … 00:20:00 is 60 more.
      expect(yield* Ref.get(ticks)).toBe(11 + 1 + 60)
    }).pipe(Effect.provide(countingLayer({ interval: "1 minute" })))
  )
})

class TickCounter extends Context.Tag("test/TickCounter")<TickCounter, Ref.Ref<number>>() {}
/** Claims made: all of them, and those of ticks (the others are made along with a write of results). */
class ClaimCounter extends Context.Tag("test/ClaimCounter")<
  ClaimCounter,
  Ref.Ref<{ readonly all: number; readonly ticks: number }>
>() {}

/**
 * Like testLayer, with a Settings that counts how often the switches are read and a memory queue that counts its
 * claims; `live` is what its subscription says of itself (absent: the memory queue's own answer, always live).
 */
const countingLayer = (config: Parameters<typeof testLayer>[0], live?: boolean) => {
  const counting = Layer.effectContext(
    Effect.gen(function* () {
      const inner = yield* Settings
      const handle = yield* MemorySettings.MemorySettings
      const count = yield* Ref.make(0)
      const settings = Settings.of({
        ...inner,
        switches: Effect.zipRight(
          Ref.update(count, (n) => n + 1),
          inner.switches
        )
      })
      return Context.make(Settings, settings).pipe(
        Context.add(MemorySettings.MemorySettings, handle),
        Context.add(TickCounter, count)
      )
    })
  ).pipe(Layer.provide(MemorySettings.layerFromDatabase))
  const queue = Layer.effectContext(
    Effect.gen(function* () {
      const inner = yield* QueueStore
      const claims = yield* Ref.make({ all: 0, ticks: 0 })
      const store = QueueStore.of({
        ...inner,
        claimBatch: (options) =>
          Effect.zipRight(
            Ref.update(claims, (n) => ({ all: n.all + 1, ticks: n.ticks + 1 })),
            inner.claimBatch(options)
          ),
        // A claim along with a write of results: it reads no switches (the last tick's are trusted, see Runner).
        recordAndClaim: (results, options) =>
          Effect.zipRight(
            Ref.update(claims, (n) => (options.limit > 0 ? { ...n, all: n.all + 1 } : n)),
            inner.recordAndClaim(results, options)
          )
      })
      return Context.make(QueueStore, store).pipe(Context.add(ClaimCounter, claims))
    })
  ).pipe(Layer.provide(MemoryQueueStore.layerFromDatabase))
  const wakeUps = Layer.effect(
    WakeUps,
    Effect.map(MemoryWakeUps.make, (inner) =>
      WakeUps.of({
        subscribe: (wake) =>
          live === undefined ? inner.subscribe(wake) : Effect.as(inner.subscribe(wake), { live: () => live })
      })
    )
  )
  return Runner.layer(config).pipe(
    Layer.provideMerge(
      Layer.mergeAll(FakeStore.layer, counting, queue, wakeUps, MemorySemaphore.layer(), MemoryWorkerRegistry.layer)
    ),
    Layer.provideMerge(MemoryDatabase.layer())
  )
}

describe("Runner settings reads", () => {
  // A tick claims only after reading the switches; while the store's subscription listens, every change is
  // announced, so the last read is trusted until one is (or the poll interval passes).
  const drainAndPause = (live: boolean) =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const reads = yield* TickCounter
      const claims = yield* ClaimCounter
      const queue = yield* QueueStore
      const semaphore = yield* Semaphore
      const runner = yield* Runner.Runner
      let handled = 0
      yield* runner.register("t", () => {
        handled++
      })
      const items = (n: number) => Array.from({ length: n }, () => ({ taskType: "t", thread: 1 as const }))
      yield* queue.enqueueMany(items(40), yield* FakeClock.now)
      yield* runner.start
      yield* settle(Effect.sync(() => handled === 40))
      const drained = { reads: yield* Ref.get(reads), claims: yield* Ref.get(claims) }
      // A pause while busy: announced, read at the next tick, which claims nothing more.
      yield* semaphore.setRed
      yield* queue.enqueueMany(items(5), yield* FakeClock.now)
      yield* FakeClock.advance("1 second")
      const paused = { handled, reads: yield* Ref.get(reads) }
      yield* semaphore.setGreen
      yield* settle(Effect.sync(() => handled === 45))
      return { drained, paused }
    })

  it.scoped("while the subscription listens, a busy runner reads the switches once, and again after a change", () =>
    Effect.gen(function* () {
      const { drained, paused } = yield* drainAndPause(true)
      // Forty items in batches of five: eight claims or more (the ticks', and those along with results), and one
      // read of the switches for all of them.
      expect(drained.claims.all).toBeGreaterThanOrEqual(8)
      expect(drained.claims.ticks).toBeGreaterThanOrEqual(2)
      expect(drained.reads).toBe(1)
      expect(paused.handled).toBe(40)
      expect(paused.reads).toBe(2)
    }).pipe(Effect.provide(countingLayer({ interval: "1 minute", batchSize: 5 }, true)))
  )

  it.scoped("while it does not listen (an outage), every tick reads them", () =>
    Effect.gen(function* () {
      const { drained, paused } = yield* drainAndPause(false)
      expect(drained.claims.all).toBeGreaterThanOrEqual(8)
      expect(drained.claims.ticks).toBeGreaterThanOrEqual(2)
      expect(drained.reads).toBeGreaterThanOrEqual(drained.claims.ticks)
      expect(paused.handled).toBe(40)
    }).pipe(Effect.provide(countingLayer({ interval: "1 minute", batchSize: 5 }, false)))
  )

  it.scoped("a read is trusted for one poll interval at most", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const reads = yield* TickCounter
      const queue = yield* QueueStore
      const runner = yield* Runner.Runner
      let handled = 0
      yield* runner.register("t", () => {
        handled++
      })
      yield* runner.start
      // An item every 10 s wakes the runner each time; the switches are read again once a minute has passed.
      for (let i = 1; i <= 12; i++) {
        yield* queue.enqueue({ taskType: "t" }, yield* FakeClock.now)
        yield* settle(Effect.sync(() => handled === i))
        yield* FakeClock.advance("10 seconds")
      }
      expect(yield* Ref.get(reads)).toBeGreaterThanOrEqual(2)
      expect(yield* Ref.get(reads)).toBeLessThanOrEqual(4)
    }).pipe(Effect.provide(countingLayer({ interval: "1 minute" }, true)))
  )
})

describe("Runner and missed slots", () => {
  for (const [policy, expected] of [
    ["latest", ["2026-01-04T09:00:00.000Z"]],
    ["skip", []]
  ] as const) {
    it.scoped(`three days of downtime: ${expected.length} catch-up run(s) with the ${policy} policy`, () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("t", () => undefined)
        yield* store.addJob({
          name: "daily",
          taskType: "t",
          schedule: Schedule.daily({ hour: 9, minute: 0 }),
          missedSlots: policy
        })
        // No runner is up while the slots of the 1st to the 4th pass.
        yield* FakeClock.advanceTo("2026-01-04T12:00:00Z")
        yield* runner.start
        yield* FakeClock.advance("1 hour")
        const runs = yield* store.runsOf("daily")
        expect(runs.map((r) => iso(r.scheduledFor))).toEqual(expected)
        expect(runs.every((r) => r.status === "success")).toBe(true)
        // Then the next slot after now, on time.
        const [job] = yield* store.jobs
        expect(iso(job!.nextRunAt)).toBe("2026-01-05T09:00:00.000Z")
        yield* FakeClock.advanceTo("2026-01-05T09:00:00Z")
        expect((yield* store.runsOf("daily")).map((r) => iso(r.scheduledFor))).toEqual([
          ...expected,
          "2026-01-05T09:00:00.000Z"
        ])
      }).pipe(Effect.provide(testLayer({ interval: "1 hour" })))
    )
  }
})

describe("Runner and overlap", () => {
  it.scoped(
    "a 150 s handler on a 60 s interval never overlaps; each slot in between is one skipped row; other jobs stay on time",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("slow", () => Effect.sleep("150 seconds"))
        yield* runner.register("fast", () => undefined)
        yield* store.addJob({ name: "slow", taskType: "slow", schedule: Schedule.interval({ every: "60 seconds" }) })
        yield* store.addJob({ name: "fast", taskType: "fast", schedule: Schedule.interval({ every: "60 seconds" }) })
        yield* runner.start
        yield* FakeClock.advanceTo("2026-01-01T00:10:30Z")
        const slow = yield* store.runsOf("slow")
        const ran = slow.filter((r) => r.status === "success")
        const skipped = slow.filter((r) => r.status === "skipped")
        expect(ran.map((r) => iso(r.scheduledFor))).toEqual([
          "2026-01-01T00:01:00.000Z",
          "2026-01-01T00:04:00.000Z",
          "2026-01-01T00:07:00.000Z"
        ])
        expect(skipped.map((r) => iso(r.scheduledFor))).toEqual([
          "2026-01-01T00:02:00.000Z",
          "2026-01-01T00:03:00.000Z",
          "2026-01-01T00:05:00.000Z",
          "2026-01-01T00:06:00.000Z",
          "2026-01-01T00:08:00.000Z",
          "2026-01-01T00:09:00.000Z"
        ])
        for (const r of skipped) {
          expect(r.attempt).toBe(1)
          expect(iso(r.startedAt)).toBe(iso(r.finishedAt))
          expect(r.error).toBe("skipped: the previous run was still running")
        }
        // The 00:10 slot is running now; no two runs' [started, finished) intersect.
        const intervals = slow
          .filter((r) => r.status !== "skipped")
          .map((r) => [r.startedAt!.getTime(), (r.finishedAt ?? new Date(8.64e15)).getTime()] as const)
        for (let i = 1; i < intervals.length; i++) expect(intervals[i]![0]).toBeGreaterThanOrEqual(intervals[i - 1]![1])
        const fast = yield* store.runsOf("fast")
        expect(fast.length).toBe(10)
        expect(fast.every((r) => iso(r.startedAt) === iso(r.scheduledFor) && r.status === "success")).toBe(true)
        yield* stopUnderFakeClock
      }).pipe(Effect.provide(testLayer({ workers: 2, interval: "1 minute" })))
  )
})

describe("Runner capacity", () => {
  /** Three jobs due at the same slot whose handlers wait on a latch each; returns who started. */
  const latched = (names: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const started = yield* Ref.make<ReadonlyArray<string>>([])
      const latches = new Map<string, Deferred.Deferred<void>>()
      for (const name of names) {
        latches.set(name, yield* Deferred.make<void>())
        yield* store.addJob({
          name,
          taskType: "latched",
          payload: name,
          schedule: Schedule.daily({ hour: 9, minute: 0 })
        })
      }
      yield* runner.register("latched", (job) =>
        Effect.zipRight(
          Ref.update(started, (xs) => [...xs, job.payload]),
          Deferred.await(latches.get(job.payload)!)
        )
      )
      return { started, release: (name: string) => Deferred.succeed(latches.get(name)!, undefined) }
    })

  it.scoped("one worker runs a batch in order, one at a time", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const { release, started } = yield* latched(["a", "b", "c"])
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T09:00:00Z")
      yield* settle(Effect.map(Ref.get(started), (s) => s.length === 1))
      expect(yield* Ref.get(started)).toEqual(["a"])
      expect(yield* runner.running).toBe(1)
      yield* release("a")
      yield* settle(Effect.map(Ref.get(started), (s) => s.length === 2))
      expect(yield* Ref.get(started)).toEqual(["a", "b"])
      yield* release("b")
      yield* settle(Effect.map(Ref.get(started), (s) => s.length === 3))
      expect(yield* Ref.get(started)).toEqual(["a", "b", "c"])
      yield* release("c")
      yield* settle(Effect.map(runner.running, (n) => n === 0))
    }).pipe(Effect.provide(testLayer({ workers: 1, interval: "1 hour" })))
  )

  it.scoped("four workers run four at once", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const { release, started } = yield* latched(["a", "b", "c", "d", "e"])
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T09:00:00Z")
      yield* settle(Effect.map(Ref.get(started), (s) => s.length === 4))
      expect([...(yield* Ref.get(started))].sort()).toEqual(["a", "b", "c", "d"])
      expect(yield* runner.running).toBe(4)
      // The fifth waits for capacity, then starts as soon as one finishes.
      yield* release("b")
      yield* settle(Effect.map(Ref.get(started), (s) => s.length === 5))
      for (const n of ["a", "c", "d", "e"]) yield* release(n)
      yield* settle(Effect.map(runner.running, (n) => n === 0))
    }).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )
})

describe("Runner.stop", () => {
  it.scoped("waits for a running handler within the grace period; nothing runs after stop", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const latch = yield* Deferred.make<void>()
      yield* runner.register("t", () => Deferred.await(latch))
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("1 minute")
      expect(yield* runner.running).toBe(1)
      const stopping = yield* Effect.fork(runner.stop)
      yield* FakeClock.advance("10 seconds")
      expect(stopping.unsafePoll()).toBeNull()
      yield* Deferred.succeed(latch, undefined)
      yield* Fiber.join(stopping)
      expect((yield* store.runsOf("j")).map((r) => r.status)).toEqual(["success"])
      yield* FakeClock.advance("1 hour")
      expect((yield* store.runsOf("j")).length).toBe(1)
      expect(yield* runner.tick).toMatchObject({ skipped: "stopped", started: 0 })
    }).pipe(Effect.provide(testLayer({ gracePeriod: "30 seconds", interval: "1 minute" })))
  )

  it.scoped("interrupts a handler still running after the grace period and hands the slot to a retry at once", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const aborted = yield* Ref.make(false)
      yield* runner.register(
        "t",
        (_job, signal) =>
          new Promise(() => signal.addEventListener("abort", () => Effect.runSync(Ref.set(aborted, true))))
      )
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("1 minute")
      const stopping = yield* Effect.fork(runner.stop)
      yield* FakeClock.advance("30 seconds")
      yield* Fiber.join(stopping)
      expect(yield* Ref.get(aborted)).toBe(true)
      const runs = yield* store.runsOf("j")
      expect(runs.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "pending"]
      ])
      expect(runs[0]!.error).toBe("interrupted: the runner stopped before the handler finished")
      expect(iso(runs[1]!.dueAt)).toBe("2026-01-01T00:01:30.000Z")
      expect(yield* runner.running).toBe(0)
    }).pipe(Effect.provide(testLayer({ gracePeriod: "30 seconds", timeout: "1 hour", interval: "1 minute" })))
  )

  it.scoped("starts nothing it claimed ahead: buffered items go back at once and a second runner takes them", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      const latch = yield* Deferred.make<void>()
      const startedBy = yield* Ref.make<ReadonlyArray<string>>([])
      const handler = (who: string) => (job: { readonly payload: string }) =>
        Effect.zipRight(
          Ref.update(startedBy, (xs) => [...xs, `${who}:${job.payload}`]),
          Deferred.await(latch)
        )
      const items = Effect.map(memory.items, (items) => items.map((i) => [i.payload, i.status, i.inFlight]))
      yield* runner.register("slow", handler("first"))
      for (const payload of ["a", "b", "c", "d"])
        yield* queue.enqueue({ taskType: "slow", payload, thread: 1 }, new Date())
      yield* runner.start
      // Two workers and a buffer of two: all four claimed (thread 1: side by side), two running, two waiting.
      yield* settle(Effect.map(runner.running, (n) => n === 2))
      expect(yield* items).toEqual([
        ["a", "processing", 1],
        ["b", "processing", 1],
        ["c", "processing", 1],
        ["d", "processing", 1]
      ])
      const stopping = yield* Effect.fork(runner.stop)
      // The buffered two are pending again with no lease, at once: no clock movement.
      yield* settle(Effect.map(memory.items, (items) => items.filter((i) => i.inFlight === 0).length === 2))
      expect(yield* items).toEqual([
        ["a", "processing", 1],
        ["b", "processing", 1],
        ["c", "pending", 0],
        ["d", "pending", 0]
      ])
      // A second runner takes them at once, well before their leases (30 s) would have expired.
      const second = yield* Runner.make({ workers: 2, interval: "1 day", heartbeatInterval: "7 days" })
      yield* second.register("slow", handler("second"))
      yield* second.start
      yield* settle(Effect.map(second.running, (n) => n === 2))
      expect([...(yield* Ref.get(startedBy))].sort()).toEqual(["first:a", "first:b", "second:c", "second:d"])
      // The first runner's running handlers still had their grace period: they finish and are recorded.
      yield* Deferred.succeed(latch, undefined)
      yield* Fiber.join(stopping)
      yield* settle(Effect.map(memory.processed, (p) => p.length === 4))
      expect((yield* memory.processed).every((p) => p.status === "ok")).toBe(true)
      expect((yield* Ref.get(startedBy)).length).toBe(4)
      // What the first one handed back never ran: it is no failure (`kairos worker` prints these counts at stop).
      expect(yield* runner.stats).toEqual({ started: 2, ok: 2, failed: 0 })
      yield* Effect.fork(second.stop)
      yield* FakeClock.advance("30 seconds")
    }).pipe(Effect.provide(testLayer({ workers: 2, gracePeriod: "30 seconds", interval: "1 day" })))
  )

  it.scoped(
    "starts no scheduled run it claimed ahead: each goes back as its slot's first attempt, run once elsewhere",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        const latch = yield* Deferred.make<void>()
        const startedBy = yield* Ref.make<ReadonlyArray<string>>([])
        const record = (who: string, job: { readonly payload: string }) =>
          Ref.update(startedBy, (xs) => [...xs, `${who}:${job.payload}`])
        const names = ["a", "b", "c", "d"]
        for (const name of names)
          yield* store.addJob({
            name,
            taskType: "slow",
            payload: name,
            schedule: Schedule.daily({ hour: 9, minute: 0 })
          })
        yield* runner.register("slow", (job) => Effect.zipRight(record("first", job), Deferred.await(latch)))
        yield* runner.start
        yield* FakeClock.advanceTo("2026-01-01T09:00:00Z")
        const statuses = Effect.map(store.runs, (runs) => runs.map((r) => [r.status, r.attempt]))
        // One worker: one run going, and at least one more claimed ahead (running in the store, leased, not started).
        yield* settle(Effect.map(runner.running, (n) => n === 1))
        const claimed = (yield* store.runs).filter((r) => r.status === "running").length
        expect(claimed).toBeGreaterThanOrEqual(2)
        expect(yield* Ref.get(startedBy)).toEqual(["first:a"])
        const stopping = yield* Effect.fork(runner.stop)
        // The buffered runs are pending again, unowned, due at once: no clock movement, no failed attempt recorded.
        yield* settle(
          Effect.map(store.runs, (runs) => runs.filter((r) => r.status === "pending").length === claimed - 1)
        )
        const back = (yield* store.runs).filter((r) => r.status === "pending")
        for (const run of back) {
          expect(run).toMatchObject({ attempt: 1, owner: null, leaseToken: null })
          expect(iso(run.dueAt)).toBe("2026-01-01T09:00:00.000Z")
        }
        expect((yield* statuses).filter(([status]) => status === "failed")).toEqual([])
        // A second runner takes them at once, well before their leases (30 s) would have expired.
        const second = yield* Runner.make({ workers: 1, interval: "1 day", heartbeatInterval: "7 days" })
        yield* second.register("slow", (job) => record("second", job))
        yield* second.start
        yield* settle(Effect.map(Ref.get(startedBy), (xs) => xs.length === names.length))
        expect([...(yield* Ref.get(startedBy))].sort()).toEqual(["first:a", "second:b", "second:c", "second:d"])
        // The first runner's running handler still had its grace period: it finishes and is recorded.
        yield* Deferred.succeed(latch, undefined)
        yield* Fiber.join(stopping)
        yield* settle(Effect.map(store.runs, (runs) => runs.every((r) => r.status === "success")))
        // Each slot exactly once, as its first attempt.
        for (const name of names) {
          const runs = yield* store.runsOf(name)
          expect(runs.map((r) => [iso(r.scheduledFor), r.attempt, r.status])).toEqual([
            ["2026-01-01T09:00:00.000Z", 1, "success"]
          ])
        }
        expect((yield* Ref.get(startedBy)).length).toBe(names.length)
        yield* Effect.fork(second.stop)
        yield* FakeClock.advance("30 seconds")
      }).pipe(Effect.provide(testLayer({ workers: 1, gracePeriod: "30 seconds", interval: "1 day" })))
  )
})

describe("Runner.stop's grace period", () => {
  // A queue whose claims never answer once `hang` is set: the tick in progress at the stop waits on one.
  const hang = Context.GenericTag<{ on: boolean; reached: Deferred.Deferred<void> }>("test/claimHang")
  const hangingQueue = Layer.effect(
    QueueStore,
    Effect.gen(function* () {
      const queue = yield* QueueStore
      const flag = yield* hang
      return QueueStore.of({
        ...queue,
        claimBatch: (...args) =>
          flag.on ? Effect.zipRight(Deferred.succeed(flag.reached, undefined), Effect.never) : queue.claimBatch(...args)
      })
    })
  )
  const layer = Runner.layer({
    ...TestRunner.testDefaults,
    workers: 4,
    gracePeriod: "30 seconds",
    leaseDuration: "30 seconds",
    timeout: "1 hour"
  }).pipe(
    Layer.provide(hangingQueue),
    Layer.provideMerge(TestRunner.memoryPorts()),
    Layer.provideMerge(
      Layer.effect(
        hang,
        Effect.map(Deferred.make<void>(), (reached) => ({ on: false, reached }))
      )
    )
  )

  it.scoped("counts from the stop: a tick that took all of it leaves the handlers none, not a second period", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const flag = yield* hang
      const interrupted = yield* Deferred.make<void>()
      yield* runner.register("t", () =>
        Effect.onInterrupt(Effect.never, () => Deferred.succeed(interrupted, undefined))
      )
      yield* runner.start
      yield* queue.enqueue({ taskType: "t", payload: "" }, new Date())
      yield* settle(Effect.map(runner.running, (n) => n === 1))
      // The next tick's claim gets no answer: the stop's wait for the loop takes the whole grace period.
      flag.on = true
      yield* runner.wake
      yield* Deferred.await(flag.reached)
      const stopping = yield* Effect.fork(runner.stop)
      yield* FakeClock.advance("30 seconds")
      yield* settle(Effect.sync(() => stopping.unsafePoll() !== null))
      yield* Fiber.join(stopping)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
      expect(yield* runner.running).toBe(0)
    }).pipe(Effect.provide(layer), Effect.provide(FakeClock.layer))
  )
})

describe("Runner.stop on a database that stopped answering", () => {
  // A registry whose `unregister` never answers, as a statement on a frozen connection (a pooler or a network that
  // stopped forwarding) never does; `called` says the stop got that far.
  const called = Context.GenericTag<Deferred.Deferred<void>>("test/unregisterCalled")
  const frozenRegistry = Layer.effect(
    WorkerRegistry,
    Effect.gen(function* () {
      const registry = yield* MemoryWorkerRegistry.make
      const reached = yield* called
      return WorkerRegistry.of({
        ...registry,
        unregister: () => Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never)
      })
    })
  )
  const layer = Runner.layer({ ...TestRunner.testDefaults, leaseDuration: "30 seconds" }).pipe(
    Layer.provide(frozenRegistry),
    Layer.provideMerge(TestRunner.memoryPorts()),
    Layer.provideMerge(Layer.effect(called, Deferred.make<void>())),
    Layer.provideMerge(Layer.effectDiscard(FakeClock.quick))
  )

  it.scoped("a step that gets no answer is given up after a third of the lease: the stop ends and says so", () =>
    captureLogs((lines) =>
      Effect.gen(function* () {
        const runner = yield* Runner.Runner
        yield* runner.start
        const stopping = yield* Effect.fork(runner.stop)
        yield* Deferred.await(yield* called)
        yield* FakeClock.advance("9 seconds")
        expect(stopping.unsafePoll()).toBeNull()
        yield* FakeClock.advance("1 second")
        yield* Fiber.join(stopping)
        expect(yield* Ref.get(lines)).toContain(
          "WARN stopping: recording the last results and handing back what was cut short had no answer within 10s; " +
            "the stop goes on (what it held is taken over once its leases expire)"
        )
      })
    ).pipe(Effect.provide(layer))
  )
})
