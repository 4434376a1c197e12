/**
 * Standard 5-field cron expressions (minute hour day-of-month month day-of-week): parsing with errors that name
 * the field and the bad value, and matching on a wall clock expressed as a "local epoch" (see zone.ts).
 * Pure: no clock, no zone. Time zones and DST are Schedule.ts's business.
 */
import { DAY, HOUR, MINUTE } from "./zone.js"

/** A parsed expression: one flag per allowed value of each field. */
export interface CronSpec {
  readonly minutes: ReadonlyArray<boolean> // 0-59
  readonly hours: ReadonlyArray<boolean> // 0-23
  readonly days: ReadonlyArray<boolean> // 1-31 (index 0 unused)
  readonly months: ReadonlyArray<boolean> // 1-12 (index 0 unused)
  readonly weekdays: ReadonlyArray<boolean> // 0-6, 0 = Sunday
  /**
   * Vixie cron: when both day fields are restricted (neither starts with `*`), a day matches if either does;
   * otherwise both must match.
   */
  readonly eitherDay: boolean
}

interface FieldRule {
  readonly name: string
  readonly min: number
  readonly max: number
  readonly names?: ReadonlyArray<string>
}

const fields: ReadonlyArray<FieldRule> = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day-of-month", min: 1, max: 31 },
  {
    name: "month",
    min: 1,
    max: 12,
    names: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
  },
  // 7 is Sunday too (normalised to 0 below).
  { name: "day-of-week", min: 0, max: 7, names: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] }
]

/** Why an expression was refused: `minute: 61 is out of range 0-59`. */
export class CronSyntaxError extends Error {}

const fail = (field: FieldRule, problem: string): never => {
  throw new CronSyntaxError(`${field.name}: ${problem}`)
}

/** A field's value; `rangeFrom` is the start of the range `text` ends, if it ends one. */
const value = (field: FieldRule, text: string, rangeFrom: number | undefined): number => {
  const upper = text.toUpperCase()
  const named = field.names?.indexOf(upper) ?? -1
  if (named >= 0) {
    // Day 0 is Sunday, but as the end of a range that starts later (FRI-SUN) it means 7, so the range is not
    // reversed. A range that starts on Sunday (SUN-SUN, 0-SUN) ends on that same day 0, as in Vixie cron.
    return field.name === "day-of-week" && named === 0 && rangeFrom !== undefined && rangeFrom > 0
      ? 7
      : named + field.min
  }
  if (!/^\d+$/.test(text)) {
    const hint = field.names === undefined ? "a number" : `a number or a name (${field.names.join(" ")})`
    return fail(field, `${JSON.stringify(text)} is not ${hint}`)
  }
  const n = Number(text)
  if (n < field.min || n > field.max) fail(field, `${text} is out of range ${field.min}-${field.max}`)
  return n
}

const parseField = (field: FieldRule, text: string): { readonly allowed: Array<boolean>; readonly star: boolean } => {
  const allowed = new Array<boolean>(field.max + 1).fill(false)
  for (const item of text.split(",")) {
    if (item === "") fail(field, `empty list item in ${JSON.stringify(text)}`)
    const slash = item.indexOf("/")
    const range = slash < 0 ? item : item.slice(0, slash)
    let step = 1
    if (slash >= 0) {
      const stepText = item.slice(slash + 1)
      if (!/^\d+$/.test(stepText) || Number(stepText) < 1) {
        fail(field, `step ${JSON.stringify(stepText)} in ${JSON.stringify(item)} must be a whole number of at least 1`)
      }
      step = Number(stepText)
    }
    let from: number
    let to: number
    if (range === "*") {
      from = field.min
      to = field.max
    } else {
      const dash = range.indexOf("-")
      if (dash < 0) {
        from = value(field, range, undefined)
        // `5/15` is `5-59/15` (as most crons read it); a bare value is just that value.
        to = slash >= 0 ? field.max : from
      } else {
        from = value(field, range.slice(0, dash), undefined)
        to = value(field, range.slice(dash + 1), from)
        if (from > to) fail(field, `range ${range} is reversed (${from} > ${to})`)
      }
    }
    for (let v = from; v <= to; v += step) allowed[v] = true
  }
  return { allowed, star: text.startsWith("*") }
}

/**
 * Parses a 5-field expression.
 *
 * @throws CronSyntaxError naming the field and the bad value, or saying why the expression can never fire.
 */
export const parseCron = (expression: string): CronSpec => {
  const parts = expression.trim().split(/\s+/)
  if (parts.length !== 5 || parts[0] === "") {
    throw new CronSyntaxError(
      `expected 5 fields (minute hour day-of-month month day-of-week), got ${parts[0] === "" ? 0 : parts.length}`
    )
  }
  const [minute, hour, day, month, weekday] = parts.map((text, i) => parseField(fields[i]!, text)) as [
    ReturnType<typeof parseField>,
    ReturnType<typeof parseField>,
    ReturnType<typeof parseField>,
    ReturnType<typeof parseField>,
    ReturnType<typeof parseField>
  ]
  const weekdays = weekday.allowed.slice(0, 7)
  if (weekday.allowed[7] === true) weekdays[0] = true
  const spec: CronSpec = {
    minutes: minute.allowed,
    hours: hour.allowed,
    days: day.allowed,
    months: month.allowed,
    weekdays,
    eitherDay: !day.star && !weekday.star
  }
  // With the day of week unrestricted, a day-of-month list may name only dates no chosen month has (31 Feb):
  // refused here, or next() would search in vain.
  if (!spec.eitherDay) {
    const possible = spec.months.some((on, m) => on && spec.days.some((d, n) => d && n <= longestMonth[m]!))
    if (!possible) throw new CronSyntaxError("day-of-month: no chosen month has any of these days, so it never fires")
  }
  return spec
}

/** The most days each month can have (February: 29, in leap years). Index 0 unused. */
const longestMonth = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const

const dayMatches = (spec: CronSpec, date: Date): boolean => {
  const dom = spec.days[date.getUTCDate()] === true
  const dow = spec.weekdays[date.getUTCDay()] === true
  return spec.eitherDay ? dom || dow : dom && dow
}

/**
 * The first wall time (a local epoch, whole minutes) at or after `wall` that the expression matches, or
 * undefined when there is none up to `limit`. Skips whole months, days and hours that cannot match.
 */
export const nextCronWall = (spec: CronSpec, wall: number, limit: number): number | undefined => {
  // Not before the first instant a Date can hold (callers look a day back from `from`).
  let t = Math.max(Math.ceil(wall / MINUTE) * MINUTE, -8.64e15)
  while (t <= limit) {
    const d = new Date(t)
    const month = d.getUTCMonth() + 1
    if (spec.months[month] !== true) {
      // The first day of the next month (setUTCMonth, not Date.UTC, which reads years 0-99 as 1900-1999).
      d.setUTCMonth(month, 1)
      t = d.setUTCHours(0, 0, 0, 0)
      continue
    }
    if (!dayMatches(spec, d)) {
      t = (Math.floor(t / DAY) + 1) * DAY
      continue
    }
    const hourStart = Math.floor(t / HOUR) * HOUR
    if (spec.hours[d.getUTCHours()] !== true) {
      t = hourStart + HOUR
      continue
    }
    for (let m = d.getUTCMinutes(); m < 60; m++) {
      if (spec.minutes[m] === true) return hourStart + m * MINUTE <= limit ? hourStart + m * MINUTE : undefined
    }
    t = hourStart + HOUR
  }
  return undefined
}
