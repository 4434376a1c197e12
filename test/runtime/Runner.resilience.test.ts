/**
 * A store that goes away, a runner without settings, and jobs defined in code.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Ref } from "effect"
import { JobStore, JobStoreError, Runner, Schedule, WakeUps } from "../../src/index.js"
import { EmptyQueueStore, FakeClock, FakeStore, MemoryDatabase, MemorySettings, TestRunner } from "../../src/testing.js"
import { captureLogs, memoryQueueAndSettings, settle, testLayer } from "../support/runner.js"

class Outage extends Context.Tag("test/Outage")<Outage, Ref.Ref<boolean>>() {}

/**
 * A FakeStore whose transactions fail while the outage flag is set (the database went away), and wake-ups whose
 * listener is disconnected meanwhile (it listens on the same database).
 */
const flakyStore = Layer.effectContext(
  Effect.gen(function* () {
    const { fake, store } = yield* FakeStore.make
    const down = yield* Ref.make(false)
    const transaction = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | JobStoreError, R> =>
      Effect.flatMap(Ref.get(down), (isDown) =>
        isDown
          ? Effect.fail(new JobStoreError({ reason: "Unavailable", message: "connection refused" }))
          : store.transaction(self)
      )
    return Context.make(JobStore, { ...store, transaction }).pipe(
      Context.add(FakeStore.FakeStore, fake),
      Context.add(Outage, down),
      Context.add(
        WakeUps,
        WakeUps.of({ subscribe: () => Effect.succeed({ live: () => !Ref.get(down).pipe(Effect.runSync) }) })
      )
    )
  })
)

describe("Runner resilience", () => {
  it.scoped("when the store is unreachable, ticks fail and are logged, and the runner resumes by itself", () =>
    captureLogs((logs) =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        const down = yield* Outage
        yield* runner.register("t", () => undefined)
        yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
        yield* Ref.set(down, true)
        yield* runner.start
        yield* FakeClock.advance("5 minutes")
        expect((yield* store.runsOf("j")).length).toBe(0)
        const errors = (yield* Ref.get(logs)).filter((l) => l.startsWith("ERROR"))
        expect(errors.length).toBeGreaterThanOrEqual(3)
        expect(errors[0]).toContain(
          "tick failed (retrying in 1s, or as soon as the database is reachable again): JobStoreError: connection refused"
        )
        // Backing off: the waits grow.
        expect(errors.some((l) => l.includes("retrying in 4s"))).toBe(true)
        yield* Ref.set(down, false)
        yield* FakeClock.advance("2 minutes")
        const runs = yield* store.runsOf("j")
        expect(runs.length).toBeGreaterThanOrEqual(2)
        expect(runs.every((r) => r.status === "success")).toBe(true)
      })
    ).pipe(
      Effect.provide(
        Runner.layer({ interval: "1 minute" }).pipe(Layer.provideMerge(Layer.merge(memoryQueueAndSettings, flakyStore)))
      )
    )
  )

  it.scoped("with the explicit empty queue and fresh settings, nothing is paused and jobs run", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("3 minutes")
      expect((yield* store.runsOf("j")).length).toBe(3)
    }).pipe(
      Effect.provide(
        Runner.layer().pipe(
          Layer.provideMerge(
            Layer.mergeAll(
              FakeStore.layer,
              EmptyQueueStore.layerFromDatabase,
              MemorySettings.layerFromDatabase,
              TestRunner.controlPorts()
            )
          ),
          Layer.provideMerge(MemoryDatabase.layer())
        )
      )
    )
  )

  it.scoped("start does nothing when the config disables the scheduler", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("1 hour")
      expect((yield* store.runsOf("j")).length).toBe(0)
    }).pipe(Effect.provide(TestRunner.layer({ enabled: false })))
  )
})

describe("Runner.defineJobs", () => {
  it.scoped("upserts jobs by name; a changed schedule recomputes the next slot; redefining is idempotent", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T12:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const daily9 = Schedule.daily({ hour: 9, minute: 0 })
      yield* runner.defineJobs([{ name: "report", taskType: "report", schedule: daily9, payload: { to: "x" } }])
      yield* runner.defineJobs([{ name: "report", taskType: "report", schedule: daily9, payload: { to: "x" } }])
      let jobs = yield* store.jobs
      expect(jobs.length).toBe(1)
      expect(jobs[0]!.nextRunAt!.toISOString()).toBe("2026-01-02T09:00:00.000Z")
      expect(jobs[0]!.payload).toBe(`{"to":"x"}`)
      yield* FakeClock.advanceTo("2026-01-01T13:00:00Z")
      yield* runner.defineJobs([
        { name: "report", taskType: "report", schedule: Schedule.daily({ hour: 14, minute: 0 }) }
      ])
      jobs = yield* store.jobs
      expect(jobs.length).toBe(1)
      expect(jobs[0]!.nextRunAt!.toISOString()).toBe("2026-01-01T14:00:00.000Z")
      expect(jobs[0]!.schedule).toEqual({ _tag: "Daily", hour: 14, minute: 0 })
      // A job removed from code is disabled when asked to.
      yield* runner.defineJobs([{ name: "other", taskType: "t", schedule: Schedule.interval({ every: "1 hour" }) }], {
        disableOthers: true
      })
      jobs = yield* store.jobs
      expect(jobs.map((j) => [j.name, j.enabled])).toEqual([
        ["report", false],
        ["other", true]
      ])
    }).pipe(Effect.provide(TestRunner.layer()))
  )
})

