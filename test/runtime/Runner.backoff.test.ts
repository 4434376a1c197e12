/**
 * A failed tick's backoff, under the fake clock: it waits exactly what the log says, handlers finishing meanwhile do
 * not cut it short, and the database coming back (the wake-up listener reconnected) ends it at once. The leases held
 * through an outage are renewed as soon as the database is back, not a renewal period later.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, FiberRef, HashSet, Layer, Logger, Ref } from "effect"
import { QueueStore, QueueStoreError, Runner, WakeUps } from "../../src/index.js"
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
import { settle } from "../support/runner.js"

/**
 * The database's state as the test sets it: away or not (the listener is disconnected while it is), its connections
 * cut while it answers (`cut`: the listener stays connected), a statement that fails (`broken`), and the listener's
 * reconnect to call when it is back.
 */
class Database extends Context.Tag("test/Database")<
  Database,
  {
    readonly down: Ref.Ref<boolean>
    readonly cut: Ref.Ref<boolean>
    readonly broken: Ref.Ref<boolean>
    readonly reconnect: () => void
    /** Renewals answered as done and not kept (`lose`), as a failover to a standby that lagged loses them. */
    readonly lose: Ref.Ref<boolean>
    /** When (fake clock, ms) each renewal the database answered was made. */
    readonly renewals: Ref.Ref<ReadonlyArray<number>>
  }
>() {}

/**
 * The memory queue whose claims fail while the database is away, its connections are cut or its statement is broken
 * (results are still recorded: a handler finishing then wakes the runner as usual), whose lease renewals fail while it
 * is away or cut, and wake-ups whose listener the test reconnects.
 */
const awayLayer = Layer.effectContext(
  Effect.gen(function* () {
    const { memory, store } = yield* MemoryQueueStore.make
    const down = yield* Ref.make(false)
    const cut = yield* Ref.make(false)
    const broken = yield* Ref.make(false)
    const lose = yield* Ref.make(false)
    const renewals = yield* Ref.make<ReadonlyArray<number>>([])
    const wakeUps = yield* MemoryWakeUps.make
    let reconnected: (() => void) | undefined
    const claimBatch: (typeof store)["claimBatch"] = (options) =>
      Effect.gen(function* () {
        if (yield* Ref.get(down))
          return yield* new QueueStoreError({ reason: "Unavailable", message: "connection refused" })
        if (yield* Ref.get(cut))
          return yield* new QueueStoreError({
            reason: "Unavailable",
            message: "terminating connection due to administrator command"
          })
        if (yield* Ref.get(broken))
          return yield* new QueueStoreError({ reason: "Unknown", message: "function kairos_claim does not exist" })
        return yield* store.claimBatch(options)
      })
    const renewLeases: (typeof store)["renewLeases"] = (claims, leaseUntil, now) =>
      Effect.gen(function* () {
        if ((yield* Ref.get(down)) || (yield* Ref.get(cut)))
          return yield* new QueueStoreError({ reason: "Unavailable", message: "connection refused" })
        yield* Ref.update(renewals, (xs) => [...xs, now.getTime() - T0])
        if (yield* Ref.get(lose)) return claims.map(() => true)
        return yield* store.renewLeases(claims, leaseUntil, now)
      })
    return Context.make(QueueStore, { ...store, claimBatch, renewLeases }).pipe(
      Context.add(MemoryQueueStore.MemoryQueue, memory),
      Context.add(
        WakeUps,
        WakeUps.of({
          subscribe: (wake, onReconnect) =>
            Effect.suspend(() => {
              reconnected = onReconnect
              // Disconnected while the database is away.
              return Effect.as(wakeUps.subscribe(wake), { live: () => !Ref.get(down).pipe(Effect.runSync) })
            })
        })
      ),
      Context.add(Database, { down, cut, broken, reconnect: () => reconnected?.(), lose, renewals })
    )
  })
)

const testLayer = (config: Runner.RunnerOptions) =>
  Runner.layer({ ...TestRunner.testDefaults, ...config }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        awayLayer,
        FakeStore.layer,
        MemorySettings.layerFromDatabase,
        MemorySemaphore.layer(),
        MemoryWorkerRegistry.layer
      )
    ),
    Layer.provideMerge(MemoryDatabase.layer()),
    Layer.provideMerge(Layer.effectDiscard(FakeClock.quick))
  )

