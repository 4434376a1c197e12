/**
 * Failures become recorded results: retries with backoff as durable rows, timeouts, every kind of handler error,
 * schedules that no longer decode, unknown task types.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Layer, Ref } from "effect"
import { type HandlerOptions, JobStore, QueueStore, Result, Runner, Schedule } from "../../src/index.js"
import { FakeClock, FakeStore, MemoryQueueStore } from "../../src/testing.js"
import { captureLogs, memoryQueueAndSettings, settle, testLayer } from "../support/runner.js"

const MINUTE = 60_000

/** The gate a FakeStore's result writes wait at while closed (a write in flight), and the looks at the tables. */
class WriteGate extends Context.Tag("test/WriteGate")<
  WriteGate,
  { readonly closed: Ref.Ref<Deferred.Deferred<void> | undefined>; readonly looks: Ref.Ref<number> }
>() {}

/** A FakeStore whose `completeRuns` waits while the gate is closed, and that counts `nextWakeAt` looks. */
const gatedStore = Layer.effectContext(
  Effect.gen(function* () {
    const { fake, store } = yield* FakeStore.make
    const closed = yield* Ref.make<Deferred.Deferred<void> | undefined>(undefined)
    const looks = yield* Ref.make(0)
    const completeRuns: typeof store.completeRuns = (completions) =>
      Effect.flatMap(Ref.get(closed), (gate) => (gate === undefined ? Effect.void : Deferred.await(gate))).pipe(
        Effect.zipRight(store.completeRuns(completions))
      )
    const nextWakeAt: typeof store.nextWakeAt = (now, taskTypes) =>
      Effect.zipRight(
        Ref.update(looks, (n) => n + 1),
        store.nextWakeAt(now, taskTypes)
      )
    return Context.make(JobStore, { ...store, completeRuns, nextWakeAt }).pipe(
      Context.add(FakeStore.FakeStore, fake),
      Context.add(WriteGate, { closed, looks })
    )
  })
)

