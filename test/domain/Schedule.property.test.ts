/**
 * Properties of Schedule.next over random zones, wall times and instants in 2000–2040. Random instants almost
 * never land near a DST change, so the generators aim at each zone's transitions (and at wall times inside the
 * gap or overlap) most of the time. Effect's DateTime (`disambiguation: "compatible"`) is the independent oracle.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc, Option } from "effect"
import { Schedule } from "../../src/index.js"
import { allZones, dateExists, localDay, resolve, time, transitionsIn, wallOf } from "../support/zones.js"

const { DAY, HOUR, MINUTE } = time
const MIN_INSTANT = Date.UTC(2000, 0, 1)
const MAX_INSTANT = Date.UTC(2040, 11, 31)
const RUNS = Number(process.env["KAIROS_PROPERTY_RUNS"] ?? 400)

interface Case {
  readonly tz: string
  readonly from: number
  readonly hour: number
  readonly minute: number
  readonly weekday: number
}

/** An instant and a wall time, aimed at one of the zone's transitions in a random year most of the time. */
const caseArb: fc.Arbitrary<Case> = fc
  .record({
    tz: fc.constantFrom(...allZones),
    year: fc.integer({ min: 2000, max: 2040 }),
    pick: fc.nat(),
    uniform: fc.integer({ min: MIN_INSTANT, max: MAX_INSTANT }),
    nearby: fc.oneof(fc.integer({ min: -3 * HOUR, max: 3 * HOUR }), fc.integer({ min: -8 * DAY, max: 8 * DAY })),
    wallShift: fc.integer({ min: -90, max: 150 }),
    aimWall: fc.boolean(),
    aimInstant: fc.integer({ min: 0, max: 9 }),
    hour: fc.integer({ min: 0, max: 23 }),
    minute: fc.integer({ min: 0, max: 59 }),
    weekday: fc.integer({ min: 1, max: 7 })
  })
  .map((r) => {
    const transitions = transitionsIn(r.tz, r.year)
    const transition = transitions.length > 0 ? transitions[r.pick % transitions.length] : undefined
    if (transition === undefined || r.aimInstant < 2) {
      return { tz: r.tz, from: r.uniform, hour: r.hour, minute: r.minute, weekday: r.weekday }
    }
    const from = Math.min(MAX_INSTANT, Math.max(MIN_INSTANT, transition.at + r.nearby))
    if (!r.aimWall) return { tz: r.tz, from, hour: r.hour, minute: r.minute, weekday: r.weekday }
    // A wall time just around the transition: inside the gap or the repeated hour, or at its edges.
    const wall = wallOf(r.tz, transition.at - 1 + r.wallShift * MINUTE)
    const weekday = ((Math.floor(Date.UTC(wall.year, wall.month - 1, wall.day) / DAY) + 3) % 7) + 1
    return { tz: r.tz, from, hour: wall.hour, minute: wall.minute, weekday: r.aimInstant < 6 ? weekday : r.weekday }
  })

/** The next slot by the oracle: the first date (from yesterday on) whose compatible-resolved wall time is after `from`. */
const oracleNext = (c: Case, weekly: boolean): number => {
  const first = localDay(c.tz, c.from) - 1
  for (let day = first; day <= first + 16; day++) {
    if (weekly && ((day + 3) % 7) + 1 !== c.weekday) continue
    const slot = Option.getOrThrow(resolve(c.tz, day, c.hour, c.minute))
    if (slot > c.from && dateExists(c.tz, day)) return slot
  }
  throw new Error("oracle found no slot")
}

/** The calendar date a slot belongs to: its own local date, or the day before when a gap pushed it past midnight. */
const slotDate = (c: Case, slot: number): number => {
  const day = localDay(c.tz, slot)
  if (Option.getOrThrow(resolve(c.tz, day, c.hour, c.minute)) === slot && dateExists(c.tz, day)) return day
  if (Option.getOrThrow(resolve(c.tz, day - 1, c.hour, c.minute)) === slot) return day - 1
  throw new Error(`slot ${new Date(slot).toISOString()} belongs to no date in ${c.tz}`)
}