/** Runs `self` recording every line logged, with the fake clock's time (ms) when it was logged. */
const timedLogs = <A, E, R>(
  self: (lines: Ref.Ref<ReadonlyArray<{ at: number; line: string }>>) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function* () {
    const lines = yield* Ref.make<ReadonlyArray<{ at: number; line: string }>>([])
    const logger = Logger.make(({ date, logLevel, message }) => {
      const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
      Ref.update(lines, (xs) => [...xs, { at: date.getTime(), line: `${logLevel.label} ${text}` }]).pipe(Effect.runSync)
    })
    return yield* Effect.locally(self(lines), FiberRef.currentLoggers, HashSet.make(logger))
  })

const T0 = new Date("2026-01-01T00:00:00Z").getTime()

/** The failed ticks logged so far: when (ms after T0) and the wait they announced. */
const failedTicks = (lines: Ref.Ref<ReadonlyArray<{ at: number; line: string }>>) =>
  Effect.map(Ref.get(lines), (xs) =>
    xs.flatMap(({ at, line }) => {
      const m = /^ERROR tick failed \(retrying in (\w+),/.exec(line)
      return m === null ? [] : [{ at: at - T0, wait: m[1]! }]
    })
  )

/** The runner started at T0 with a "sleepy" handler (sleeps its payload's ms), and what the tests drive it with. */
const started = Effect.gen(function* () {
  yield* FakeClock.set(new Date(T0))
  const runner = yield* Runner.Runner
  const queue = yield* QueueStore
  const memory = yield* MemoryQueueStore.MemoryQueue
  const db = yield* Database
  yield* runner.register("sleepy", (job) => Effect.sleep(Number(job.payload)))
  yield* runner.start
  return { runner, queue, memory, db }
})

describe("a failed tick's backoff", () => {
  it.scoped("waits exactly what its log line says, however many handlers finish meanwhile", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory, queue, runner } = yield* started
        // 40 concurrent executions ending every 100 ms over 4 s, each freeing a worker (which wakes the runner).
        yield* queue.enqueueMany(
          Array.from({ length: 40 }, (_, i) => ({ taskType: "sleepy", payload: String(100 * (i + 1)), thread: 1 })),
          new Date(T0)
        )
        yield* settle(Effect.map(runner.running, (n) => n === 40))
        yield* Ref.set(db.down, true)
        yield* FakeClock.advance("7 seconds")
        // The first end (at 100 ms) wakes a tick, which fails; the 39 ends after it do not cut its 1 s short, nor
        // the 2 s and 4 s after it: the ticks come exactly when their lines said.
        expect(yield* failedTicks(lines)).toEqual([
          { at: 100, wait: "1s" },
          { at: 1100, wait: "2s" },
          { at: 3100, wait: "4s" }
        ])
        expect((yield* memory.processed).length).toBe(40)
        // Back: the tick at 7.1 s claims again.
        yield* Ref.set(db.down, false)
        yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
        yield* FakeClock.advance("99 millis")
        expect((yield* memory.processed).length).toBe(40)
        yield* FakeClock.advance("1 millis")
        yield* settle(Effect.map(memory.processed, (p) => p.length === 41))
        expect((yield* failedTicks(lines)).length).toBe(3)
      })
    ).pipe(Effect.provide(testLayer({ workers: 40, interval: "1 hour" })))
  )

  it.scoped("ends at once when the database is back (the wake-up listener reconnected), at any point of it", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory, queue } = yield* started
        yield* Ref.set(db.down, true)
        yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
        // Away for a while: ticks at 0, 1, 3, 7, 15 and 31 s; the last one waits 32 s.
        yield* FakeClock.advance("40 seconds")
        expect((yield* failedTicks(lines)).map((t) => [t.at, t.wait])).toEqual([
          [0, "1s"],
          [1000, "2s"],
          [3000, "4s"],
          [7000, "8s"],
          [15000, "16s"],
          [31000, "32s"]
        ])
        expect((yield* memory.processed).length).toBe(0)
        // Back at 40 s, 9 s into a 32 s wait: the listener's reconnect ends the wait with no clock movement.
        yield* Ref.set(db.down, false)
        db.reconnect()
        yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
        expect((yield* memory.processed)[0]!.startedAt.getTime() - T0).toBe(40_000)
        // Said once, so an outage's lines end with its end.
        expect((yield* Ref.get(lines)).filter((l) => l.line.startsWith("INFO"))).toEqual([
          {
            at: T0 + 40_000,
            line: "INFO the database is reachable again: ticked after 6 failed tick(s) (this tick took 0 ms)"
          }
        ])
        // The next failure starts the backoff over.
        yield* Ref.set(db.down, true)
        yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
        yield* settle(Effect.map(failedTicks(lines), (t) => t.length === 7))
        expect((yield* failedTicks(lines))[6]).toEqual({ at: 40_000, wait: "1s" })
      })
    ).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )

  it.scoped("a reconnect during the tick that fails ends the backoff that follows; one before it does not", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory, queue } = yield* started
        yield* FakeClock.advance("1 second")
        // A reconnect while all is well is forgotten: it cannot end a later backoff.
        db.reconnect()
        yield* FakeClock.advance("1 second")
        yield* Ref.set(db.down, true)
        yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
        yield* settle(Effect.map(failedTicks(lines), (t) => t.length === 1))
        yield* FakeClock.advance("999 millis")
        expect((yield* failedTicks(lines)).length).toBe(1)
        yield* FakeClock.advance("1 millis")
        yield* settle(Effect.map(failedTicks(lines), (t) => t.length === 2))
        expect(yield* failedTicks(lines)).toEqual([
          { at: 2000, wait: "1s" },
          { at: 3000, wait: "2s" }
        ])
        expect((yield* memory.processed).length).toBe(0)
      })
    ).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )

  it.scoped(
    "connections cut while the database answers (the listener stays connected): each failed tick waits 1 s, not a " +
      "doubled wait; a statement that fails still doubles",
    () =>
      timedLogs((lines) =>
        Effect.gen(function* () {
          const { db, memory, queue } = yield* started
          // An operator (or a proxy) ends every connection the runner opens, 8 ticks in a row: no reconnect of the
          // listener would end a doubled wait (it never lost its own), so each wait is the first step. The lines
          // thin out as in an outage: the 1st, 2nd, 4th and 8th say so.
          yield* Ref.set(db.cut, true)
          yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
          yield* FakeClock.advance("7500 millis")
          const cut = yield* failedTicks(lines)
          expect(cut).toEqual([0, 1000, 3000, 7000].map((at) => ({ at, wait: "1s" })))
          expect((yield* Ref.get(lines))[0]!.line).toBe(
            "ERROR tick failed (retrying in 1s, its connection was lost; the database answers; 1 in a row): " +
              "QueueStoreError: terminating connection due to administrator command"
          )
          expect((yield* Ref.get(lines))[3]!.line).toContain("; 8 in a row)")
          // The cuts end: the next tick, a second after the last (the 8th, at 7 s), runs the item.
          yield* Ref.set(db.cut, false)
          yield* FakeClock.advance("500 millis")
          yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
          expect((yield* memory.processed)[0]!.startedAt.getTime() - T0).toBe(8000)
          // A statement that fails with the listener connected (a migration missing, a permission revoked) is no
          // lost connection: it fails again soon, and its lines thin out as in an outage.
          yield* Ref.set(db.broken, true)
          yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
          yield* FakeClock.advance("10 seconds")
          expect((yield* failedTicks(lines)).slice(4)).toEqual([
            { at: 8000, wait: "1s" },
            { at: 9000, wait: "2s" },
            { at: 11000, wait: "4s" },
            { at: 15000, wait: "8s" }
          ])
          // Cut connections in the middle of that do not start the doubling over, nor wait longer than 1 s: the
          // failures at 23, 24, 25 and 26 s are the 5th to 8th in a row (after the broken statement's four), and the
          // 8th says so.
          yield* Ref.set(db.broken, false)
          yield* Ref.set(db.cut, true)
          yield* FakeClock.advance("8 seconds")
          expect((yield* failedTicks(lines)).slice(8)).toEqual([{ at: 26000, wait: "1s" }])
          // The database goes away (the listener with it): the doubling goes on from where the broken statement left it.
          yield* Ref.set(db.cut, false)
          yield* Ref.set(db.down, true)
          yield* FakeClock.advance("1 second")
          expect((yield* failedTicks(lines)).slice(9)).toEqual([{ at: 27000, wait: "16s" }])
        })
      ).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )

  it.scoped("a long outage logs a bounded number of lines: one at each doubling, then one a minute", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory, queue } = yield* started
        yield* Ref.set(db.down, true)
        yield* queue.enqueue({ taskType: "sleepy", payload: "0" }, new Date(T0))
        yield* FakeClock.advance("10 minutes")
        const ticks = yield* failedTicks(lines)
        // 0, 1, 3, 7, 15, 31 s, then every minute from 63 s to 543 s: 15 lines in 10 minutes.
        expect(ticks.map((t) => t.wait)).toEqual([
          "1s",
          "2s",
          "4s",
          "8s",
          "16s",
          "32s",
          ...Array.from({ length: 9 }, () => "1m")
        ])
        expect((yield* Ref.get(lines)).length).toBe(15)
        yield* Ref.set(db.down, false)
        db.reconnect()
        yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      })
    ).pipe(Effect.provide(testLayer({ workers: 4, interval: "1 hour" })))
  )
})

