/**
 * When a recurring job fires: daily or weekly at a wall-clock time in a time zone, on a cron expression's wall
 * times in a time zone, or at a fixed interval.
 *
 * Not to be confused with Effect's own `Schedule` (retry and repetition policies); import one of them under
 * an alias when you need both: `import { Schedule as Recurrence } from "kairos"`.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { InvalidScheduleError, ScheduleComputationError, ScheduleDecodeError } from "./errors.js"
import { CronSyntaxError, nextCronWall, parseCron, type CronSpec } from "../internal/cron.js"
import { show } from "../internal/show.js"
import {
  dateExists,
  dayOf,
  DAY,
  HOUR,
  isoWeekday,
  isValidZone,
  MINUTE,
  resolveWall,
  segments,
  UnknownZoneError,
  wallAt,
  type Segment
} from "../internal/zone.js"

const Hour = Schema.Int.pipe(Schema.between(0, 23, { message: () => "hour must be an integer from 0 to 23" }))
const Minute = Schema.Int.pipe(Schema.between(0, 59, { message: () => "minute must be an integer from 0 to 59" }))
const Weekday = Schema.Int.pipe(
  Schema.between(1, 7, { message: () => "weekday must be an integer from 1 (Monday) to 7 (Sunday)" })
)
const TimeZone = Schema.String.pipe(
  Schema.filter((tz) => isValidZone(tz) || `tz must be a known IANA time zone (got ${JSON.stringify(tz)})`)
)
/** The longest interval: 100 years. Longer ones would push slots past the last date a `Date` can hold. */
export const MAX_INTERVAL_MILLIS = 100 * 366 * 24 * 60 * 60 * 1000
const EveryMillis = Schema.Int.pipe(
  Schema.between(1, MAX_INTERVAL_MILLIS, {
    message: () => "everyMillis must be a whole number of milliseconds, from 1 to 100 years"
  })
)

/** Every day at `hour:minute` on the wall clock of `tz` (UTC when absent). */
export const Daily = Schema.TaggedStruct("Daily", {
  hour: Hour,
  minute: Minute,
  tz: Schema.optional(TimeZone)
})
/** @see Daily */
export interface Daily extends Schema.Schema.Type<typeof Daily> {}

/** Every week on ISO `weekday` (1 = Monday … 7 = Sunday) at `hour:minute` on the wall clock of `tz`. */
export const Weekly = Schema.TaggedStruct("Weekly", {
  weekday: Weekday,
  hour: Hour,
  minute: Minute,
  tz: Schema.optional(TimeZone)
})
/** @see Weekly */
export interface Weekly extends Schema.Schema.Type<typeof Weekly> {}

/** Every `everyMillis` milliseconds, counted from the previous slot. */
export const Interval = Schema.TaggedStruct("Interval", {
  everyMillis: EveryMillis
})
/** @see Interval */
export interface Interval extends Schema.Schema.Type<typeof Interval> {}

/** The parsed form of each expression seen, so `next` does not parse on every call. Bounded: expressions are few. */
const parsedCrons = new Map<string, CronSpec>()

/** Parses (or recalls) an expression. @throws CronSyntaxError */
const cronSpec = (expression: string): CronSpec => {
  const cached = parsedCrons.get(expression)
  if (cached !== undefined) return cached
  const spec = parseCron(expression)
  if (parsedCrons.size >= 1000) parsedCrons.clear()
  parsedCrons.set(expression, spec)
  return spec
}

/** Why an expression is refused, as `cron "61 * * * *": minute: 61 is out of range 0-59`; undefined when valid. */
const cronProblem = (expression: string): string | undefined => {
  try {
    cronSpec(expression)
    return undefined
  } catch (e) {
    if (e instanceof CronSyntaxError) return `cron ${JSON.stringify(expression)}: ${e.message}`
    throw e
  }
}

const CronExpression = Schema.String.pipe(Schema.filter((expression) => cronProblem(expression) ?? true))

/**
 * On every wall time a standard 5-field cron expression (minute hour day-of-month month day-of-week) matches, on
 * the wall clock of `tz` (UTC when absent).
 */
