/**
 * The runner fires scheduled jobs at the right instants across DST, driven by the fake clock (no real sleeps).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Layer, Ref } from "effect"
import { JobStore, QueueStore, Runner, Schedule } from "../../src/index.js"
import { FakeClock, FakeStore, TestRunner } from "../../src/testing.js"
import { captureLogs, settle, testLayer } from "../support/runner.js"

const HOUR = 3_600_000

/** Registers a handler that records when it ran (fake time) and which slot it was given. */
const recorder = (taskType: string) =>
  Effect.gen(function* () {
    const runner = yield* Runner.Runner
    const calls = yield* Ref.make<ReadonlyArray<{ at: string; slot: string }>>([])
    yield* runner.register(taskType, (job) =>
      Effect.gen(function* () {
        const at = yield* FakeClock.now
        yield* Ref.update(calls, (xs) => [...xs, { at: at.toISOString(), slot: job.scheduledFor.toISOString() }])
      })
    )
    return calls
  })

describe("Runner with scheduled jobs", () => {
  it.scoped(
    "Daily 09:00 Europe/Berlin fires once per local day, 2026-03-01 to 2026-11-15, at the right UTC instant",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-03-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        const calls = yield* recorder("report")
        yield* store.addJob({
          name: "berlin",
          taskType: "report",
          schedule: Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" })
        })
        yield* runner.start
        yield* FakeClock.advanceTo("2026-11-15T00:00:00Z")
        const got = yield* Ref.get(calls)
        const expected: Array<string> = []
        for (let d = Date.UTC(2026, 2, 1); d < Date.UTC(2026, 10, 15); d += 24 * HOUR) {
          // CET (+1) before 2026-03-29 and from 2026-10-25; CEST (+2) in between.
          const summer = d >= Date.UTC(2026, 2, 29) && d < Date.UTC(2026, 9, 25)
          expected.push(new Date(d + (summer ? 7 : 8) * HOUR).toISOString())
        }
        expect(got.length).toBe(259)
        expect(got.map((c) => c.slot)).toEqual(expected)
        // Each ran at its slot, not a poll later.
        expect(got.every((c) => c.at === c.slot)).toBe(true)
        const runs = yield* store.runsOf("berlin")
        expect(runs.length).toBe(259)
        expect(runs.every((r) => r.status === "success" && r.attempt === 1 && r.output === "{}")).toBe(true)
      }).pipe(Effect.provide(testLayer({ interval: "1 day" }))),
    // CPU, not waiting: 0.5 s alone, 4 s in a whole run, 15 s of the default 30 s in CI's loaded second pass (the unit
    // files share vitest's main process with the run's reporting, beside five Postgres files on two cores).
    { timeout: 120_000 }
  )

  it.scoped("Daily 02:30 America/New_York fires once on 2026-03-08, at 03:30 EDT", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-03-06T12:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const calls = yield* recorder("ny")
      yield* store.addJob({
        name: "ny",
        taskType: "ny",
        schedule: Schedule.daily({ hour: 2, minute: 30, tz: "America/New_York" })
      })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-03-10T00:00:00Z")
      expect((yield* Ref.get(calls)).map((c) => c.at)).toEqual([
        "2026-03-07T07:30:00.000Z",
        "2026-03-08T07:30:00.000Z",
        "2026-03-09T06:30:00.000Z"
      ])
    }).pipe(Effect.provide(testLayer({ interval: "6 hours" })))
  )

  it.scoped("Daily 01:30 America/New_York fires once on 2026-11-01, at 01:30 EDT, never again at 01:30 EST", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-10-31T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const calls = yield* recorder("ny")
      yield* store.addJob({
        name: "ny",
        taskType: "ny",
        schedule: Schedule.daily({ hour: 1, minute: 30, tz: "America/New_York" })
      })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-11-03T00:00:00Z")
      const at = (yield* Ref.get(calls)).map((c) => c.at)
      expect(at).toEqual(["2026-10-31T05:30:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"])
      expect(at).not.toContain("2026-11-01T06:30:00.000Z")
    }).pipe(Effect.provide(testLayer({ interval: "6 hours" })))
  )

  it.scoped("Interval 1h over the fall-back night fires every 3,600 s", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-10-31T22:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const calls = yield* recorder("tick")
      yield* store.addJob({ name: "hourly", taskType: "tick", schedule: Schedule.interval({ every: "1 hour" }) })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-11-01T12:00:00Z")
      const at = (yield* Ref.get(calls)).map((c) => new Date(c.at).getTime())
      expect(at.length).toBe(14)
      expect(at[0]).toBe(Date.parse("2026-10-31T23:00:00Z"))
      for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!).toBe(HOUR)
    }).pipe(Effect.provide(testLayer()))
  )

  it.scoped("a job's first slot is the schedule's next slot after its creation", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-05-05T09:00:00Z")
      const store = yield* FakeStore.FakeStore
      const job = yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.daily({ hour: 9, minute: 0 }) })
      expect(job.nextRunAt?.toISOString()).toBe("2026-05-06T09:00:00.000Z")
    }).pipe(Effect.provide(testLayer()))
  )

  it.scoped(
    "with every worker busy and the buffer full, a slot that overlaps its running previous run is recorded as skipped on time",
    () =>
      captureLogs((logs) =>
        Effect.gen(function* () {
          yield* FakeClock.set("2026-01-01T00:00:00Z")
          const store = yield* FakeStore.FakeStore
          const runner = yield* Runner.Runner
          // The one worker is taken by the job's own first run, for two and a half slots.
          yield* runner.register("long", (job) =>
            job.scheduledFor.getUTCMinutes() === 1 ? Effect.sleep("150 seconds") : Effect.void
          )
          yield* store.addJob({
            name: "every-minute",
            taskType: "long",
            schedule: Schedule.interval({ every: "1 minute" })
          })
          yield* runner.register("quick", () => undefined)
          yield* runner.start
          // Queue items claimed ahead fill the buffer behind the busy worker: the runner is full.
          yield* FakeClock.advanceTo("2026-01-01T00:01:30Z")
          const queue = yield* QueueStore
          yield* queue.enqueueMany(
            Array.from({ length: 50 }, () => ({ taskType: "quick", thread: 1 })),
            yield* FakeClock.now
          )
          yield* FakeClock.advanceTo("2026-01-01T00:05:30Z")
          const runs = (yield* store.runsOf("every-minute")).map((r) => [
            r.scheduledFor.toISOString().slice(11, 16),
            r.status,
            r.startedAt?.toISOString().slice(11, 19)
          ])
          expect(runs).toEqual([
            ["00:01", "success", "00:01:00"],
            ["00:02", "skipped", "00:02:00"],
            ["00:03", "skipped", "00:03:00"],
            ["00:04", "success", "00:04:00"],
            ["00:05", "success", "00:05:00"]
          ])
          // Overlap is no downtime: no "missed" line.
          expect((yield* Ref.get(logs)).filter((l) => l.includes("missed"))).toEqual([])
        }).pipe(Effect.provide(testLayer({ interval: "1 hour", workers: 1 })))
      )
  )

  it.scoped("slots missed while no runner was up are logged once, saying what was done", () =>
    captureLogs((logs) =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("tick", () => undefined)
        yield* store.addJob({ name: "hourly", taskType: "tick", schedule: Schedule.interval({ every: "1 hour" }) })
        // Down for five hours and a half: five slots passed.
        yield* FakeClock.set("2026-01-01T05:30:00Z")
        yield* runner.start
        yield* FakeClock.advance("1 minute")
        const missed = (yield* Ref.get(logs)).filter((l) => l.includes("missed"))
        expect(missed.length).toBe(1)
        expect(missed[0]).toContain(`job "hourly": 4 slot(s) missed`)
        expect(missed[0]).toContain("the latest is run now")
        expect((yield* store.runsOf("hourly")).map((r) => r.scheduledFor.toISOString())).toEqual([
          "2026-01-01T05:00:00.000Z"
        ])
      }).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
    )
  )
  it.scoped("a run's started_at is its handler's start: one claimed while the only worker was busy starts later", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-05-01T08:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      // One worker; both slots at 09:00 are claimed by one tick, and the second waits for the first's 10 s handler.
      yield* runner.register("slow", () => Effect.sleep("10 seconds"))
      for (const name of ["first", "second"]) {
        yield* store.addJob({ name, taskType: "slow", schedule: Schedule.daily({ hour: 9, minute: 0, tz: "UTC" }) })
      }
      yield* runner.start
      yield* FakeClock.advanceTo("2026-05-01T09:01:00Z")
      const spans = []
      for (const name of ["first", "second"]) {
        const [run] = yield* store.runsOf(name)
        expect(run).toMatchObject({ status: "success", attempt: 1 })
        spans.push([run!.startedAt?.toISOString(), run!.finishedAt?.toISOString()])
      }
      expect(spans.sort()).toEqual([
        ["2026-05-01T09:00:00.000Z", "2026-05-01T09:00:10.000Z"],
        ["2026-05-01T09:00:10.000Z", "2026-05-01T09:00:20.000Z"]
      ])
    }).pipe(Effect.provide(testLayer({ interval: "1 minute", workers: 1 })))
  )

  it.scoped(
    "a claimed run's start and lease count from when its job row was locked, not from when its tick began",
    () =>
      Effect.gen(function* () {
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        const release = yield* Deferred.make<void>()
        yield* runner.register("held", () => Deferred.await(release))
        yield* store.addJob({
          name: "held",
          taskType: "held",
          schedule: Schedule.daily({ hour: 9, minute: 0, tz: "UTC" })
        })
        yield* runner.start
        yield* FakeClock.advanceTo("2026-05-01T09:00:00Z")
        yield* settle(Effect.map(store.runsOf("held"), (runs) => runs.length > 0))
        // Started: the run as claimed (its handler has not finished, so nothing has written its start again). Let go
        // before the checks, so that a failed one does not leave the runner waiting for it at the end.
        const [run] = yield* store.runsOf("held")
        yield* Deferred.succeed(release, undefined)
        expect(run).toMatchObject({ status: "running" })
        // Due at 09:00; the claim's statements took 3 s before the row was locked (the JobStore below): the run starts
        // then, and its 30 s lease runs from then.
        expect(run!.startedAt?.toISOString()).toBe("2026-05-01T09:00:03.000Z")
        expect(run!.leaseUntil?.toISOString()).toBe("2026-05-01T09:00:33.000Z")
      }).pipe(
        Effect.provide(
          Runner.layer({ interval: "1 minute", workers: 1, leaseDuration: "30 seconds" }).pipe(
            // The first listing that finds a job due waits 3 s, as a statement waits for a lock or for the CPU.
            Layer.provide(
              Layer.effect(
                JobStore,
                Effect.gen(function* () {
                  const store = yield* JobStore
                  let waited = false
                  return {
                    ...store,
                    listDue: (now, limit, taskTypes) =>
                      Effect.tap(store.listDue(now, limit, taskTypes), (due) =>
                        waited || due.length === 0
                          ? Effect.void
                          : Effect.zipRight(
                              Effect.sync(() => (waited = true)),
                              FakeClock.advance("3 seconds")
                            )
                      )
                  }
                })
              )
            ),
            Layer.provideMerge(TestRunner.memoryPorts()),
            Layer.provideMerge(Layer.effectDiscard(FakeClock.quick)),
            Layer.provideMerge(Layer.effectDiscard(FakeClock.set("2026-05-01T08:59:00Z")))
          )
        )
      )
  )
})