describe("Runner retries", () => {
  it.scoped("a handler failing twice then succeeding leaves attempts 1, 2, 3 spaced by the backoff", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const count = yield* Ref.make(0)
      yield* runner.register("flaky", () =>
        Effect.gen(function* () {
          const n = yield* Ref.updateAndGet(count, (x) => x + 1)
          if (n <= 2) return yield* Effect.fail(new Error(`failure ${n}`))
          return { ok: n }
        })
      )
      yield* store.addJob({ name: "flaky", taskType: "flaky", schedule: Schedule.daily({ hour: 1, minute: 0 }) })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T02:00:00Z")
      const runs = yield* store.runsOf("flaky")
      expect(runs.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "failed"],
        [3, "success"]
      ])
      expect(runs.map((r) => r.error)).toEqual(["failure 1", "failure 2", null])
      expect(runs[2]!.output).toBe(`{"ok":3}`)
      expect(new Set(runs.map((r) => r.scheduledFor.toISOString()))).toEqual(new Set(["2026-01-01T01:00:00.000Z"]))
      const gap1 = runs[1]!.startedAt!.getTime() - runs[0]!.finishedAt!.getTime()
      const gap2 = runs[2]!.startedAt!.getTime() - runs[1]!.finishedAt!.getTime()
      // retryBackoff 1 minute: 1 min then 2 min, each times a jitter in [0.9, 1.1].
      expect(gap1).toBeGreaterThanOrEqual(0.9 * MINUTE)
      expect(gap1).toBeLessThanOrEqual(1.1 * MINUTE)
      expect(gap2).toBeGreaterThanOrEqual(1.8 * MINUTE)
      expect(gap2).toBeLessThanOrEqual(2.2 * MINUTE)
    }).pipe(Effect.provide(testLayer({ retryBackoff: "1 minute", interval: "1 hour" })))
  )

  it.scoped("a retry starts when due though the runner looked at the tables while its failure was being written", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const gate = yield* WriteGate
      const release = yield* Deferred.make<void>()
      // "long" holds its worker (and its run's 30 s lease) throughout; "bad" fails at once.
      yield* runner.register("long", () => Deferred.await(release))
      // Whatever the outcome, "long" ends: the runner then stops without waiting out its grace period.
      yield* Effect.gen(function* () {
        yield* runner.register("bad", () => Effect.fail(new Error("no")))
        for (const name of ["long", "bad"])
          yield* store.addJob({ name, taskType: name, schedule: Schedule.interval({ every: "1 hour" }) })
        yield* runner.start
        // The failure's write waits at the gate; meanwhile the runner (its worker freed) looks at the tables, which
        // still say "bad" runs, as "long" does: leases expiring in 30 s.
        const writing = yield* Deferred.make<void>()
        yield* Ref.set(gate.closed, writing)
        const looksBefore = yield* Ref.get(gate.looks)
        yield* FakeClock.advanceTo("2026-01-01T01:00:00Z")
        yield* settle(Effect.map(Ref.get(gate.looks), (n) => n > looksBefore))
        yield* Ref.set(gate.closed, undefined)
        yield* Deferred.succeed(writing, undefined)
        yield* settle(Effect.map(store.runsOf("bad"), (runs) => runs.length === 2))
        // The retry is due 1 s (jittered) after the failure: it runs then, not when the leases expire.
        yield* FakeClock.advance("2 seconds")
        const runs = yield* store.runsOf("bad")
        expect(runs.map((r) => [r.attempt, r.status])).toEqual([
          [1, "failed"],
          [2, "failed"],
          [3, "pending"]
        ])
        expect(runs[1]!.startedAt!.getTime() - runs[0]!.finishedAt!.getTime()).toBeLessThanOrEqual(1_100)
      }).pipe(Effect.ensuring(Deferred.succeed(release, undefined)))
    }).pipe(
      Effect.provide(
        Runner.layer({ workers: 2, interval: "1 minute", retryAttempts: 2, retryBackoff: "1 second" }).pipe(
          Layer.provideMerge(Layer.merge(gatedStore, memoryQueueAndSettings))
        )
      )
    )
  )

  it.scoped(
    "a handler failing forever has exactly 1 + retryAttempts rows per slot, and the next slot still comes",
    () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("broken", () => Promise.reject(new Error("always")))
        yield* store.addJob({ name: "broken", taskType: "broken", schedule: Schedule.daily({ hour: 1, minute: 0 }) })
        yield* runner.start
        yield* FakeClock.advanceTo("2026-01-03T00:00:00Z")
        const runs = yield* store.runsOf("broken")
        const bySlot = new Map<string, Array<number>>()
        for (const r of runs) {
          const key = r.scheduledFor.toISOString()
          bySlot.set(key, [...(bySlot.get(key) ?? []), r.attempt])
          expect(r.status).toBe("failed")
          expect(r.error).toBe("always")
        }
        expect([...bySlot.entries()]).toEqual([
          ["2026-01-01T01:00:00.000Z", [1, 2, 3, 4]],
          ["2026-01-02T01:00:00.000Z", [1, 2, 3, 4]]
        ])
      }).pipe(Effect.provide(testLayer({ retryAttempts: 3, interval: "1 hour" })))
  )

  it.scoped("a hanging handler is interrupted at its timeout, recorded with an error naming it, and retried", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const aborted = yield* Ref.make(0)
      yield* runner.register(
        "hang",
        (_job, signal) =>
          new Promise<never>(() => {
            signal.addEventListener("abort", () => Effect.runSync(Ref.update(aborted, (n) => n + 1)))
          }),
        { timeout: "30 seconds" }
      )
      yield* store.addJob({ name: "hang", taskType: "hang", schedule: Schedule.daily({ hour: 1, minute: 0 }) })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T01:00:29Z")
      expect((yield* store.runsOf("hang")).map((r) => r.status)).toEqual(["running"])
      yield* FakeClock.advanceTo("2026-01-01T01:00:31Z")
      const [first] = yield* store.runsOf("hang")
      expect(first!.status).toBe("failed")
      expect(first!.error).toBe("timed out after 30s: the handler was interrupted")
      expect(first!.finishedAt!.toISOString()).toBe("2026-01-01T01:00:30.000Z")
      expect(yield* Ref.get(aborted)).toBe(1)
      // Retried like any failure: attempt 2 is pending, due after the backoff.
      const runs = yield* store.runsOf("hang")
      expect(runs.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "pending"]
      ])
      yield* FakeClock.advanceTo("2026-01-01T01:02:00Z")
      // retryAttempts 1: the second attempt times out too, and that slot is done.
      const after = yield* store.runsOf("hang")
      expect(after.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "failed"]
      ])
      expect(after[1]!.error).toBe("timed out after 30s: the handler was interrupted")
    }).pipe(Effect.provide(testLayer({ retryAttempts: 1, retryBackoff: "30 seconds", interval: "1 hour" })))
  )
})

