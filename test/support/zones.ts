/**
 * Time-zone helpers for tests, independent of kairos's own zone code: offsets straight from Intl, wall-time
 * resolution from Effect's DateTime (`disambiguation: "compatible"`).
 */
import { DateTime, Option } from "effect"

const DAY = 86_400_000
const HOUR = 3_600_000
const MINUTE = 60_000

/** Every zone this runtime lists (some under legacy alias names), plus `UTC` and a few modern names it omits. */
export const allZones: ReadonlyArray<string> = Array.from(
  new Set([...Intl.supportedValuesOf("timeZone"), "UTC", "Asia/Kolkata", "America/Nuuk", "Europe/Kyiv"])
)

const formats = new Map<string, Intl.DateTimeFormat>()
const formatOf = (tz: string): Intl.DateTimeFormat => {
  let f = formats.get(tz)
  if (f === undefined) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: tz,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric"
    })
    formats.set(tz, f)
  }
  return f
}

export interface Wall {
  readonly year: number
  readonly month: number
  readonly day: number
  readonly hour: number
  readonly minute: number
  readonly second: number
}

// What `format` prints with the options above (en-US, h23): "12/31/2026, 23:59:59".
const formatted = /^(\d+)\/(\d+)\/(\d+), (\d+):(\d+):(\d+)$/

/**
 * The wall clock of `tz` at `instant`, read with Intl. `format` and a pattern, not `formatToParts`: the same fields
 * from the same formatter, ~8 times cheaper, and the property tests' case generators call this ~1,500 times a case.
 * Anything else the formatter prints goes through `formatToParts`.
 */
export const wallOf = (tz: string, instant: number): Wall => {
  const m = formatted.exec(formatOf(tz).format(new Date(instant)))
  if (m !== null) {
    return {
      year: Number.parseInt(m[3]!, 10),
      month: Number.parseInt(m[1]!, 10),
      day: Number.parseInt(m[2]!, 10),
      hour: Number.parseInt(m[4]!, 10) % 24,
      minute: Number.parseInt(m[5]!, 10),
      second: Number.parseInt(m[6]!, 10)
    }
  }
  const parts: Record<string, number> = {}
  for (const p of formatOf(tz).formatToParts(new Date(instant))) {
    if (p.type !== "literal") parts[p.type] = Number.parseInt(p.value, 10)
  }
  return {
    year: parts["year"]!,
    month: parts["month"]!,
    day: parts["day"]!,
    hour: parts["hour"]! % 24,
    minute: parts["minute"]!,
    second: parts["second"]!
  }
}

/** UTC offset in ms at `instant`. */
export const offsetOf = (tz: string, instant: number): number => {
  const w = wallOf(tz, instant)
  const asUtc = Date.UTC(w.year, w.month - 1, w.day, w.hour, w.minute, w.second)
  return asUtc - (instant - (((instant % 1000) + 1000) % 1000))
}

/** Local date of an instant as a day number (days since 1970-01-01). */
export const localDay = (tz: string, instant: number): number => {
  const w = wallOf(tz, instant)
  return Date.UTC(w.year, w.month - 1, w.day) / DAY
}

export const dayParts = (day: number): { year: number; month: number; day: number } => {
  const d = new Date(day * DAY)
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() }
}

/** Resolves a wall time with Effect's DateTime; None when it does not exist and disambiguation is "reject". */
export const resolve = (
  tz: string,
  day: number,
  hour: number,
  minute: number,
  disambiguation: "compatible" | "earlier" | "later" | "reject" = "compatible"
): Option.Option<number> =>
  DateTime.makeZoned(
    { ...dayParts(day), hours: hour, minutes: minute, seconds: 0, millis: 0 },
    { timeZone: tz, adjustForTimeZone: true, disambiguation }
  ).pipe(Option.map(DateTime.toEpochMillis))

/** Whether any instant shows local date `day` in `tz`. */
export const dateExists = (tz: string, day: number): boolean =>
  [Option.getOrThrow(resolve(tz, day, 0, 0)), Option.getOrThrow(resolve(tz, day, 23, 59))].some(
    (t) => localDay(tz, t) === day
  )

export interface Transition {
  readonly at: number
  readonly before: number
  readonly after: number
}

const transitionCache = new Map<string, ReadonlyArray<Transition>>()

/**
 * The offset changes of `tz` during `year`: sampled once a day, then bisected to the second. Two changes inside one
 * day that cancel out would be missed: for every zone from 1999 to 2041 this finds the 13,247 changes that sampling
 * every 6 hours finds, the closest a week apart (America/Boa_Vista, October 2000), at a quarter of the cost, which is
 * most of the property tests' (their generators pick a zone and year of their own in most cases).
 */
export const transitionsIn = (tz: string, year: number): ReadonlyArray<Transition> => {
  const key = `${tz}/${year}`
  const cached = transitionCache.get(key)
  if (cached !== undefined) return cached
  const out: Array<Transition> = []
  const end = Date.UTC(year + 1, 0, 1)
  let prev = Date.UTC(year, 0, 1)
  let prevOffset = offsetOf(tz, prev)
  for (let t = prev + DAY; t <= end; t += DAY) {
    const o = offsetOf(tz, t)
    if (o !== prevOffset) {
      let lo = prev
      let hi = t
      while (hi - lo > 1000) {
        const mid = lo + Math.floor((hi - lo) / 2000) * 1000
        if (offsetOf(tz, mid) === prevOffset) lo = mid
        else hi = mid
      }
      out.push({ at: hi, before: prevOffset, after: o })
      prevOffset = o
    }
    prev = t
  }
  transitionCache.set(key, out)
  return out
}

export const time = { DAY, HOUR, MINUTE }
