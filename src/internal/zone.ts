/**
 * Wall-clock arithmetic in IANA time zones, resolving gaps and overlaps explicitly.
 *
 * Luxon supplies each zone's UTC offset at an instant (from the runtime's tz database). Turning a wall
 * time back into an instant is done here, not by Luxon: Luxon's pick for an ambiguous wall time depends on
 * the current date, and kairos needs java.time's / Temporal's "compatible" rule every time.
 * Pure: no clock is read.
 */
import { IANAZone } from "luxon"

export const MINUTE = 60_000
export const HOUR = 60 * MINUTE
export const DAY = 24 * HOUR

/** Offsets never exceed ±15 h (today's extremes are −12 h and +14 h), so ±18 h bounds every candidate. */
const WINDOW = 18 * HOUR
/**
 * Sampling step when looking for transitions. Measured over every zone this runtime knows, 2000–2040: no two
 * transitions of a zone are closer than 166 hours, so a 3-hour step cannot miss a pair that cancels out.
 */
const STEP = 3 * HOUR

const zones = new Map<string, IANAZone>()

/** True when `name` is a time zone this runtime knows (an IANA name, an alias such as `Asia/Calcutta`, or `UTC`). */
export const isValidZone = (name: string): boolean => {
  if (zones.has(name)) return true
  if (name.length === 0 || !IANAZone.isValidZone(name)) return false
  zones.set(name, IANAZone.create(name))
  return true
}

/** A zone name this runtime does not know reached the arithmetic (only a value that bypassed validation can). */
export class UnknownZoneError extends Error {
  constructor(readonly zone: string) {
    super(`unknown time zone: ${zone}`)
  }
}

const zoneOf = (name: string): IANAZone => {
  const cached = zones.get(name)
  if (cached !== undefined) return cached
  if (!isValidZone(name)) throw new UnknownZoneError(name)
  return zones.get(name)!
}

/** The zone's UTC offset at `instant`, in milliseconds (wall time = instant + offset). */
export const offsetAt = (zone: string, instant: number): number => Math.round(zoneOf(zone).offset(instant) * MINUTE)

/** The wall-clock time at `instant`, expressed as milliseconds of a UTC-based calendar ("local epoch"). */
export const wallAt = (zone: string, instant: number): number => instant + offsetAt(zone, instant)

export interface Segment {
  readonly start: number
  readonly offset: number
}

/**
 * Constant-offset segments covering [from, to], each starting at the exact transition instant (the first one at
 * `from`).
 */
export const segments = (zone: string, from: number, to: number): Array<Segment> => {
  const out: Array<Segment> = [{ start: from, offset: offsetAt(zone, from) }]
  let prev = from
  let prevOffset = out[0]!.offset
  for (let t = from + STEP; t <= to; t += STEP) {
    const offset = offsetAt(zone, t)
    if (offset !== prevOffset) {
      // Bisect (prev, t] to the first instant that has the new offset.
      let lo = prev
      let hi = t
      while (hi - lo > 1) {
        const mid = Math.floor((lo + hi) / 2)
        if (offsetAt(zone, mid) === prevOffset) lo = mid
        else hi = mid
      }
      out.push({ start: hi, offset })
      prevOffset = offset
    }
    prev = t
  }
  return out
}

/**
 * The instant at which the wall-clock time `wall` (a local epoch, see `wallAt`) occurs in `zone`, by the
 * "compatible" rule: a wall time that occurs twice resolves to its earlier occurrence; a wall time that does
 * not exist (a gap) resolves to the instant it would have with the offset in force before the gap, which
 * reads on the clock as the wall time shifted forward by the gap's length.
 */
export const resolveWall = (zone: string, wall: number): number => {
  const segs = segments(zone, wall - WINDOW, wall + WINDOW)
  // Segments ascend, so the first exact match is the earliest occurrence.
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i]!
    const end = i + 1 < segs.length ? segs[i + 1]!.start : Number.POSITIVE_INFINITY
    const instant = wall - seg.offset
    if (instant >= seg.start && instant < end) return instant
  }
  for (let i = 1; i < segs.length; i++) {
    const before = segs[i - 1]!.offset
    const after = segs[i]!.offset
    const transition = segs[i]!.start
    if (after > before && wall >= transition + before && wall < transition + after) return wall - before
  }
  // Unreachable for real zones: every wall time either occurs or falls in a forward gap.
  return wall - segs[segs.length - 1]!.offset
}

/**
 * Whether the local calendar date `day` (days since 1970-01-01) occurs in `zone` at all. Pacific/Apia skipped
 * 2011-12-30 entirely when it crossed the date line; such a date has no wall time, hence no slot.
 */
export const dateExists = (zone: string, day: number): boolean => {
  const start = day * DAY
  const end = start + DAY
  const segs = segments(zone, start - WINDOW, end + WINDOW)
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i]!
    const segEnd = i + 1 < segs.length ? segs[i + 1]!.start : end + WINDOW
    // The wall times this segment shows are [seg.start + offset, segEnd + offset).
    if (seg.start + seg.offset < end && segEnd + seg.offset > start) return true
  }
  return false
}

/** The local calendar day number (days since 1970-01-01) of a local epoch. */
export const dayOf = (wall: number): number => Math.floor(wall / DAY)

/** ISO weekday (1 = Monday … 7 = Sunday) of a local day number. */
export const isoWeekday = (day: number): number => {
  // 1970-01-01 was a Thursday (ISO 4).
  const w = (((day + 3) % 7) + 7) % 7
  return w + 1
}