const dailyOf = (c: Case) => Schedule.daily({ hour: c.hour, minute: c.minute, tz: c.tz })
const weeklyOf = (c: Case) => Schedule.weekly({ weekday: c.weekday, hour: c.hour, minute: c.minute, tz: c.tz })
const params = { numRuns: RUNS }
const next = (s: Schedule.Schedule, t: number): number => Schedule.next(s, new Date(t)).getTime()

describe("Schedule.next properties", () => {
  it("daily and weekly agree with Effect DateTime's compatible resolution", { timeout: 120_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        expect(new Date(next(dailyOf(c), c.from)).toISOString()).toBe(new Date(oracleNext(c, false)).toISOString())
        expect(new Date(next(weeklyOf(c), c.from)).toISOString()).toBe(new Date(oracleNext(c, true)).toISOString())
      }),
      params
    )
  })

  it("the result is strictly after `from`, and next(s, next(s, t) - 1ms) = next(s, t)", { timeout: 120_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        for (const s of [dailyOf(c), weeklyOf(c)]) {
          const n = next(s, c.from)
          expect(n).toBeGreaterThan(c.from)
          expect(next(s, n - 1)).toBe(n)
        }
      }),
      params
    )
  })

  it(
    "consecutive daily slots belong to consecutive local dates, skipping only dates the zone skipped",
    { timeout: 120_000 },
    () => {
      fc.assert(
        fc.property(caseArb, (c) => {
          const s = dailyOf(c)
          let t = next(s, c.from - 2 * DAY)
          let prevDate = slotDate(c, t)
          for (let i = 0; i < 4; i++) {
            const n = next(s, t)
            const date = slotDate(c, n)
            for (let skipped = prevDate + 1; skipped < date; skipped++) expect(dateExists(c.tz, skipped)).toBe(false)
            expect(date).toBeGreaterThan(prevDate)
            expect(date - prevDate).toBeLessThanOrEqual(2)
            prevDate = date
            t = n
          }
        }),
        params
      )
    }
  )

  it("consecutive weekly slots are one week apart (two when the zone skipped that date)", { timeout: 120_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const s = weeklyOf(c)
        const a = next(s, c.from)
        const b = next(s, a)
        const gap = slotDate(c, b) - slotDate(c, a)
        if (gap !== 7) {
          expect(gap).toBe(14)
          expect(dateExists(c.tz, slotDate(c, a) + 7)).toBe(false)
        }
      }),
      params
    )
  })

  it("the wall time is the requested one unless that wall time did not exist that day", { timeout: 120_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        for (const s of [dailyOf(c), weeklyOf(c)]) {
          const n = next(s, c.from)
          const wall = wallOf(c.tz, n)
          if (wall.hour !== c.hour || wall.minute !== c.minute) {
            const date = slotDate(c, n)
            expect(Option.isNone(resolve(c.tz, date, c.hour, c.minute, "reject"))).toBe(true)
            // Shifted forward, by less than a day.
            expect(n).toBeGreaterThan(Option.getOrThrow(resolve(c.tz, date, c.hour, c.minute, "earlier")))
          }
          expect(wall.second).toBe(0)
        }
      }),
      params
    )
  })

  it("an ambiguous wall time fires once, at its earlier occurrence", { timeout: 120_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const n = next(dailyOf(c), c.from)
        const date = slotDate(c, n)
        const earlier = Option.getOrThrow(resolve(c.tz, date, c.hour, c.minute, "earlier"))
        const later = Option.getOrThrow(resolve(c.tz, date, c.hour, c.minute, "later"))
        const shows = (t: number) => {
          const w = wallOf(c.tz, t)
          return w.hour === c.hour && w.minute === c.minute && localDay(c.tz, t) === date
        }
        // Ambiguous: two distinct instants both show the requested wall time on that date.
        if (earlier < later && shows(earlier) && shows(later)) {
          expect(n).toBe(earlier)
          // The later occurrence is never a slot of its own.
          expect(next(dailyOf(c), n)).not.toBe(later)
          expect(localDay(c.tz, next(dailyOf(c), n))).toBeGreaterThan(date)
        }
      }),
      params
    )
  })

  it("interval: next is exactly from + every", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: MIN_INSTANT, max: MAX_INSTANT }),
        fc.integer({ min: 1, max: 400 * DAY }),
        (from, every) => {
          expect(next(Schedule.interval({ every }), from)).toBe(from + every)
        }
      ),
      params
    )
  })
})
