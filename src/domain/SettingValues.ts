/**
 * How the text values of `scheduler_meta` read, in every adapter alike.
 */
import * as Option from "effect/Option"

/** The `scheduler_meta` key of the pause switch. `scheduler.paused` is stored as this row. */
export const SEMAPHORE_KEY = "semaphore"
/** The switch row's value when work runs. */
export const GREEN = "green"
/** The switch row's value when nothing new starts. */
export const RED = "red"

const TRUE = ["true", "1", "yes", "on", "red"]
const FALSE = ["false", "0", "no", "off", "green"]

/** A boolean setting: true/false, 1/0, yes/no, on/off (and red/green for the switch); anything else is unset. */
export const parseBool = (value: string): Option.Option<boolean> => {
  const v = value.trim().toLowerCase()
  if (TRUE.includes(v)) return Option.some(true)
  if (FALSE.includes(v)) return Option.some(false)
  return Option.none()
}

/** An integer setting; anything else is unset. */
export const parseInt = (value: string): Option.Option<number> => {
  const v = value.trim()
  const n = Number(v)
  return v !== "" && Number.isSafeInteger(n) ? Option.some(n) : Option.none()
}

/** The semaphore row's value for a `scheduler.paused` value: `red` (paused) or `green`; None when not a boolean. */
export const semaphoreFor = (paused: string): Option.Option<"red" | "green"> =>
  Option.map(parseBool(paused), (p) => (p ? "red" : "green"))

/**
 * Whether the switch row's value (undefined: no row) lets work start: a row reading red (or true) is red; a missing
 * or malformed row is green. The one reading of the switch: `Semaphore.isGreen` and the runner's `switches.paused`
 * both go through it, in every adapter.
 */
export const isGreen = (semaphore: string | undefined): boolean =>
  semaphore === undefined ? true : !Option.getOrElse(parseBool(semaphore), () => false)

/** The text stored for a setting's value. */
export const settingText = (value: boolean | number | string): string => String(value)