export const Cron = Schema.TaggedStruct("Cron", {
  expression: CronExpression,
  tz: Schema.optional(TimeZone)
})
/** @see Cron */
export interface Cron extends Schema.Schema.Type<typeof Cron> {}

/** The schema of a schedule as stored in the `schedule` column (a JSON object with a `_tag`). */
export const Schedule = Schema.Union(Daily, Weekly, Interval, Cron).annotations({
  identifier: "Schedule",
  description: 'a JSON object with "_tag" Daily, Weekly, Interval or Cron'
})
/** A recurring schedule: `Daily`, `Weekly`, `Interval` or `Cron`. */
export type Schedule = Daily | Weekly | Interval | Cron

/** The schema of a schedule encoded as a JSON string. */
export const ScheduleFromJson = Schema.parseJson(Schedule)

// ---------------------------------------------------------------------------------------------------------------
// Constructors

const invalid = (field: InvalidScheduleError["field"], value: unknown, rule: string): InvalidScheduleError =>
  new InvalidScheduleError({ field, value, message: `invalid schedule: ${rule} (got ${show(value)})` })

const checkRange = (field: "hour" | "minute" | "weekday", value: unknown, min: number, max: number, rule: string) => {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(field, value, rule)
  }
  return value
}

const checkZone = (tz: unknown): string | undefined => {
  if (tz === undefined) return undefined
  if (typeof tz !== "string" || !isValidZone(tz)) throw invalid("tz", tz, "tz must be a known IANA time zone or UTC")
  return tz
}

const hourRule = "hour must be an integer from 0 to 23"
const minuteRule = "minute must be an integer from 0 to 59"

/**
 * Every day at `hour:minute` in `tz` (UTC when absent).
 *
 * @throws InvalidScheduleError naming the field when hour, minute or tz is invalid.
 * @example
 * const standup = Schedule.daily({ hour: 9, minute: 30, tz: "Europe/Berlin" })
 */
export const daily = (options: {
  readonly hour: number
  readonly minute: number
  readonly tz?: string | undefined
}): Daily => {
  const hour = checkRange("hour", options.hour, 0, 23, hourRule)
  const minute = checkRange("minute", options.minute, 0, 59, minuteRule)
  const tz = checkZone(options.tz)
  return tz === undefined ? Daily.make({ hour, minute }) : Daily.make({ hour, minute, tz })
}

/**
 * Every week on ISO `weekday` (1 = Monday … 7 = Sunday) at `hour:minute` in `tz` (UTC when absent).
 *
 * @throws InvalidScheduleError naming the field when weekday, hour, minute or tz is invalid.
 */
export const weekly = (options: {
  readonly weekday: number
  readonly hour: number
  readonly minute: number
  readonly tz?: string | undefined
}): Weekly => {
  const weekday = checkRange(
    "weekday",
    options.weekday,
    1,
    7,
    "weekday must be an integer from 1 (Monday) to 7 (Sunday)"
  )
  const hour = checkRange("hour", options.hour, 0, 23, hourRule)
  const minute = checkRange("minute", options.minute, 0, 59, minuteRule)
  const tz = checkZone(options.tz)
  return tz === undefined ? Weekly.make({ weekday, hour, minute }) : Weekly.make({ weekday, hour, minute, tz })
}

const everyRule = "every must be a positive, finite, whole number of milliseconds (at least 1, at most 100 years)"

/**
 * Every `every` (an Effect `Duration.DurationInput`: `"5 minutes"`, `Duration.seconds(30)` or a number of
 * milliseconds), counted from the previous slot.
 *
 * @throws InvalidScheduleError naming `every` when it is not a whole number of milliseconds of at least 1.
 */
