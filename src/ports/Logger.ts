/**
 * Logging. Effect's own `Logger` serves as the port: kairos writes every line with `Effect.logInfo` /
 * `Effect.logWarning` / `Effect.logError`, annotated (`Effect.annotateLogs`) with what it is about (a task type, a
 * job, a channel), so an Effect program sends kairos's lines wherever its logger goes
 * (`Logger.replace(Logger.defaultLogger, yours)`). For code without Effect, `fromPlain` turns a plain logger — pino,
 * winston, `console` — into one; the Promise API's `logger` option uses it.
 */
import * as Cause from "effect/Cause"
import * as HashMap from "effect/HashMap"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"

/** What a line carries besides its message: its annotations, and `cause` (a message) when it logs a failure. */
export type LogFields = Readonly<Record<string, unknown>>

/** A plain logger (pino's and winston's shape): `warn` is optional, and falls back to `info`. */
export interface PlainLogger {
  readonly info: (message: string, fields?: LogFields) => void
  readonly warn?: ((message: string, fields?: LogFields) => void) | undefined
  readonly error: (message: string, fields?: LogFields) => void
}

const text = (message: unknown): string =>
  Array.isArray(message)
    ? message.map((part) => (typeof part === "string" ? part : String(part))).join(" ")
    : String(message)

const causeMessage = (cause: Cause.Cause<unknown>): string => {
  const squashed = Cause.squash(cause)
  try {
    return squashed instanceof Error ? squashed.message : String(squashed)
  } catch {
    return "(a failure that cannot be shown)"
  }
}

/**
 * An Effect logger that writes every line to `plain`: errors (and fatal lines) to `error`, warnings to `warn` (else
 * `info`), the rest to `info`. The fields are the line's annotations, plus `cause` when it carries one. A logger that
 * throws loses that line, never the fiber that logged it.
 */
export const fromPlain = (plain: PlainLogger): Logger.Logger<unknown, void> =>
  Logger.make(({ annotations, cause, logLevel, message }) => {
    const fields: Record<string, unknown> = {}
    for (const [key, value] of HashMap.toEntries(annotations)) fields[key] = value
    if (!Cause.isEmpty(cause)) fields["cause"] = causeMessage(cause)
    const line = text(message)
    const hasFields = Object.keys(fields).length > 0
    try {
      if (LogLevel.greaterThanEqual(logLevel, LogLevel.Error)) plain.error(line, hasFields ? fields : undefined)
      else if (logLevel._tag === "Warning" && plain.warn !== undefined) plain.warn(line, hasFields ? fields : undefined)
      else plain.info(line, hasFields ? fields : undefined)
    } catch {
      // The user's logger failed: nothing left to tell it with.
    }
  })

/** Replaces Effect's default logger with `plain` (see `fromPlain`). */
export const layerPlain = (plain: PlainLogger): Layer.Layer<never> =>
  Logger.replace(Logger.defaultLogger, fromPlain(plain))