describe("a run whose record was lost (a failover to a standby that had not received it)", () => {
  /**
   * What the new primary holds after an asynchronous failover lost a record: a run leased to this (live) runner that
   * it does not hold — it finished it (the success was lost), or its claim was lost and the runner's lease with it.
   */
  const disownedRun = (jobName: string, owner: string, slot: Date, leaseMs = 30_000) =>
    Effect.gen(function* () {
      const store = yield* JobStore
      const fake = yield* FakeStore.FakeStore
      const job = (yield* fake.jobs).find((j) => j.name === jobName)!
      const [started] = yield* store.startRuns([{ jobId: job.id, scheduledFor: slot, attempt: 1 }], {
        owner,
        leaseUntil: new Date(slot.getTime() + leaseMs),
        now: slot
      })
      return started!.run
    })

  const NO_LONGER = (owner: string) =>
    `owner ${owner} no longer runs it (a failover lost its result or its claim's answer, or it gave the run up)`

  it.scoped("is let go by its live owner at its next claim, saying so, and holds no slot of its job meanwhile", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "10 seconds" }) })
      yield* runner.start
      // The slot at 0 s, running as far as the store knows, leased to this runner until 30 s.
      const lost = yield* disownedRun("j", runner.owner, new Date("2026-01-01T00:00:00Z"))
      // At the next slot (10 s) the runner lets it go — not once its lease expired — and that slot runs, not skipped.
      yield* FakeClock.advance("10 seconds")
      const runs = yield* store.runsOf("j")
      const first = runs.find((r) => r.id === lost.id)!
      expect(first).toMatchObject({ status: "failed", error: NO_LONGER(runner.owner) })
      expect(first.finishedAt!.getTime()).toBeLessThanOrEqual(new Date("2026-01-01T00:00:10Z").getTime())
      // The lost slot runs again (at least once: its success, if it had one, was lost), and the slot at 10 s runs.
      const summary = runs.map((r) => [r.scheduledFor.toISOString().slice(17, 19), r.attempt, r.status])
      expect(summary).toEqual([
        ["00", 1, "failed"],
        ["00", 2, "success"],
        ["10", 1, "success"]
      ])
    }).pipe(Effect.provide(testLayer({ workers: 4 })))
  )

  // Leased until 30 s, or until 2 s and let go after that: then the reason names the expiry (the run held no slot of
  // its job from then on).
  for (const [leaseMs, expiry] of [
    [30_000, ""],
    [2_000, "; its lease expired 2026-01-01T00:00:02.000Z"]
  ] as const) {
    it.scoped(
      `is let go at once when the runner is woken to look at everything (its listener reconnected), lease ${leaseMs} ms`,
      () =>
        Effect.gen(function* () {
          yield* FakeClock.set("2026-01-01T00:00:00Z")
          const store = yield* FakeStore.FakeStore
          const runner = yield* Runner.Runner
          yield* runner.register("t", () => undefined)
          yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
          yield* runner.start
          yield* FakeClock.advance("5 seconds")
          yield* disownedRun("j", runner.owner, new Date("2026-01-01T00:00:00Z"), leaseMs)
          // A reconnect wakes the runner with "jobs" (changes may have been missed), as `wake` does.
          yield* runner.wake
          yield* settle(Effect.map(store.runsOf("j"), (runs) => runs.some((r) => r.status === "success")))
          const runs = yield* store.runsOf("j")
          expect(runs.map((r) => [r.attempt, r.status, r.finishedAt?.toISOString()])).toEqual([
            [1, "failed", "2026-01-01T00:00:05.000Z"],
            [2, "success", "2026-01-01T00:00:05.000Z"]
          ])
          expect(runs[0]!.error).toBe(NO_LONGER(runner.owner) + expiry)
        }).pipe(Effect.provide(testLayer({ workers: 4 })))
    )
  }

  it.scoped("another owner's run waits for its lease; a run this runner still runs is never let go", () =>
    captureLogs((logs) =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("long", () => Effect.sleep("3 minutes"))
        yield* runner.register("t", () => undefined)
        yield* store.addJob({ name: "long", taskType: "long", schedule: Schedule.interval({ every: "10 minutes" }) })
        yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "10 seconds" }) })
        yield* store.addJob({ name: "other", taskType: "t", schedule: Schedule.interval({ every: "1 hour" }) })
        yield* runner.start
        const theirs = yield* disownedRun("other", "another-owner", new Date("2026-01-01T00:00:00Z"))
        yield* FakeClock.advance("14 minutes")
        expect((yield* store.runsOf("long")).map((r) => r.status)).toEqual(["success"])
        expect((yield* store.runsOf("j")).filter((r) => r.status !== "success")).toEqual([])
        const other = (yield* store.runsOf("other")).find((r) => r.id === theirs.id)!
        expect(other.error).toMatch(
          /^owner lost: another-owner stopped renewing its lease \(expired 2026-01-01T00:00:30/
        )
        expect((yield* Ref.get(logs)).filter((l) => l.startsWith("ERROR"))).toEqual([])
      })
    ).pipe(Effect.provide(testLayer({ workers: 4 })))
  )
})