export const interval = (options: { readonly every: Duration.DurationInput }): Interval => {
  const every = options.every
  // Duration.decode turns NaN and negative numbers into zero silently; check raw numbers first.
  if (typeof every === "number" && !(Number.isFinite(every) && every > 0)) throw invalid("every", every, everyRule)
  let duration: Duration.Duration
  try {
    duration = Duration.decode(every)
  } catch {
    throw invalid("every", every, everyRule)
  }
  const millis = Duration.toMillis(duration)
  if (!Number.isFinite(millis) || !Number.isInteger(millis) || millis < 1 || millis > MAX_INTERVAL_MILLIS) {
    throw invalid("every", every, everyRule)
  }
  return Interval.make({ everyMillis: millis })
}

/**
 * On every wall time the cron expression matches, in `tz` (UTC when absent). Standard 5 fields — minute hour
 * day-of-month month day-of-week — with `*`, lists `1,15`, ranges `1-5`, steps `*\/15` and `0-30/10`, names
 * JAN–DEC and SUN–SAT (0 and 7 are both Sunday). When both day fields are restricted (neither starts with `*`), a
 * day matches if either does (Vixie cron). The DST rule is daily's: see `next`.
 *
 * @throws InvalidScheduleError (field `expression`, or `tz`) naming the cron field and the bad value, e.g.
 * `cron "61 * * * *": minute: 61 is out of range 0-59`, or saying the expression can never fire (`0 0 31 2 *`).
 * @example
 * const weekdayMornings = Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" })
 */
export const cron = (expression: string, options?: { readonly tz?: string | undefined }): Cron => {
  if (typeof expression !== "string") throw invalid("expression", expression, "a cron expression must be a string")
  const problem = cronProblem(expression)
  if (problem !== undefined) {
    throw new InvalidScheduleError({ field: "expression", value: expression, message: `invalid schedule: ${problem}` })
  }
  const tz = checkZone(options?.tz)
  return tz === undefined ? Cron.make({ expression }) : Cron.make({ expression, tz })
}

// ---------------------------------------------------------------------------------------------------------------
// Next fire time

/**
 * The first fire instant strictly after `from`.
 *
 * - Daily / Weekly are computed on the wall clock of the schedule's zone. Each local day (week) has exactly one
 *   slot: a wall time that does not exist that day (a spring-forward gap) fires shifted forward by the gap's
 *   length; a wall time that occurs twice (fall-back) fires once, at its earlier occurrence. A slot belongs to
 *   its calendar date even when a gap pushes it past midnight. A date the zone skipped entirely has no slot.
 * - Cron: every wall time the expression matches, by the same rule: a matching wall time in a gap fires shifted
 *   forward by the gap (two shifted onto one instant fire once); one that occurs twice fires at its earlier
 *   occurrence only; a date the zone skipped has none.
 * - Interval: exactly `from + every`.
 *
 * @throws ScheduleComputationError when `from` is an invalid Date or the next slot lies beyond the dates a `Date`
 * can hold (or, for a schedule that bypassed validation, when no slot can be found).
 */
export const next = (schedule: Schedule, from: Date): Date => {
  const fromMs = from.getTime()
  if (Number.isNaN(fromMs)) throw new ScheduleComputationError({ message: "Schedule.next: `from` is an invalid Date" })
  const slot = slotAfter(schedule, fromMs)
  const date = new Date(slot)
  if (!Number.isFinite(slot) || Number.isNaN(date.getTime()) || slot <= fromMs) {
    throw new ScheduleComputationError({
      message: `no next slot of ${format(schedule)} after ${from.toISOString()}: it lies beyond the dates a Date can hold`
    })
  }
  return date
}

/** The next slot's instant after `fromMs`; the zone arithmetic's own error becomes the domain's. */
const slotAfter = (schedule: Schedule, fromMs: number): number => {
  try {
    switch (schedule._tag) {
      case "Interval":
        return fromMs + schedule.everyMillis
      case "Daily":
        return nextWallSlot(schedule.tz ?? "UTC", schedule.hour, schedule.minute, undefined, fromMs)
      case "Weekly":
        return nextWallSlot(schedule.tz ?? "UTC", schedule.hour, schedule.minute, schedule.weekday, fromMs)
      case "Cron": {
        // Only a value that bypassed validation gets here with a bad expression.
        const problem = cronProblem(schedule.expression)
        if (problem !== undefined) throw new ScheduleComputationError({ message: `Schedule.next: ${problem}` })
        return nextCronSlot(cronSpec(schedule.expression), schedule.tz ?? "UTC", fromMs)
      }
    }
  } catch (e) {
    if (e instanceof UnknownZoneError) throw new ScheduleComputationError({ message: `Schedule.next: ${e.message}` })
    throw e
  }
}

