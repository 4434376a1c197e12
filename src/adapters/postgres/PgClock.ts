/**
 * The database's clock, followed by this process. Whose clock judges time: the database's. Every instance reads
 * "now" as its own monotonic time plus an offset measured against the database's `clock_timestamp()`, so all of
 * them agree within a round trip whatever their machines' clocks say: a lease, a due slot or a retry means the same
 * instant everywhere. The offset is measured at start (best of a few round trips) and again every minute; a
 * machine whose wall clock is stepped meanwhile changes nothing, since the local side is monotonic. A measurement
 * replaces the offset only when it is at least as tight as the last one has become with age (`keepsTighter`): on a
 * loaded machine every round trip of a measurement may be slow, and its offset off by half of one.
 *
 * Provided as Effect's `Clock` (the runtime's time port), so everything that reads the time follows it and
 * everything that sleeps sleeps as before: durations are the same on both clocks.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"

export interface Options {
  /** How often the offset is measured again. Default one minute. */
  readonly resyncEvery?: Duration.DurationInput | undefined
}

/** The clock and what it measured, for logs and tests. */
export interface DatabaseClock extends Clock.Clock {
  /** Database time minus this machine's wall-clock time, in ms, at the last measurement. */
  readonly skewMs: () => number
  /** How far the offset in use may be off, in ms, when it was measured: half that measurement's round trip. */
  readonly boundMs: () => number
}

/** Local monotonic time on the wall-clock scale of the process start (immune to later clock steps). */
const monotonicMs = () => performance.timeOrigin + performance.now()

/**
 * Samples per measurement: at least `MIN_SAMPLES`, and more, up to `MAX_SAMPLES`, while none came back within
 * `TIGHT_ROUND_TRIP_MS`; the one with the shortest round trip is kept (its midpoint is the tightest bound: the offset
 * is off by at most half of it). A process started on a loaded machine may see three slow round trips in a row;
 * two instances whose offsets are each off by half of one disagree by that much about every time they write.
 */
const MIN_SAMPLES = 3
const MAX_SAMPLES = 10
const TIGHT_ROUND_TRIP_MS = 2

/** One reading of the database's clock against this process's. */
export interface Sample {
  readonly roundTrip: number
  readonly offset: number
  readonly skew: number
}

/** The sample with the shortest round trip of a measurement (see `MIN_SAMPLES`). */
export const bestSample = <E, R>(sample: Effect.Effect<Sample, E, R>): Effect.Effect<Sample, E, R> =>
  Effect.gen(function* () {
    let best = yield* sample
    for (let n = 1; n < MAX_SAMPLES && (n < MIN_SAMPLES || best.roundTrip > TIGHT_ROUND_TRIP_MS); n++) {
      const next = yield* sample
      if (next.roundTrip < best.roundTrip) best = next
    }
    return best
  })

/**
 * How far the database's clock and this process's monotonic clock may drift apart, per ms: 500 ppm, the most an NTP
 * daemon slews a clock (hardware clocks drift far less). An offset measured within ±b ms is within ±(b + age × this).
 */
const DRIFT_PER_MS = 0.0005

/** How tight an offset is: half the round trip it was measured over, grown by the drift since. */
export interface Bound {
  /** Half the round trip of the sample, ms. */
  readonly halfRoundTrip: number
  /** When it was measured, on the monotonic clock (ms). */
  readonly at: number
}

/**
 * Whether a new measurement should replace the offset: when its bound (half its round trip) is no wider than the
 * current one's grown with age. A resync during a loaded moment (slow round trips all ten times) keeps the earlier,
 * tighter offset; a start that was itself loaded is replaced by the first tighter measurement.
 */
export const keepsTighter = (current: Bound | undefined, next: Sample, nowMs: number): boolean =>
  current === undefined || next.roundTrip / 2 <= current.halfRoundTrip + (nowMs - current.at) * DRIFT_PER_MS

/** A bound wider than this (ms) is measured again soon, not a minute later: a start on a loaded machine. */
const LOOSE_BOUND_MS = 10
/** How soon (see `LOOSE_BOUND_MS`), and how many times at most: a database far away stays loose, every minute. */
const LOOSE_RESYNC = Duration.seconds(5)
const LOOSE_RESYNCS = 6

