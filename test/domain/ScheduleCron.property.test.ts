/**
 * Cron schedules against an independent brute-force oracle: Effect's own cron parser reads the expression, every
 * minute of every local date around `from` is tested against its fields (Vixie's day rule restated here), and each
 * matching wall time is resolved with Effect's DateTime (`disambiguation: "compatible"`) on dates that exist. The
 * oracle's fires in a two-day window must be exactly the ones `Schedule.next` steps through. Checked over random
 * zones and expressions aimed at DST transitions, and over every transition of every zone in 2011 and 2026.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cron, Either, FastCheck as fc, Option } from "effect"
import { Schedule } from "../../src/index.js"
import { allZones, dateExists, localDay, resolve, time, transitionsIn, wallOf } from "../support/zones.js"

const { DAY, HOUR, MINUTE } = time
const WINDOW = 2 * DAY
const RUNS = Number(process.env["KAIROS_PROPERTY_RUNS"] ?? 300)

/**
 * Whether a wall time (read as UTC) matches: every field, and the day fields by Vixie's rule (`both` when the text
 * of either day field starts with `*`).
 */
const matches = (cron: Cron.Cron, both: boolean, wall: Date): boolean => {
  const has = (set: ReadonlySet<number>, v: number) => set.size === 0 || set.has(v)
  if (!has(cron.minutes, wall.getUTCMinutes()) || !has(cron.hours, wall.getUTCHours())) return false
  if (!has(cron.months, wall.getUTCMonth() + 1)) return false
  const dom = has(cron.days, wall.getUTCDate())
  const dow = has(cron.weekdays, wall.getUTCDay())
  if (both) return dom && dow
  return dom || dow
}

/** Every fire in (from, from + WINDOW], by brute force. */
const oracle = (expression: string, tz: string, from: number): Array<number> => {
  const cron = Either.getOrThrow(Cron.parse(expression, "UTC"))
  const fields = expression.trim().split(/\s+/)
  const both = fields[2]!.startsWith("*") || fields[4]!.startsWith("*")
  const end = from + WINDOW
  const fires = new Set<number>()
  for (let day = localDay(tz, from) - 2; day <= localDay(tz, end) + 2; day++) {
    if (!dateExists(tz, day)) continue
    for (let minute = 0; minute < 24 * 60; minute++) {
      if (!matches(cron, both, new Date(day * DAY + minute * MINUTE))) continue
      const slot = Option.getOrThrow(resolve(tz, day, Math.floor(minute / 60), minute % 60))
      if (slot > from && slot <= end) fires.add(slot)
    }
  }
  return [...fires].sort((a, b) => a - b)
}

/** The fires `Schedule.next` steps through in (from, from + WINDOW]. */
const kairos = (expression: string, tz: string, from: number): Array<number> => {
  const schedule = Schedule.cron(expression, { tz })
  const out: Array<number> = []
  for (let t = Schedule.next(schedule, new Date(from)).getTime(); t <= from + WINDOW; ) {
    out.push(t)
    const n = Schedule.next(schedule, new Date(t)).getTime()
    expect(n).toBeGreaterThan(t)
    t = n
  }
  return out
}

const iso = (xs: ReadonlyArray<number>) => xs.map((x) => new Date(x).toISOString())

interface Case {
  readonly tz: string
  readonly from: number
  readonly expression: string
}

const two = (n: number) => String(n)