const nextWallSlot = (tz: string, hour: number, minute: number, weekday: number | undefined, fromMs: number) => {
  const timeOfDay = hour * HOUR + minute * MINUTE
  // Start one day early: yesterday's slot may have been pushed past midnight by a gap and still lie ahead.
  const firstDay = dayOf(wallAt(tz, fromMs)) - 1
  // Slots never move backwards from one date to the next, so the first one after `from` is the answer.
  for (let day = firstDay; day <= firstDay + 16; day++) {
    if (weekday !== undefined && isoWeekday(day) !== weekday) continue
    const slot = resolveWall(tz, day * DAY + timeOfDay)
    // A date the zone skipped entirely has no slot (its wall time would land on the next date's).
    if (slot > fromMs && dateExists(tz, day)) return slot
  }
  throw new ScheduleComputationError({
    message: `Schedule.next: no slot found in ${tz} after ${new Date(fromMs).toISOString()}`
  })
}

/**
 * Every satisfiable expression fires within 8 years (29 February, across a non-leap 2100); past this, `next`
 * gives up rather than search on.
 */
const CRON_SEARCH_LIMIT = 9 * 366 * DAY

/** The zone's segments around one week-long block of instants, cached: a runner asks for many slots in a row. */
const BLOCK = 7 * DAY
const blockSegments = new Map<string, ReadonlyArray<Segment>>()
const segmentsOfBlock = (tz: string, block: number): ReadonlyArray<Segment> => {
  const key = `${tz} ${block}`
  const cached = blockSegments.get(key)
  if (cached !== undefined) return cached
  // Two days before the block: any gap or repeated hour that changes how the block's instants read lies in it.
  const segs = segments(tz, block * BLOCK - 2 * DAY, (block + 1) * BLOCK)
  if (blockSegments.size >= 512) blockSegments.clear()
  blockSegments.set(key, segs)
  return segs
}

/**
 * Walks instants forward, one block of constant-offset segments at a time. A segment with offset `o` shows the
 * wall times [start + o, end + o); each shown wall time fires at `wall - o`, unless an earlier segment showed it
 * already (the repeated hour after a fall-back: the earlier occurrence wins). The wall times a forward transition
 * skipped (the gap) fire at `wall - previous offset`, i.e. shifted forward by the gap, at the start of the new
 * segment. The first candidate of the first segment that has one is the answer, since segments ascend.
 */
const nextCronSlot = (spec: CronSpec, tz: string, fromMs: number): number => {
  const limit = fromMs + CRON_SEARCH_LIMIT
  let t = fromMs + 1
  while (t <= limit) {
    // Jump to a day before the next matching wall time: offsets lie within ±14 h, so no fire comes earlier.
    const ahead = nextCronWall(spec, t - DAY, limit + DAY)
    if (ahead === undefined) break
    t = Math.max(t, ahead - DAY)
    const block = Math.floor(t / BLOCK)
    const blockEnd = (block + 1) * BLOCK
    const segs = segmentsOfBlock(tz, block)
    for (let i = 0; i < segs.length; i++) {
      const seg = segs[i]!
      const end = i + 1 < segs.length ? segs[i + 1]!.start : blockEnd
      const lo = Math.max(seg.start, t)
      const hi = Math.min(end, blockEnd)
      if (lo >= hi) continue
      const prev = i > 0 ? segs[i - 1]!.offset : seg.offset
      let best = Number.POSITIVE_INFINITY
      // Shown wall times, not shown before (after a fall-back the previous segment showed up to start + prev).
      const shown = nextCronWall(spec, Math.max(lo + seg.offset, seg.start + prev), hi + seg.offset - 1)
      if (shown !== undefined) best = shown - seg.offset
      if (prev < seg.offset) {
        // The gap [start + prev, start + offset): its wall times fire at wall - prev, from the segment's start on.
        const gapStart = seg.start + prev
        const gapEnd = seg.start + seg.offset
        let wall = nextCronWall(spec, Math.max(gapStart, lo + prev), Math.min(gapEnd, hi + prev) - 1)
        while (wall !== undefined && wall - prev < best) {
          const day = dayOf(wall)
          // A date wholly inside the gap never happened (Pacific/Apia 2011-12-30): it has no slots.
          if (!(gapStart <= day * DAY && (day + 1) * DAY <= gapEnd)) {
            best = wall - prev
            break
          }
          wall = nextCronWall(spec, (day + 1) * DAY, Math.min(gapEnd, hi + prev) - 1)
        }
      }
      if (best < Number.POSITIVE_INFINITY) return best
    }
    t = blockEnd
  }
  throw new ScheduleComputationError({
    message: `Schedule.next: no slot of the cron expression found in ${tz} within 9 years after ${new Date(
      fromMs
    ).toISOString()}${limit > 8.64e15 ? " (before the last date a Date can hold)" : ""}`
  })
}

