/**
 * Transactional handlers in the runner, on the memory adapters under the fake clock. The memory stores have no
 * database: a transactional handler runs, and its success is recorded at once, fenced, by its store's `transact`
 * (not batched by the results writer); its failures go to the writer, as every failure does. What the runner owes a
 * transactional execution whatever the store: its lease renewed all through a long handler and left alone while it
 * commits, its timeout, its signal, a lost lease refusing its record, a forced stop handing it back.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, type Duration, Effect, Layer, Logger } from "effect"
import { JobStore, JobStoreError, QueueStore, QueueStoreError, Runner, Schedule } from "../../src/index.js"
import type { ExecutionReport } from "../../src/runtime/Runner.js"
import { FakeClock, MemoryDatabase, MemoryJobStore, MemoryQueueStore } from "../../src/testing.js"
import * as TestRunner from "../../src/layers/TestRunner.js"
import * as MemorySettings from "../../src/adapters/memory/MemorySettings.js"
import { settle, testLayer } from "../support/runner.js"

/** How often each way of recording was called, and the leases each renewal round renewed. */
class Calls extends Context.Tag("test/Calls")<
  Calls,
  {
    transact: number
    recordResults: number
    recordAndClaim: number
    readonly renewed: Array<ReadonlyArray<string>>
    /** How long the next transactional executions take to "commit" after their handler returned (clock time). */
    commitDelay: Duration.DurationInput | undefined
    /** How many of the next transactional executions (queue items and job runs) cannot begin, and why. */
    unbegun: number
    unbegunReason: "Unavailable" | "Unknown"
    /** How many of the next transactional queue executions run, then lose their COMMIT's answer (not committed). */
    unanswered: number
  }
>() {}

/** The memory queue, counting its calls; `transact` can be made to take clock time after the handler returned. */
const spiedStores = Layer.effectContext(
  Effect.gen(function* () {
    const { memory, store: queue } = yield* MemoryQueueStore.make
    const jobs = yield* MemoryJobStore.make
    const calls: Calls["Type"] = {
      transact: 0,
      recordResults: 0,
      recordAndClaim: 0,
      renewed: [],
      commitDelay: undefined,
      unbegun: 0,
      unbegunReason: "Unavailable",
      unanswered: 0
    }
    // As a Postgres store fails when no connection can be had or its BEGIN goes unanswered: before the run runs.
    const unbegun = <E>(error: (reason: Calls["Type"]["unbegunReason"]) => E): Effect.Effect<never, E> | undefined =>
      calls.unbegun > 0 ? (calls.unbegun--, Effect.fail(error(calls.unbegunReason))) : undefined
    const message = (reason: Calls["Type"]["unbegunReason"]) =>
      reason === "Unavailable" ? "Connection terminated unexpectedly" : "invalid value for parameter"
    return Context.make(
      QueueStore,
      QueueStore.of({
        ...queue,
        transact: (run, record, options) =>
          Effect.suspend(() => {
            calls.transact++
            const refused = unbegun((reason) => new QueueStoreError({ reason, message: message(reason) }))
            if (refused !== undefined) return refused
            if (calls.unanswered > 0) {
              calls.unanswered--
              // The handler runs; then, as a COMMIT whose connection died unanswered (and that did not commit): the
              // store's failure, nothing recorded.
              const tx = { query: () => Promise.reject(new Error("no database")) }
              return Effect.zipRight(
                run(tx),
                Effect.fail(
                  new QueueStoreError({ reason: "Unavailable", message: "Connection terminated unexpectedly" })
                )
              )
            }
            const delay = calls.commitDelay
            return queue.transact(
              (tx) => (delay === undefined ? run(tx) : Effect.zipLeft(run(tx), Effect.sleep(delay))),
              record,
              options
            )
          }),
        recordResults: (results) =>
          Effect.suspend(() => {
            calls.recordResults++
            return queue.recordResults(results)
          }),
        recordAndClaim: (results, options) =>
          Effect.suspend(() => {
            calls.recordAndClaim++
            return queue.recordAndClaim(results, options)
          }),
        renewLeases: (claims, leaseUntil, now) =>
          Effect.suspend(() => {
            calls.renewed.push(claims.map((c) => c.item.id))
            return queue.renewLeases(claims, leaseUntil, now)
          })
      })
    ).pipe(
      Context.add(MemoryQueueStore.MemoryQueue, memory),
      Context.add(
        JobStore,
        JobStore.of({
          ...jobs.store,
          transact: (run, record, options) =>
            Effect.suspend(
              () =>
                unbegun((reason) => new JobStoreError({ reason, message: message(reason) })) ??
                jobs.store.transact(run, record, options)
            )
        })
      ),
      Context.add(MemoryJobStore.MemoryJobStore, jobs.fake),
      Context.add(Calls, calls)
    )
  })
).pipe(
  Layer.merge(MemorySettings.layerFromDatabase),
  Layer.merge(TestRunner.controlPorts()),
  Layer.provideMerge(MemoryDatabase.layer())
)

