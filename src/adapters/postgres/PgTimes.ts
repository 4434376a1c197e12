/**
 * `timestamptz` values on the hot path: read on kairos's own pool, and written into a batch of results.
 *
 * node-postgres parses every `timestamptz` with a regular expression (postgres-date 1.0.7): ~0.6 µs and a match
 * array per value, and a claim reads one or more per item. Postgres writes the value in one shape under
 * `DateStyle = ISO` (the default, and what a driver expects): `2026-12-02 00:30:35.773123+05:30`. That shape is read
 * here by character positions; anything else (a five-digit year, BC, an offset with seconds, `infinity`, another
 * DateStyle) goes to node-postgres's own parser, so every value reads as it did.
 */
import pg from "pg"

const TIMESTAMPTZ = 1184

const digitAt = (s: string, i: number): number => s.charCodeAt(i) - 48
const twoDigits = (s: string, i: number): number => digitAt(s, i) * 10 + digitAt(s, i + 1)
const isDigit = (s: string, i: number): boolean => {
  const c = s.charCodeAt(i)
  return c >= 48 && c <= 57
}

/** The fast path's reading, or undefined when `text` is not of the ISO shape it knows. */
const readIso = (text: string): Date | undefined => {
  const n = text.length
  // YYYY-MM-DD HH:MM:SS, then an optional fraction and an offset of ±HH or ±HH:MM.
  if (
    n < 22 ||
    text.charCodeAt(4) !== 45 ||
    text.charCodeAt(7) !== 45 ||
    text.charCodeAt(10) !== 32 ||
    text.charCodeAt(13) !== 58 ||
    text.charCodeAt(16) !== 58
  ) {
    return undefined
  }
  let i = 19
  let ms = 0
  if (text.charCodeAt(i) === 46) {
    i++
    // Milliseconds are the fraction's first three digits (a Date holds no finer time; node-postgres truncates too).
    for (let scale = 100; i < n && isDigit(text, i); i++, scale /= 10) if (scale >= 1) ms += digitAt(text, i) * scale
  }
  const sign = text.charCodeAt(i)
  if ((sign !== 43 && sign !== 45) || !isDigit(text, i + 1) || !isDigit(text, i + 2)) return undefined
  let offsetMinutes = twoDigits(text, i + 1) * 60
  if (i + 6 === n && text.charCodeAt(i + 3) === 58) offsetMinutes += twoDigits(text, i + 4)
  else if (i + 3 !== n) return undefined
  const year = twoDigits(text, 0) * 100 + twoDigits(text, 2)
  // Date.UTC reads years 0–99 as 1900–1999.
  if (year < 100) return undefined
  const utc = Date.UTC(
    year,
    twoDigits(text, 5) - 1,
    twoDigits(text, 8),
    twoDigits(text, 11),
    twoDigits(text, 14),
    twoDigits(text, 17),
    ms
  )
  if (Number.isNaN(utc)) return undefined
  return new Date(sign === 43 ? utc - offsetMinutes * 60_000 : utc + offsetMinutes * 60_000)
}

const pgTimestamptz = pg.types.getTypeParser(TIMESTAMPTZ, "text") as (text: string) => Date | number | string

/** A `timestamptz` as text, read as node-postgres reads it. */
export const parseTimestamptz = (text: string): Date | number | string => readIso(text) ?? pgTimestamptz(text)

/**
 * The type parsers of kairos's pool: node-postgres's (with whatever the application registered globally), except
 * `timestamptz` in text, read by `parseTimestamptz`.
 */
export const typeParsers: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === TIMESTAMPTZ && format !== "binary"
      ? parseTimestamptz
      : pg.types.getTypeParser(oid, format ?? "text")) as pg.CustomTypesConfig["getTypeParser"]
}

const DAY_MS = 86_400_000

// The date part of the last day written, reused while times fall on that day (a batch's times mostly do).
let dayStartMs = Number.NaN
let dayPrefix = ""
const pad2 = (n: number): string => (n < 10 ? `0${n}` : `${n}`)
const pad3 = (n: number): string => (n < 10 ? `00${n}` : n < 100 ? `0${n}` : `${n}`)

/**
 * A time as `Date.prototype.toISOString` writes it (`2026-12-02T00:30:35.773Z`), which Postgres reads as the same
 * `timestamptz`. `toISOString` costs ~0.7 µs a call, and a batch of results writes two per execution; the day's part
 * is kept from the last call, so a time on the same day costs a few arithmetic steps.
 */
export const isoString = (date: Date): string => {
  const ms = date.getTime()
  const sinceDayStart = ms - dayStartMs
  if (!(sinceDayStart >= 0 && sinceDayStart < DAY_MS)) {
    const iso = date.toISOString()
    // Years outside 0000–9999 are written with a sign and six digits: no prefix to keep for them.
    if (iso.length !== 24) return iso
    dayStartMs = ms - (((ms % DAY_MS) + DAY_MS) % DAY_MS)
    dayPrefix = iso.slice(0, 11)
    return iso
  }
  const seconds = Math.floor(sinceDayStart / 1000)
  return (
    `${dayPrefix}${pad2(Math.floor(seconds / 3600))}:${pad2(Math.floor(seconds / 60) % 60)}:${pad2(seconds % 60)}.` +
    `${pad3(sinceDayStart % 1000)}Z`
  )
}