// ---------------------------------------------------------------------------------------------------------------
// Codec

/** One line per problem, `path: message`, joined: a stored value's errors end up in logs and run rows. */
const formatIssue = (error: ParseResult.ParseError): string => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const lines = issues
    // An optional field's "Expected undefined" only repeats the real problem.
    .filter((i) => !i.message.startsWith("Expected undefined"))
    .map((i) => (i.path.length > 0 ? `${i.path.join(".")}: ${i.message}` : i.message))
  return [...new Set(lines)].join("; ").replace(/\s*\n\s*/g, " ")
}

/** Decodes a stored schedule (the parsed JSON value of the `schedule` column). */
export const decode = (input: unknown): Either.Either<Schedule, ScheduleDecodeError> =>
  Schema.decodeUnknownEither(Schedule, { onExcessProperty: "error" })(input).pipe(
    Either.mapLeft((e) => new ScheduleDecodeError({ input, message: `invalid stored schedule: ${formatIssue(e)}` }))
  )

/** Decodes a schedule from its JSON text. */
export const decodeJson = (json: string): Either.Either<Schedule, ScheduleDecodeError> =>
  Schema.decodeUnknownEither(ScheduleFromJson, { onExcessProperty: "error" })(json).pipe(
    Either.mapLeft(
      (e) => new ScheduleDecodeError({ input: json, message: `invalid stored schedule: ${formatIssue(e)}` })
    )
  )

/** The JSON value stored for a schedule, e.g. `{"_tag":"Daily","hour":9,"minute":0,"tz":"Europe/Berlin"}`. */
export const encode = (schedule: Schedule): Schedule => Schema.encodeSync(Schedule)(schedule)

/** The JSON text of a schedule. */
export const encodeJson = (schedule: Schedule): string => Schema.encodeSync(ScheduleFromJson)(schedule)

// ---------------------------------------------------------------------------------------------------------------
// Display

const pad2 = (n: number): string => String(n).padStart(2, "0")
const weekdayNames = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"] as const

/**
 * A short human description: `daily 09:00 Europe/Berlin`, `weekly Mon 09:00 UTC`, `every 5m`,
 * `cron "0 9 * * MON-FRI" (Europe/Paris)`.
 */
export const format = (schedule: Schedule): string => {
  switch (schedule._tag) {
    case "Daily":
      return `daily ${pad2(schedule.hour)}:${pad2(schedule.minute)} ${schedule.tz ?? "UTC"}`
    case "Weekly":
      return `weekly ${weekdayNames[schedule.weekday - 1]} ${pad2(schedule.hour)}:${pad2(schedule.minute)} ${
        schedule.tz ?? "UTC"
      }`
    case "Interval":
      return `every ${Duration.format(Duration.millis(schedule.everyMillis))}`
    case "Cron":
      return `cron ${JSON.stringify(schedule.expression)} (${schedule.tz ?? "UTC"})`
  }
}