const reports: Array<ExecutionReport> = []
const logged: Array<string> = []
const recordLogs = Logger.replace(
  Logger.defaultLogger,
  Logger.make(({ logLevel, message }) => {
    logged.push(`${logLevel.label} ${Array.isArray(message) ? message.map(String).join(" ") : String(message)}`)
  })
)

const spiedLayer = (config: Parameters<typeof Runner.layer>[0]) =>
  Runner.layer({
    interval: "1 minute",
    heartbeatInterval: "1 day",
    onExecution: (report) => void reports.push(report),
    ...config
  }).pipe(Layer.provideMerge(spiedStores))

const start = Effect.gen(function* () {
  reports.length = 0
  logged.length = 0
  yield* FakeClock.set("2026-01-01T00:00:00Z")
  return {
    runner: yield* Runner.Runner,
    queue: yield* QueueStore,
    memory: yield* MemoryQueueStore.MemoryQueue,
    calls: yield* Calls
  }
})

describe("transactional handlers (memory stores)", () => {
  it.scoped("a success is recorded by the store's transact, at once and fenced; the results writer records none", () =>
    Effect.gen(function* () {
      const { calls, memory, queue, runner } = yield* start
      const seen: Array<string> = []
      yield* runner.register(
        "tx",
        (job, tx) => Effect.sync(() => void seen.push(`${job.payload}:${tx.signal.aborted}`)),
        {
          transactional: true
        }
      )
      for (const payload of ["a", "b", "c"]) yield* queue.enqueue({ taskType: "tx", payload, thread: 1 }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 3))
      expect(seen.sort()).toEqual(["a:false", "b:false", "c:false"])
      expect((yield* memory.processed).map((p) => p.status)).toEqual(["ok", "ok", "ok"])
      expect(yield* memory.items).toEqual([])
      expect(calls.transact).toBe(3)
      expect(calls.recordResults + calls.recordAndClaim).toBe(0)
      expect(reports.map((r) => r.outcome)).toEqual(["ok", "ok", "ok"])
      expect((yield* runner.stats).ok).toBe(3)
    }).pipe(Effect.provide(spiedLayer({ workers: 2 })), Effect.provide(recordLogs))
  )

  it.scoped("a failure is handed to the results writer, recorded there, and retried per the type's policy", () =>
    Effect.gen(function* () {
      const { calls, memory, queue, runner } = yield* start
      yield* runner.register(
        "flaky",
        async (job) => {
          if (job.attempt === 1) throw new Error("first attempt fails")
          return "fine"
        },
        { transactional: true, retry: { attempts: 2, backoff: "1 second" } }
      )
      yield* queue.enqueue({ taskType: "flaky", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      yield* FakeClock.advance("1 second")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 2))
      expect((yield* memory.processed).map((p) => [p.status, p.errorMsg])).toEqual([
        ["error", "first attempt fails"],
        ["ok", ""]
      ])
      expect(calls.transact).toBe(2)
      // The failure only: the success was recorded by transact.
      expect(calls.recordResults + calls.recordAndClaim).toBe(1)
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("a long handler keeps its lease renewed, many leases long", () =>
    Effect.gen(function* () {
      const { calls, memory, queue, runner } = yield* start
      yield* runner.register("long", () => Effect.sleep("5 minutes"), { transactional: true, timeout: "1 hour" })
      const item = yield* queue.enqueue({ taskType: "long", payload: "x" }, new Date())
      yield* runner.start
      for (let i = 0; i < 30; i++) yield* FakeClock.advance("10 seconds")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      expect((yield* memory.processed).map((p) => p.status)).toEqual(["ok"])
      expect(reports.map((r) => r.outcome)).toEqual(["ok"])
      // Renewed every third of the 30 s lease, for five minutes.
      expect(calls.renewed.filter((ids) => ids.includes(item.id)).length).toBeGreaterThanOrEqual(25)
      expect(logged.filter((l) => l.includes("lease"))).toEqual([])
    }).pipe(Effect.provide(spiedLayer({ leaseDuration: "30 seconds" })), Effect.provide(recordLogs))
  )

  it.scoped("while it commits, its lease is left alone: not renewed (the row is locked), not given up", () =>
    Effect.gen(function* () {
      const { calls, memory, queue, runner } = yield* start
      yield* runner.register("slow-commit", () => undefined, { transactional: true })
      // Past the lease's trust deadline (27 s after its last renewal, with a 30 s lease), before it expires: in
      // Postgres the record's row lock keeps anyone from taking it back meanwhile; memory has no locks.
      calls.commitDelay = "29 seconds"
      const item = yield* queue.enqueue({ taskType: "slow-commit", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.sync(() => calls.transact === 1))
      for (let i = 0; i < 5; i++) yield* FakeClock.advance("5 seconds")
      expect(yield* memory.processed).toEqual([])
      yield* FakeClock.advance("5 seconds")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      expect((yield* memory.processed).map((p) => p.status)).toEqual(["ok"])
      expect(reports.map((r) => r.outcome)).toEqual(["ok"])
      // Renewal rounds came (every 10 s) and left it out; the lease watch did not give it up.
      expect(calls.renewed.filter((ids) => ids.includes(item.id))).toEqual([])
      expect(logged.filter((l) => l.includes("lease"))).toEqual([])
    }).pipe(Effect.provide(spiedLayer({ leaseDuration: "30 seconds" })), Effect.provide(recordLogs))
  )

  it.scoped("a lease lost at the record refuses it: nothing recorded, reported lost, said once", () =>
    Effect.gen(function* () {
      const { memory, queue, runner } = yield* start
      let cancelled = false
      yield* runner.register(
        "doomed",
        (job) =>
          Effect.gen(function* () {
            // Cancelled while it runs: its lease goes with the item, and its record is refused.
            yield* Effect.orDie(queue.cancel(job.id))
            cancelled = true
          }),
        { transactional: true }
      )
      yield* queue.enqueue({ taskType: "doomed", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.sync(() => reports.length === 1))
      expect(cancelled).toBe(true)
      expect(reports.map((r) => r.outcome)).toEqual(["lost"])
      expect(yield* memory.processed).toEqual([])
      expect(logged.filter((l) => l.includes("result refused"))).toEqual([
        "WARN result refused: the execution's lease was lost; its transaction was rolled back, the handler's writes with it"
      ])
      expect((yield* runner.stats).failed).toBe(1)
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("a timeout aborts tx.signal with the timeout and records the execution as timed out", () =>
    Effect.gen(function* () {
      const { memory, queue, runner } = yield* start
      const reasons: Array<unknown> = []
      yield* runner.register(
        "hangs",
        (_job, tx) =>
          new Promise<never>(() => {
            tx.signal.addEventListener("abort", () => reasons.push(tx.signal.reason))
          }),
        { transactional: true, timeout: "5 seconds" }
      )
      yield* queue.enqueue({ taskType: "hangs", payload: "x" }, new Date())
      yield* runner.start
      yield* FakeClock.advance("4 seconds")
      expect(yield* memory.processed).toEqual([])
      yield* FakeClock.advance("1 second")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      expect((yield* memory.processed).map((p) => [p.status, p.errorMsg])).toEqual([
        ["error", "timed out after 5s: the handler was interrupted"]
      ])
      expect(reasons.length).toBe(1)
      expect(String(reasons[0])).toContain("timed out after 5s")
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("tx.query in memory is refused, saying there is no database: the handler's failure names it", () =>
    Effect.gen(function* () {
      const { memory, queue, runner } = yield* start
      yield* runner.register("sql", async (_job, tx) => tx.query("SELECT 1"), { transactional: true })
      yield* queue.enqueue({ taskType: "sql", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      const [row] = yield* memory.processed
      expect(row!.status).toBe("error")
      expect(row!.errorMsg).toContain("memory stores have no database")
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("a forced stop interrupts a running transactional handler and hands its work back", () =>
    Effect.gen(function* () {
      const { memory, queue, runner } = yield* start
      let interrupted = false
      yield* runner.register(
        "stuck",
        () => Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => void (interrupted = true)))),
        { transactional: true }
      )
      yield* queue.enqueue({ taskType: "stuck", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.map(runner.running, (n) => n === 1))
      yield* TestRunner.stop
      expect(interrupted).toBe(true)
      expect(reports.map((r) => r.outcome)).toEqual(["interrupted"])
      expect(yield* memory.processed).toEqual([])
      expect((yield* memory.items).map((i) => [i.status, i.inFlight])).toEqual([["pending", 0]])
    }).pipe(Effect.provide(spiedLayer({ gracePeriod: "1 second" })), Effect.provide(recordLogs))
  )

  // The two ways a transaction fails for want of the database: before its handler runs, or after (its COMMIT
  // unanswered, and not committed). Either way the execution is let go, nothing recorded, and runs again once its
  // lease expires.
  for (const [what, fail, ranBefore, line] of [
    [
      "cannot begin (no database): let go unrun",
      (calls: Calls["Type"]) => void (calls.unbegun = 1),
      0,
      "WARN a transactional execution could not begin its transaction (Connection terminated unexpectedly): the handler did not run; let go, nothing recorded, it runs again once its lease is taken back"
    ],
    [
      "COMMIT goes unanswered (not committed): let go after its handler ran",
      (calls: Calls["Type"]) => void (calls.unanswered = 1),
      1,
      "WARN a transactional execution's record or COMMIT went unanswered (Connection terminated unexpectedly): whether it committed is not known; let go, nothing more recorded: unless it committed, it runs again once its lease is taken back"
    ]
  ] as const) {
    it.scoped(`a queue item whose transaction ${what}, nothing recorded; it runs again once its lease expires`, () =>
      Effect.gen(function* () {
        const { calls, memory, queue, runner } = yield* start
        let ran = 0
        yield* runner.register("tx", () => Effect.sync(() => void ran++), { transactional: true })
        fail(calls)
        yield* queue.enqueue({ taskType: "tx", payload: "x" }, new Date())
        yield* runner.start
        yield* settle(Effect.sync(() => reports.length === 1))
        // Not a failure of the item's: no record, no run used up; the worker is free and the lease no longer renewed.
        expect(reports.map((r) => r.outcome)).toEqual(["lost"])
        expect(ran).toBe(ranBefore)
        expect(yield* memory.processed).toEqual([])
        expect(yield* runner.running).toBe(0)
        expect(logged.filter((l) => l.includes("let go"))).toEqual([line])
        const renewals = calls.renewed.length
        yield* FakeClock.advance("29 seconds")
        expect(calls.renewed.slice(renewals).flat()).toEqual([])
        expect(yield* memory.processed).toEqual([])
        // Past its lease (30 s), a claim takes it back, and it runs: one record, a success.
        yield* FakeClock.advance("1 minute")
        yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
        expect((yield* memory.processed).map((p) => p.status)).toEqual(["ok"])
        expect(ran).toBe(ranBefore + 1)
        expect(calls.transact).toBe(2)
        expect(yield* memory.items).toEqual([])
      }).pipe(Effect.provide(spiedLayer({ leaseDuration: "30 seconds" })), Effect.provide(recordLogs))
    )
  }

  it.scoped("a transaction that cannot begin for another reason (a statement refused) is the execution's failure", () =>
    Effect.gen(function* () {
      const { calls, memory, queue, runner } = yield* start
      let ran = 0
      yield* runner.register("tx", () => Effect.sync(() => void ran++), { transactional: true })
      calls.unbegun = 1
      calls.unbegunReason = "Unknown"
      yield* queue.enqueue({ taskType: "tx", payload: "x" }, new Date())
      yield* runner.start
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      // Recorded, as before: a refusal that would come back every time must not go round for ever.
      expect((yield* memory.processed).map((p) => [p.status, p.errorMsg])).toEqual([
        ["error", "the handler's transaction failed: invalid value for parameter"]
      ])
      expect(reports.map((r) => r.outcome)).toEqual(["failed"])
      expect(ran).toBe(0)
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("a job's run whose transaction cannot begin is let go unrun, and its slot runs again at once", () =>
    Effect.gen(function* () {
      const { calls, runner } = yield* start
      const memory = yield* MemoryJobStore.MemoryJobStore
      let ran = 0
      yield* runner.register("report", () => Effect.sync(() => void ran++), { transactional: true })
      yield* runner.defineJobs([
        { name: "hourly", taskType: "report", schedule: Schedule.interval({ every: "1 hour" }) }
      ])
      calls.unbegun = 1
      yield* runner.start
      yield* FakeClock.advance("1 hour")
      yield* settle(Effect.sync(() => reports.length === 1))
      expect(reports.map((r) => r.outcome)).toEqual(["lost"])
      expect(ran).toBe(0)
      // The next claim (the next poll) lets the run go, as one this runner no longer runs, and retries its slot.
      yield* FakeClock.advance("1 minute")
      yield* settle(Effect.sync(() => ran === 1))
      const runs = yield* memory.runs
      expect(runs.map((r) => [r.scheduledFor.toISOString(), r.attempt, r.status])).toEqual([
        ["2026-01-01T01:00:00.000Z", 1, "failed"],
        ["2026-01-01T01:00:00.000Z", 2, "success"]
      ])
      expect(runs[0]!.error).toContain("no longer runs it")
    }).pipe(Effect.provide(spiedLayer({})), Effect.provide(recordLogs))
  )

  it.scoped("a scheduled job's transactional run is recorded with its output; a failed one is retried", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-01-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const memory = yield* MemoryJobStore.MemoryJobStore
      let calls = 0
      yield* runner.register(
        "report",
        (job) =>
          Effect.suspend(() =>
            ++calls === 1 ? Effect.fail("not yet") : Effect.succeed({ slot: job.scheduledFor.toISOString() })
          ),
        { transactional: true }
      )
      yield* runner.defineJobs([
        { name: "hourly", taskType: "report", schedule: Schedule.interval({ every: "1 hour" }) }
      ])
      yield* runner.start
      yield* FakeClock.advance("1 hour")
      yield* FakeClock.advance("5 minutes")
      const runs = yield* memory.runs
      expect(runs.map((r) => [r.attempt, r.status])).toEqual([
        [1, "failed"],
        [2, "success"]
      ])
      expect(JSON.parse(runs[1]!.output!)).toEqual({ slot: "2026-01-01T01:00:00.000Z" })
    }).pipe(Effect.provide(testLayer({ retryBackoff: "1 minute" })))
  )
})