describe("leases held through an outage", () => {
  // A 30 s lease is renewed every 10 s; the item runs 100 s. The renewal at 10 s is answered and lost (a failover to
  // a standby a moment behind): the database holds the claim's lease, to 30 s, while the runner trusts one to 40 s.
  // The database is away from 15 s (the round at 20 s fails) and back at 25 s.
  const longRun = Effect.gen(function* () {
    const { db, memory, queue } = yield* started
    yield* queue.enqueue({ taskType: "sleepy", payload: "100000" }, new Date(T0))
    yield* settle(Effect.map(memory.items, (items) => items[0]?.inFlight === 1))
    yield* Ref.set(db.lose, true)
    yield* FakeClock.advance("10 seconds")
    yield* settle(Effect.map(Ref.get(db.renewals), (r) => r.length === 1))
    yield* Ref.set(db.lose, false)
    return { db, memory }
  })

  /** The run ends once, at 100 s, with no lease lost or taken back on the way. */
  const endsOnce = (
    lines: Ref.Ref<ReadonlyArray<{ at: number; line: string }>>,
    memory: MemoryQueueStore.MemoryQueue["Type"]
  ) =>
    Effect.gen(function* () {
      yield* FakeClock.advance("80 seconds")
      yield* settle(Effect.map(memory.processed, (p) => p.length === 1))
      const [run] = yield* memory.processed
      expect([run!.startedAt.getTime() - T0, run!.finishedAt.getTime() - T0]).toEqual([0, 100_000])
      expect((yield* Ref.get(lines)).filter((l) => /lease\(s\)/.test(l.line))).toEqual([])
    })

  it.scoped("are renewed as soon as the listener reconnects, not a renewal period later", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory } = yield* longRun
        yield* Ref.set(db.down, true)
        yield* FakeClock.advance("15 seconds")
        yield* Ref.set(db.down, false)
        db.reconnect()
        // What was renewed by now, whatever it is (the assertion says what was missing).
        yield* Effect.ignore(settle(Effect.map(Ref.get(db.renewals), (r) => r.length === 2)))
        // Renewed at 25 s, to 55 s: the next period's round (30 s) would have met a lease that ended then.
        expect(yield* Ref.get(db.renewals)).toEqual([10_000, 25_000])
        yield* endsOnce(lines, memory)
        // From the early round on, every 10 s.
        expect(yield* Ref.get(db.renewals)).toEqual([
          10_000, 25_000, 35_000, 45_000, 55_000, 65_000, 75_000, 85_000, 95_000
        ])
      })
    ).pipe(
      // A failed assertion leaves the long run going: the clock moves on so that the runner's stop ends.
      Effect.onError(() => FakeClock.advance("2 minutes")),
      Effect.provide(testLayer({ workers: 4, interval: "1 second", leaseDuration: "30 seconds" }))
    )
  )

  it.scoped("are renewed by the first tick that succeeds after failed ones, when no reconnect comes", () =>
    timedLogs((lines) =>
      Effect.gen(function* () {
        const { db, memory } = yield* longRun
        // Connections cut from 14.5 s to 25.5 s, the listener connected all along: the ticks from 15 s to 25 s fail,
        // the one at 26 s succeeds.
        yield* FakeClock.advance("4500 millis")
        yield* Ref.set(db.cut, true)
        yield* FakeClock.advance("11 seconds")
        yield* Ref.set(db.cut, false)
        yield* FakeClock.advance("500 millis")
        // What was renewed by now, whatever it is (the assertion says what was missing).
        yield* Effect.ignore(settle(Effect.map(Ref.get(db.renewals), (r) => r.length === 2)))
        expect(yield* Ref.get(db.renewals)).toEqual([10_000, 26_000])
        // Failed ticks at 15 to 25 s, their lines thinned out (the 1st, 2nd, 4th and 8th in a row).
        expect((yield* failedTicks(lines)).map((t) => t.at)).toEqual([15_000, 16_000, 18_000, 22_000])
        yield* endsOnce(lines, memory)
      })
    ).pipe(
      // A failed assertion leaves the long run going: the clock moves on so that the runner's stop ends.
      Effect.onError(() => FakeClock.advance("2 minutes")),
      Effect.provide(testLayer({ workers: 4, interval: "1 second", leaseDuration: "30 seconds" }))
    )
  )
})
