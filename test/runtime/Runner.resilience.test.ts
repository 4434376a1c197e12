/**
 * A store that goes away, a runner without settings, and jobs defined in code.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Ref } from "effect"
import { JobStore, JobStoreError, Runner, Schedule } from "../../src/index.js"
import { EmptyQueueStore, FakeClock, FakeStore, MemoryDatabase, MemorySettings, TestRunner } from "../../src/testing.js"
import { captureLogs, memoryQueueAndSettings } from "../support/runner.js"

class Outage extends Context.Tag("test/Outage")<Outage, Ref.Ref<boolean>>() {}

/** A FakeStore whose transactions fail while the outage flag is set (the database went away). */
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
      Context.add(Outage, down)
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
        Runner.layer({ interval: "1 minute" }).pipe(Layer.provideMerge(Layer.merge(flakyStore, memoryQueueAndSettings)))
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
