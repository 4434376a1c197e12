/**
 * Durations as people write them, read one way by the configuration and the command line: the short forms
 * (`500ms`, `4s`, `10m`, `1h`, `2d`, `1w`, with or without a space), Effect's long forms (`"30 seconds"`,
 * `"5 minutes"`), a number of milliseconds, a bigint of nanoseconds, a `[seconds, nanos]` pair or a `Duration`.
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import { InvalidConfigError } from "./errors.js"

/** A short unit, as in `"500ms"` or `"4 s"`. */
export type ShortUnit = "ms" | "s" | "m" | "h" | "d" | "w"

/** What a duration may be written as; `parse` checks at run time what the type cannot (a positive, finite value). */
export type Input = Duration.DurationInput | `${number}${ShortUnit}` | `${number} ${ShortUnit}`

/** Why a value is not a usable duration. */
export type Problem = "not a duration" | "not positive" | "not finite"

const UNITS: Readonly<Record<string, (n: number) => Duration.Duration>> = {
  ms: Duration.millis,
  s: Duration.seconds,
  m: Duration.minutes,
  h: Duration.hours,
  d: Duration.days,
  w: Duration.weeks
}

/** A unit as written, to its short name. Plurals and Effect's long names included; case does not matter. */
const ALIASES: Readonly<Record<string, string>> = {
  ns: "ns",
  nano: "ns",
  nanos: "ns",
  nanosecond: "ns",
  nanoseconds: "ns",
  us: "us",
  micro: "us",
  micros: "us",
  microsecond: "us",
  microseconds: "us",
  ms: "ms",
  milli: "ms",
  millis: "ms",
  millisecond: "ms",
  milliseconds: "ms",
  s: "s",
  sec: "s",
  secs: "s",
  second: "s",
  seconds: "s",
  m: "m",
  min: "m",
  mins: "m",
  minute: "m",
  minutes: "m",
  h: "h",
  hr: "h",
  hrs: "h",
  hour: "h",
  hours: "h",
  d: "d",
  day: "d",
  days: "d",
  w: "w",
  week: "w",
  weeks: "w"
}

const TEXT = /^([+-]?(?:\d+(?:\.\d+)?|\.\d+))\s*([a-z]+)$/i

const fromText = (text: string): Either.Either<Duration.Duration, Problem> => {
  const match = TEXT.exec(text.trim())
  const unit = match === null ? undefined : ALIASES[match[2]!.toLowerCase()]
  if (match === null || unit === undefined) return Either.left("not a duration")
  const n = Number(match[1])
  if (!(n > 0)) return Either.left("not positive")
  // Nanos and micros go through bigint in Effect; whole numbers only there, rounded like Effect rounds them.
  if (unit === "ns") return Either.right(Duration.nanos(BigInt(Math.round(n))))
  if (unit === "us") return Either.right(Duration.nanos(BigInt(Math.round(n * 1000))))
  return Either.right(UNITS[unit]!(n))
}

const positiveFinite = (d: Duration.Duration): Either.Either<Duration.Duration, Problem> =>
  !Duration.isFinite(d)
    ? Either.left("not finite")
    : Duration.greaterThan(d, Duration.zero)
      ? Either.right(d)
      : Either.left("not positive")

/**
 * Reads a positive, finite duration from anything a user may pass, or says why it is not one. Effect's own
 * `Duration.decode` is not used for text because it rejects `"4s"` and turns negative numbers into zero.
 */
export const parse = (input: unknown): Either.Either<Duration.Duration, Problem> => {
  try {
    if (typeof input === "string") return fromText(input)
    if (typeof input === "number") {
      if (Number.isNaN(input)) return Either.left("not a duration")
      if (input === Number.POSITIVE_INFINITY) return Either.left("not finite")
      return input > 0 ? Either.right(Duration.millis(input)) : Either.left("not positive")
    }
    if (typeof input === "bigint") return input > 0n ? Either.right(Duration.nanos(input)) : Either.left("not positive")
    if (Duration.isDuration(input)) return positiveFinite(input)
    if (Array.isArray(input) && input.length === 2 && input.every((n) => typeof n === "number")) {
      const [seconds, nanos] = input as [number, number]
      if (Number.isNaN(seconds) || Number.isNaN(nanos)) return Either.left("not a duration")
      if (seconds < 0 || nanos < 0) return Either.left("not positive")
      return positiveFinite(Duration.decode([seconds, nanos]))
    }
  } catch {
    // A hostile value (a getter that throws, a revoked Proxy) is simply not a duration.
  }
  return Either.left("not a duration")
}

/** A value for a message: strings quoted, others as written, never long. */
const show = (value: unknown): string => {
  let text: string
  try {
    text =
      typeof value === "string"
        ? JSON.stringify(value)
        : typeof value === "bigint"
          ? `${value}n`
          : Duration.isDuration(value)
            ? Duration.format(value)
            : typeof value === "object" && value !== null
              ? (JSON.stringify(value) ?? String(value))
              : String(value)
  } catch {
    text = `a value of type ${typeof value}`
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text
}

const explain: Record<Problem, string> = {
  "not a duration": "is not a duration",
  "not positive": "is not a positive duration",
  "not finite": "is not a finite duration"
}

/**
 * `parse`, failing with an `InvalidConfigError` that names the field and the value, e.g.
 * `leaseDuration: "4 sekunds" is not a duration (use e.g. "30 seconds" or "30s")`.
 */
export const decodeField = (field: string, input: unknown): Either.Either<Duration.Duration, InvalidConfigError> =>
  Either.mapLeft(
    parse(input),
    (problem) =>
      new InvalidConfigError({
        field,
        value: input,
        message: `${field}: ${show(input)} ${explain[problem]} (use e.g. "30 seconds" or "30s")`
      })
  )