/** Skew above which the start says so: it is harmless now, but the operator should know the machine's clock is off. */
const NOTABLE_SKEW_MS = 1000

/** Builds the clock: measures the offset now, and again every `resyncEvery` in a fiber of the scope. */
export const make = (
  options: Options = {}
): Effect.Effect<DatabaseClock, SqlError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const local = Clock.make()
    let offset = 0
    let skew = 0
    let last = 0

    let bound: Bound | undefined

    // Timed on a connection already held: the wait for one (a busy pool, a new connection on a loaded machine) comes
    // before the query reaches the database, and counted in the round trip it would put the offset ahead by up to
    // half that wait.
    const sample: Effect.Effect<Sample, SqlError> = Effect.scoped(
      Effect.gen(function* () {
        const connection = yield* sql.reserve
        const before = monotonicMs()
        const wallBefore = Date.now()
        const rows = yield* connection.executeValues("SELECT extract(epoch FROM clock_timestamp()) * 1000", [])
        const after = monotonicMs()
        const dbMs = Number(rows[0]![0])
        return {
          roundTrip: after - before,
          offset: dbMs - (before + after) / 2,
          skew: dbMs - (wallBefore + (after - before) / 2)
        }
      })
    )
    const measure = Effect.gen(function* () {
      const best = yield* bestSample(sample)
      const at = monotonicMs()
      if (!keepsTighter(bound, best, at)) {
        yield* Effect.logDebug(
          `the database clock measured within ±${(best.roundTrip / 2).toFixed(1)} ms; keeping the tighter offset`
        )
        return
      }
      offset = best.offset
      skew = best.skew
      bound = { halfRoundTrip: best.roundTrip / 2, at }
    })

    yield* measure
    if (Math.abs(skew) >= NOTABLE_SKEW_MS) {
      yield* Effect.logWarning(
        `this machine's clock is ${(Math.abs(skew) / 1000).toFixed(1)} s ${skew > 0 ? "behind" : "ahead of"} the ` +
          `database's: kairos follows the database's clock`
      )
    }
    const resyncEvery = Duration.decode(options.resyncEvery ?? "1 minute")
    // A failed measurement keeps the last offset: the database may be away for a while, time goes on regardless.
    // Sooner while the offset is loose (measured while the machine or the database was busy), a few times.
    let looseResyncs = 0
    const nextResync = Effect.suspend(() =>
      Effect.sleep(
        bound !== undefined && bound.halfRoundTrip > LOOSE_BOUND_MS && looseResyncs++ < LOOSE_RESYNCS
          ? Duration.min(resyncEvery, LOOSE_RESYNC)
          : resyncEvery
      )
    )
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.zipRight(
          nextResync,
          measure.pipe(
            Effect.catchAllCause((cause) =>
              Cause.isInterruptedOnly(cause)
                ? Effect.failCause(cause)
                : Effect.logDebug("measuring the database clock failed; keeping the last offset", cause)
            )
          )
        )
      )
    )

    // Never backwards: a new measurement that moves the offset back by a few ms holds the time still instead.
    const nowMs = () => {
      const t = monotonicMs() + offset
      if (t > last) last = t
      return last
    }
    const clock: DatabaseClock = {
      [Clock.ClockTypeId]: Clock.ClockTypeId,
      unsafeCurrentTimeMillis: () => Math.floor(nowMs()),
      currentTimeMillis: Effect.sync(() => Math.floor(nowMs())),
      unsafeCurrentTimeNanos: () => BigInt(Math.round(nowMs() * 1_000_000)),
      currentTimeNanos: Effect.sync(() => BigInt(Math.round(nowMs() * 1_000_000))),
      sleep: (duration) => local.sleep(duration),
      skewMs: () => skew,
      boundMs: () => bound?.halfRoundTrip ?? Number.POSITIVE_INFINITY
    }
    return clock
  })

/**
 * Makes the database's clock the clock of everything built after this layer (the runner, its stores) and of the
 * program it is provided to.
 */
export const layer = (options: Options = {}): Layer.Layer<never, SqlError, SqlClient.SqlClient> =>
  Layer.unwrapScoped(Effect.map(make(options), (clock) => Layer.setClock(clock)))