describe("Runner records every kind of handler failure, never crashing", () => {
  const cases: ReadonlyArray<readonly [string, Runner.RecurringJob["taskType"], (job: unknown) => unknown, string]> = [
    [
      "a thrown exception",
      "throws",
      () => {
        throw new Error("thrown")
      },
      "thrown"
    ],
    [
      "a rejected promise",
      "rejects",
      async () => {
        throw new Error("rejected")
      },
      "rejected"
    ],
    ["an Effect failure", "fails", () => Effect.fail(new Error("failed")), "failed"],
    ["an Effect defect", "dies", () => Effect.die(new Error("died hard")), "died: died hard"],
    ["an interruption", "interrupts", () => Effect.interrupt, "interrupted: the handler was interrupted"],
    [
      "a thrown string",
      "throws-string",
      () => {
        throw "plain"
      },
      "plain"
    ],
    [
      "a returned value whose `then` getter throws",
      "hostile-then",
      () => ({
        get then(): never {
          throw new Error("then getter")
        }
      }),
      "then getter"
    ]
  ]
  for (const [name, taskType, handler, error] of cases) {
    it.scoped(`${name} is a failed run with its message`, () =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register(taskType, handler)
        yield* runner.register("fine", () => "ok")
        yield* store.addJob({ name: taskType, taskType, schedule: Schedule.interval({ every: "1 minute" }) })
        yield* store.addJob({ name: "fine", taskType: "fine", schedule: Schedule.interval({ every: "1 minute" }) })
        yield* runner.start
        yield* FakeClock.advance("1 minute")
        const [run] = yield* store.runsOf(taskType)
        expect(run!.status).toBe("failed")
        expect(run!.error).toBe(error)
        expect((yield* store.runsOf("fine")).map((r) => [r.status, r.output])).toEqual([["success", `"ok"`]])
        // The runner goes on: the next slot runs too.
        yield* FakeClock.advance("1 minute")
        expect((yield* store.runsOf("fine")).length).toBe(2)
      }).pipe(Effect.provide(testLayer({ retryAttempts: 0, workers: 2 })))
    )
  }
})

