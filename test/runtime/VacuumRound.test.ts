/**
 * The runner's queue vacuum round under the test clock, over a store whose `vacuum` answers what the test scripts:
 * it looks when executions end, at most once a second and never while none do, says once why a role may not vacuum and
 * then asks no more, and logs a failing database once until it answers again (the round itself never ends).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Logger, LogLevel, TestClock } from "effect"
import { withDefaults } from "../../src/domain/SchedulerConfig.js"
import { QueueStoreError, type QueueStore, type VacuumOutcome, type VacuumRequest } from "../../src/ports/QueueStore.js"
import * as Signal from "../../src/runtime/Signal.js"
import * as VacuumRound from "../../src/runtime/VacuumRound.js"
import { supervised } from "../../src/runtime/Supervised.js"

type Answer = VacuumOutcome | "fail" | "die"

/** A round over a store answering `answers` in turn (the last one from then on), with its calls and log lines. */
const scripted = (answers: ReadonlyArray<Answer>, deadRows = 20_000) => {
  const calls: Array<VacuumRequest> = []
  const lines: Array<string> = []
  const executionEnded = Signal.make()
  const store = {
    vacuum: (request: VacuumRequest) =>
      Effect.suspend(() => {
        calls.push(request)
        const answer = answers[Math.min(calls.length, answers.length) - 1]!
        if (answer === "fail")
          return Effect.fail(new QueueStoreError({ reason: "Unavailable", message: "connection refused" }))
        if (answer === "die") return Effect.die(new Error("boom"))
        return Effect.succeed(answer)
      })
  } as unknown as QueueStore["Type"]
  const round = VacuumRound.make({
    config: withDefaults({ vacuumDeadRows: deadRows }),
    queueStore: store,
    owner: "me",
    executionEnded
  })
  const logger = Logger.make(({ logLevel, message }) => {
    lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  const run = supervised("queue vacuum", round.round).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Logger.withMinimumLogLevel(LogLevel.Debug),
    Effect.fork
  )
  return {
    calls,
    lines,
    run,
    finish: (n: number) => {
      for (let i = 0; i < n; i++) executionEnded.raise()
    }
  }
}

/** Lets `seconds` pass, a second at a time, with `perSecond` executions finished in each. */
const seconds = (s: ReturnType<typeof scripted>, count: number, perSecond: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < count; i++) {
      s.finish(perSecond)
      yield* TestClock.adjust("1 second")
    }
  })

describe("the queue vacuum round", () => {
  it.effect("looks once a second while executions finish, with the configured threshold, and never while none do", () =>
    Effect.gen(function* () {
      const s = scripted([{ _tag: "Clean", deadRows: 10 }], 5_000)
      const fiber = yield* s.run
      yield* seconds(s, 5, 0)
      expect(s.calls).toHaveLength(0)
      // Ends at 5, 6 and 7 s: a look at once at each, and one more at 8 s for the ends of 7 s that came after its look
      // (a look a second at most, none lost).
      yield* seconds(s, 3, 10)
      expect(s.calls.map((c) => c.now.getTime())).toEqual([5000, 6000, 7000, 8000])
      expect(s.calls[0]).toMatchObject({ owner: "me", deadRows: 5_000, leaseMs: 120_000, gapMs: 1_000, gapFactor: 4 })
      yield* seconds(s, 4, 0)
      expect(s.calls).toHaveLength(4)
      expect(s.lines).toEqual([])
      yield* Fiber.interrupt(fiber)
    })
  )

  it.effect("logs each vacuum it made, at debug level (routine upkeep)", () =>
    Effect.gen(function* () {
      const s = scripted([
        { _tag: "Busy" },
        { _tag: "Vacuumed", tables: [{ table: "queue_items", deadRows: 21_234, ms: 87.4 }] },
        { _tag: "Clean", deadRows: 0 }
      ])
      const fiber = yield* s.run
      yield* seconds(s, 4, 1)
      expect(s.calls).toHaveLength(4)
      expect(s.lines).toEqual(["DEBUG queue vacuum: vacuumed queue_items (21,234 dead rows) in 87 ms"])
      yield* Fiber.interrupt(fiber)
    })
  )

  it.effect("a role that may not vacuum is told once, and the round asks no more", () =>
    Effect.gen(function* () {
      const s = scripted([{ _tag: "NotPermitted", reason: 'role "app" may not vacuum s.queue_items' }])
      const fiber = yield* s.run
      yield* seconds(s, 10, 5)
      expect(s.calls).toHaveLength(1)
      expect(s.lines).toHaveLength(1)
      expect(s.lines[0]).toMatch(/^WARN queue vacuum: role "app" may not vacuum s\.queue_items; this worker leaves/)
      yield* Fiber.interrupt(fiber)
    })
  )

  it.effect("the database away: one line until it answers again, and the round goes on through defects too", () =>
    Effect.gen(function* () {
      const s = scripted(["fail", "fail", "fail", "die", "fail", { _tag: "Clean", deadRows: 0 }, "fail"])
      const fiber = yield* s.run
      yield* seconds(s, 8, 1)
      expect(s.calls).toHaveLength(8)
      expect(s.lines.map((l) => l.replace(/\n[\s\S]*/, ""))).toEqual([
        "WARN queue vacuum failed (trying again while work runs): connection refused",
        "ERROR queue vacuum failed (going on): boom",
        "INFO queue vacuum: the dead rows can be read again",
        "WARN queue vacuum failed (trying again while work runs): connection refused"
      ])
      yield* Fiber.interrupt(fiber)
    })
  )
})