/** Expressions built around one wall time (usually just before a transition), with the usual syntax. */
const caseArb: fc.Arbitrary<Case> = fc
  .record({
    tz: fc.constantFrom(...allZones),
    year: fc.integer({ min: 2000, max: 2040 }),
    pick: fc.nat(),
    nearby: fc.integer({ min: -2 * DAY, max: HOUR }),
    wallShift: fc.integer({ min: -90, max: 150 }),
    uniform: fc.boolean(),
    minute: fc.constantFrom("aim", "*/15", "0", "30", "0,30", "*/20", "10-40/10", "aim-59/7", "*"),
    hour: fc.constantFrom("aim", "aim", "*", "*/2", "aim-23", "0-aim/3", "1-3", "0-5,22-23"),
    dom: fc.constantFrom("*", "*", "*", "aim", "1-15", "*/2", "16-31", "aim,1"),
    month: fc.constantFrom("*", "*", "aim", "JAN-JUN", "jul-dec", "aim,FEB"),
    dow: fc.constantFrom("*", "*", "*", "aim", "MON-FRI", "0", "7", "SAT,SUN", "*/2", "1-5/2")
  })
  .map((r) => {
    const transitions = transitionsIn(r.tz, r.year)
    const transition = transitions.length > 0 ? transitions[r.pick % transitions.length] : undefined
    const at = transition?.at ?? Date.UTC(r.year, r.pick % 12, 1 + (r.pick % 28))
    const from = at + r.nearby
    // A wall time around the transition: inside the gap or the repeated hour, or at its edges.
    const aim = wallOf(r.tz, at - 1 + r.wallShift * MINUTE)
    const weekday = new Date(Date.UTC(aim.year, aim.month - 1, aim.day)).getUTCDay()
    const field = (pattern: string, value: number) => pattern.replace(/aim/g, two(value))
    const minute = field(r.minute, aim.minute)
    // `*` minutes only with a narrow hour, to keep the brute force quick.
    const hour = r.minute === "*" ? two(aim.hour) : field(r.hour, aim.hour)
    const expression = [minute, hour, field(r.dom, aim.day), field(r.month, aim.month), field(r.dow, weekday)].join(" ")
    return { tz: r.tz, from: r.uniform ? at - (r.pick % (3 * DAY)) : from, expression }
  })
  // Only expressions both parsers take (e.g. not "31 FEB" with any weekday restriction removed).
  .filter((c) => {
    try {
      Schedule.cron(c.expression)
      return Either.isRight(Cron.parse(c.expression, "UTC"))
    } catch {
      return false
    }
  })

describe("Schedule.cron against a brute-force oracle", () => {
  it("random zones and expressions aimed at DST transitions (2000-2040)", { timeout: 300_000 }, () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        expect({ case: c, fires: iso(kairos(c.expression, c.tz, c.from)) }).toEqual({
          case: c,
          fires: iso(oracle(c.expression, c.tz, c.from))
        })
      }),
      { numRuns: RUNS }
    )
  })

  it("every transition of every zone in 2011 and 2026: every half hour around it", { timeout: 300_000 }, () => {
    let checked = 0
    for (const tz of allZones) {
      for (const year of [2011, 2026]) {
        for (const transition of transitionsIn(tz, year)) {
          const before = wallOf(tz, transition.at - 1)
          const after = wallOf(tz, transition.at)
          // The local hours on both sides of the change (it may cross midnight: then the whole day).
          const lo = Math.min(before.hour, after.hour)
          const hi = Math.max(before.hour, after.hour)
          const hours = hi - lo <= 3 ? `${Math.max(0, lo - 1)}-${Math.min(23, hi + 1)}` : "*"
          const expression = hours === "*" ? "0 * * * *" : `*/30 ${hours} * * *`
          const from = transition.at - DAY
          expect({ tz, transition: new Date(transition.at), fires: iso(kairos(expression, tz, from)) }).toEqual({
            tz,
            transition: new Date(transition.at),
            fires: iso(oracle(expression, tz, from))
          })
          checked++
        }
      }
    }
    expect(checked).toBeGreaterThan(300)
  })

  it("a cron at one daily wall time fires exactly when the daily schedule does", { timeout: 300_000 }, () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...allZones),
        fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2040, 0, 1) }),
        fc.integer({ min: 0, max: 23 }),
        fc.integer({ min: 0, max: 59 }),
        fc.nat(),
        (tz, uniform, hour, minute, pick) => {
          // Half the time, start just before one of the zone's transitions.
          const transitions = transitionsIn(tz, new Date(uniform).getUTCFullYear())
          const t = transitions[pick % Math.max(1, transitions.length)]
          const from = t !== undefined && pick % 2 === 0 ? t.at - (pick % (2 * DAY)) : uniform
          const daily = Schedule.daily({ hour, minute, tz })
          const cron = Schedule.cron(`${minute} ${hour} * * *`, { tz })
          let a = from
          let b = from
          for (let i = 0; i < 3; i++) {
            a = Schedule.next(daily, new Date(a)).getTime()
            b = Schedule.next(cron, new Date(b)).getTime()
            expect(new Date(b).toISOString()).toBe(new Date(a).toISOString())
          }
        }
      ),
      { numRuns: RUNS }
    )
  })
})