describe("Runner and bad stored data", () => {
  it.scoped(
    "a stored schedule that no longer decodes: one failed run, the job disabled, one log line, others unaffected",
    () =>
      captureLogs((logs) =>
        Effect.gen(function* () {
          yield* FakeClock.set("2026-01-01T00:00:00Z")
          const store = yield* FakeStore.FakeStore
          const runner = yield* Runner.Runner
          yield* runner.register("t", () => undefined)
          yield* store.addJob({ name: "good", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
          yield* store.addJob({ name: "bad", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
          yield* store.setStoredSchedule("bad", { _tag: "Daily", hour: 25, minute: 0 })
          yield* runner.start
          yield* FakeClock.advance("10 minutes")
          const bad = yield* store.runsOf("bad")
          expect(bad.length).toBe(1)
          expect(bad[0]!.status).toBe("failed")
          expect(bad[0]!.error).toContain("invalid stored schedule")
          expect(bad[0]!.error).toContain("hour must be an integer from 0 to 23")
          expect((yield* store.jobs).find((j) => j.name === "bad")!.enabled).toBe(false)
          const errors = (yield* Ref.get(logs)).filter((l) => l.startsWith("ERROR"))
          expect(errors.length).toBe(1)
          expect(errors[0]).toContain(`job "bad" disabled`)
          expect((yield* store.runsOf("good")).filter((r) => r.status === "success").length).toBe(10)
        })
      ).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
  )

  it.scoped("a job of a task type this runner has no handler for stays due: no run, its slot kept", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      yield* runner.register("t", () => undefined)
      yield* store.addJob({ name: "orphan", taskType: "nobody", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* store.addJob({ name: "mine", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
      yield* runner.start
      yield* FakeClock.advance("3 minutes")
      expect(yield* store.runsOf("orphan")).toEqual([])
      const orphan = (yield* store.jobs).find((j) => j.name === "orphan")!
      expect(orphan.nextRunAt?.toISOString()).toBe("2026-01-01T00:01:00.000Z")
      expect((yield* store.runsOf("mine")).length).toBe(3)
      // A handler registered later picks it up: the latest missed slot runs (no storm).
      yield* runner.register("nobody", () => undefined)
      yield* runner.tick
      expect((yield* store.runsOf("orphan")).map((r) => r.scheduledFor.toISOString())).toEqual([
        "2026-01-01T00:03:00.000Z"
      ])
    }).pipe(Effect.provide(testLayer({ interval: "1 minute" })))
  )
})

describe("Runner.register", () => {
  it.scoped("registering a task type again replaces its handler and logs a warning", () =>
    captureLogs((logs) =>
      Effect.gen(function* () {
        yield* FakeClock.set("2026-01-01T00:00:00Z")
        const store = yield* FakeStore.FakeStore
        const runner = yield* Runner.Runner
        yield* runner.register("t", () => "first")
        yield* runner.register("t", () => "second")
        yield* store.addJob({ name: "j", taskType: "t", schedule: Schedule.interval({ every: "1 minute" }) })
        yield* runner.start
        yield* FakeClock.advance("1 minute")
        expect((yield* store.runsOf("j")).map((r) => r.output)).toEqual([`"second"`])
        const warnings = (yield* Ref.get(logs)).filter((l) => l.startsWith("WARN"))
        expect(warnings).toEqual([`WARN handler for task type "t" registered again: the new one replaces it`])
      })
    ).pipe(Effect.provide(testLayer()))
  )

  it.scoped("an Effect handler gets the services it requires from where it was registered", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      const seen = yield* Deferred.make<string>()
      class Greeting extends Effect.Tag("test/Greeting")<Greeting, { readonly text: string }>() {}
      yield* runner
        .register("greet", (job) => Effect.flatMap(Greeting, (g) => Deferred.succeed(seen, `${g.text} ${job.payload}`)))
        .pipe(Effect.provideService(Greeting, { text: "hello" }))
      yield* store.addJob({
        name: "g",
        taskType: "greet",
        payload: "world",
        schedule: Schedule.interval({ every: "1 minute" })
      })
      yield* runner.start
      yield* FakeClock.advance("1 minute")
      expect(yield* Deferred.await(seen)).toBe("hello world")
    }).pipe(Effect.provide(testLayer()))
  )
})

describe("Runner with handlers that return a Result", () => {
  // The same handlers for both kinds of work: plain, async and Effect, each returning a failed Result, and one
  // returning a successful one.
  const registerAll = (runner: Runner.Runner["Type"], retry?: HandlerOptions["retry"]) =>
    Effect.gen(function* () {
      const options: HandlerOptions = { retry }
      yield* runner.register("plain", (job) => Result.failure(new Error(`plain no ${job.attempt}`)), options)
      yield* runner.register("async", async (job) => Result.failure(`async no ${job.attempt}`), options)
      yield* runner.register(
        "effect",
        (job) => Effect.succeed(Result.failure({ reason: "bad" }, `effect no ${job.attempt}`)),
        options
      )
      yield* runner.register("fine", () => Effect.succeed(Result.success({ a: 1 })), options)
    })

  it.scoped("a scheduled job's run is failed with the Result's message and retried as a throw would be", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const store = yield* FakeStore.FakeStore
      const runner = yield* Runner.Runner
      yield* registerAll(runner)
      for (const name of ["plain", "async", "effect", "fine"]) {
        yield* store.addJob({ name, taskType: name, schedule: Schedule.daily({ hour: 1, minute: 0 }) })
      }
      yield* runner.start
      yield* FakeClock.advanceTo("2026-01-01T02:00:00Z")
      for (const name of ["plain", "async", "effect"]) {
        const runs = yield* store.runsOf(name)
        expect(runs.map((r) => [r.attempt, r.status, r.error])).toEqual([
          [1, "failed", `${name} no 1`],
          [2, "failed", `${name} no 2`]
        ])
      }
      // A returned success records its output, not the Result around it.
      expect((yield* store.runsOf("fine")).map((r) => [r.status, r.output])).toEqual([["success", `{"a":1}`]])
    }).pipe(Effect.provide(testLayer({ retryAttempts: 1, retryBackoff: "1 minute", interval: "1 hour" })))
  )

  it.scoped("a queue item's execution is an error row with the Result's message, and its retry policy applies", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const memory = yield* MemoryQueueStore.MemoryQueue
      yield* registerAll(runner, { attempts: 2, backoff: "10s" })
      for (const taskType of ["plain", "async", "effect", "fine"]) {
        yield* queue.enqueue({ taskType, payload: taskType }, new Date())
      }
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 4))
      yield* FakeClock.advance("10 seconds")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 7))
      const rows = (yield* memory.processed).map((p) => [p.taskType, p.status, p.errorMsg])
      expect(rows.slice(0, 4).sort()).toEqual([
        ["async", "error", "async no 1"],
        ["effect", "error", "effect no 1"],
        ["fine", "ok", ""],
        ["plain", "error", "plain no 1"]
      ])
      expect(rows.slice(4).sort()).toEqual([
        ["async", "error", "async no 2"],
        ["effect", "error", "effect no 2"],
        ["plain", "error", "plain no 2"]
      ])
      // Two attempts spent: given up, nothing left queued.
      expect(yield* memory.items).toEqual([])
    }).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )
})
