/**
 * How the text values of `scheduler_meta` read, in every adapter alike.
 */
import * as Option from "effect/Option"

/** The `scheduler_meta` key of the pause switch. `scheduler.paused` is stored as this row. */
export const SEMAPHORE_KEY = "semaphore"

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

/** Paused when the semaphore row reads red (or true); a missing or malformed row is green. */
export const isPaused = (semaphore: string | undefined): boolean =>
  semaphore === undefined ? false : Option.getOrElse(parseBool(semaphore), () => false)

/** The text stored for a setting's value. */
export const settingText = (value: boolean | number | string): string => String(value)
