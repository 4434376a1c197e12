/**
 * The database's clock as a process follows it (PgClock): which reading of the offset a measurement keeps, and a
 * measurement against a real Postgres. Integration: a real Postgres, no schema.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Ref } from "effect"
import { bestSample, keepsTighter, make, type Sample } from "../../src/adapters/postgres/PgClock.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { databaseUrl, PgTestClient } from "../support/database.js"

/** A sampler that answers `roundTrips` in turn (offset = round trip, to tell which one was kept) and counts calls. */
const scripted = (roundTrips: ReadonlyArray<number>) =>
  Effect.map(Ref.make(0), (calls) => ({
    calls,
    sample: Effect.map(
      Ref.getAndUpdate(calls, (n) => n + 1),
      (n): Sample => {
        const roundTrip = roundTrips[Math.min(n, roundTrips.length - 1)]!
        return { roundTrip, offset: roundTrip, skew: 0 }
      }
    )
  }))

describe("bestSample", () => {
  it.effect("takes three readings when one came back quickly, and keeps the quickest", () =>
    Effect.gen(function* () {
      const { calls, sample } = yield* scripted([1.5, 0.8, 1.2, 0.1])
      expect((yield* bestSample(sample)).roundTrip).toBe(0.8)
      expect(yield* Ref.get(calls)).toBe(3)
    })
  )

  it.effect("reads on while every round trip was slow, and stops at the first quick one", () =>
    Effect.gen(function* () {
      const { calls, sample } = yield* scripted([40, 35, 60, 50, 1.5, 0.2])
      const best = yield* bestSample(sample)
      expect(best.roundTrip).toBe(1.5)
      expect(best.offset).toBe(1.5)
      expect(yield* Ref.get(calls)).toBe(5)
    })
  )

  it.effect("gives up after ten slow readings, keeping the quickest of them", () =>
    Effect.gen(function* () {
      const { calls, sample } = yield* scripted([40, 35, 60, 50, 30, 45, 38, 33, 31, 29, 1])
      expect((yield* bestSample(sample)).roundTrip).toBe(29)
      expect(yield* Ref.get(calls)).toBe(10)
    })
  )
})

describe("keepsTighter", () => {
  const sample = (roundTrip: number): Sample => ({ roundTrip, offset: 0, skew: 0 })
  it("takes the first measurement, and one as tight as the last has become with age", () => {
    expect(keepsTighter(undefined, sample(4000), 0)).toBe(true)
    // Measured within ±1 ms at 0; a minute later it is within ±31 ms (500 ppm of drift).
    const bound = { halfRoundTrip: 1, at: 0 }
    expect(keepsTighter(bound, sample(2), 1)).toBe(true)
    expect(keepsTighter(bound, sample(60), 60_000)).toBe(true)
  })
  it("keeps the tighter offset over a measurement whose every round trip was slow (a loaded moment)", () => {
    const bound = { halfRoundTrip: 1, at: 0 }
    // 3.4 s round trips (a CI run's start): an offset off by up to 1.7 s, against one off by ~31 ms.
    expect(keepsTighter(bound, sample(3400), 60_000)).toBe(false)
    expect(keepsTighter(bound, sample(80), 60_000)).toBe(false)
  })
})

describe("PgClock.make", () => {
  it.scoped("reads the database's clock_timestamp() within a few ms", () =>
    Effect.gen(function* () {
      const clock = yield* make()
      const sql = yield* SqlClient.SqlClient
      for (let i = 0; i < 5; i++) {
        const before = clock.unsafeCurrentTimeMillis()
        const [row] = yield* sql<{ ms: number }>`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms`
        const after = clock.unsafeCurrentTimeMillis()
        // The database's reading falls between ours, give or take the offset's error (half a round trip at most).
        expect(Number(row!.ms)).toBeGreaterThanOrEqual(before - 20)
        expect(Number(row!.ms)).toBeLessThanOrEqual(after + 20)
      }
      // Effect's Clock interface, as the runtime reads it.
      const viaEffect = yield* Clock.currentTimeMillis.pipe(Effect.withClock(clock))
      expect(Math.abs(viaEffect - clock.unsafeCurrentTimeMillis())).toBeLessThan(1_000)
    }).pipe(Effect.provide(PgTestClient))
  )

  it.scopedLive(
    "does not count the wait for a pooled connection in its round trip (a busy pool)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // The pool's one connection busy with 0.3 s queries back to back: each reading waits for one to end first.
        yield* Effect.forkScoped(Effect.forever(sql`SELECT pg_sleep(0.3)`))
        yield* Effect.sleep("50 millis")
        const clock = yield* make()
        // Counted, the wait (~0.3 s a reading) would leave the offset off by up to ~150 ms, and ahead.
        expect(clock.boundMs()).toBeLessThan(20)
        const [row] = yield* sql<{ ms: number }>`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS ms`
        const after = clock.unsafeCurrentTimeMillis()
        expect(Number(row!.ms)).toBeLessThanOrEqual(after + 20)
      }).pipe(
        Effect.provide(PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 1, applicationName: "kairos-test" }))
      ),
    30_000
  )
})
