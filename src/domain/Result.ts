/**
 * The outcome of one execution. `failed` is true exactly when there is an error.
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Predicate from "effect/Predicate"

/** The handler finished; `output` is what it returned (stored JSON-encoded, `{}` when undefined). */
export class Success extends Data.TaggedClass("Success")<{ readonly output: unknown }> {
  get failed(): false {
    return false
  }
}

/** The handler failed: it threw, rejected, failed, died, hung past its timeout or was interrupted. */
export class Failure extends Data.TaggedClass("Failure")<{ readonly error: unknown; readonly message: string }> {
  get failed(): true {
    return true
  }
}

/** The outcome of one execution. */
export type Result = Success | Failure

/** A successful result carrying the handler's output. */
export const success = (output?: unknown): Result => new Success({ output })

/** A failed result; the message is taken from the error unless given, and bounded as `boundMessage` says. */
export const failure = (error: unknown, message?: string): Result =>
  new Failure({ error, message: message === undefined ? errorMessage(error) : boundMessage(message) })

/**
 * What a handler's returned value records: a `Result` it returned as it is (`Result.failure(…)` a failure with its
 * message, `Result.success(x)` a success whose output is `x`), anything else a success with that value as output.
 */
export const fromReturned = (value: unknown): Result =>
  value instanceof Success || value instanceof Failure ? value : new Success({ output: value })

/** Narrows a result to a failure. */
export const isFailure = (result: Result): result is Failure => result._tag === "Failure"

/** The longest error message stored (64 KiB of characters); a longer one is cut and says so. */
export const MAX_MESSAGE_CHARS = 65_536

/** The longest output JSON stored (1 MiB of characters); a longer one is replaced by a note saying how long. */
export const MAX_OUTPUT_CHARS = 1_048_576

/** NUL, which Postgres's `text` and `jsonb` cannot hold: a message carrying one would fail the whole write. */
const NUL = /\u0000/g

/** What a cut message keeps: room is left so that a cut message with a short prefix (`died: …`) is not cut again. */
const KEPT_CHARS = MAX_MESSAGE_CHARS - 1024

/**
 * A message as stored: NUL characters replaced by U+FFFD and, when longer than `MAX_MESSAGE_CHARS`, cut to its
 * first 63 KiB with a note saying how long it was, e.g. `… (truncated: 10485760 characters)`.
 */
export const boundMessage = (message: string): string => {
  const clean = message.replace(NUL, "\ufffd")
  if (clean.length <= MAX_MESSAGE_CHARS) return clean
  // Never end on half a surrogate pair.
  const end = /[\ud800-\udbff]/.test(clean[KEPT_CHARS - 1]!) ? KEPT_CHARS - 1 : KEPT_CHARS
  return `${clean.slice(0, end)}… (truncated: ${clean.length} characters)`
}

/** `f()`, or undefined when it throws: every read of a foreign value may run a getter or a Proxy trap. */
const attempt = <A>(f: () => A): A | undefined => {
  try {
    return f()
  } catch {
    return undefined
  }
}

const nonEmptyString = (value: unknown): string | undefined =>
  typeof value === "string" && value.length > 0 ? value : undefined

/** The message of anything, unbounded; may throw (the caller guards it). */
const describe = (error: unknown): string | undefined => {
  if (typeof error === "string") return error
  if (error === null || error === undefined || typeof error !== "object") {
    // Numbers, booleans, bigints and symbols: String never throws on them.
    return typeof error === "function" ? attempt(() => String(error)) : String(error)
  }
  if (attempt(() => Cause.isCause(error)) === true) {
    return attempt(() => Cause.pretty(error as Cause.Cause<unknown>).split("\n")[0]) ?? "unknown failure"
  }
  const tag = attempt(() =>
    Predicate.hasProperty(error, "_tag") && typeof error._tag === "string" ? error._tag : undefined
  )
  const message = attempt(() => nonEmptyString((error as { message?: unknown }).message))
  if (attempt(() => error instanceof Error) === true) {
    if (message !== undefined) return tag !== undefined ? `${tag}: ${message}` : message
    return tag ?? attempt(() => nonEmptyString((error as Error).name)) ?? attempt(() => String(error))
  }
  if (message !== undefined) return message
  if (tag !== undefined) return tag
  return attempt(() => JSON.stringify(error)) ?? attempt(() => String(error))
}

/**
 * A one-line, human-readable message for anything a handler may fail with: an `Error`, a tagged error, a
 * `Cause`, a string or any other value. Never throws, whatever the value (a throwing `message` getter or
 * `toString`, a hostile or revoked Proxy, a symbol); bounded as `boundMessage` says.
 */
export const errorMessage = (error: unknown): string => {
  const described = attempt(() => describe(error))
  // typeof never throws, not even on a revoked Proxy.
  return boundMessage(described ?? `a thrown ${typeof error} that cannot be read`)
}

/**
 * The JSON text stored for a successful output: `{}` when the handler returned nothing; a note
 * `{"unserializable": message}` when it cannot be encoded (cyclic, a BigInt, a throwing `toJSON`), and
 * `{"tooLarge": {"characters": N, "limit": MAX_OUTPUT_CHARS}}` when its JSON is longer than `MAX_OUTPUT_CHARS`.
 * A NUL or a lone surrogate inside a string, which `jsonb` refuses, is stored as U+FFFD.
 */
export const encodeOutput = (output: unknown): string => {
  if (output === undefined) return "{}"
  let json: string
  try {
    json = JSON.stringify(output) ?? "{}"
  } catch (e) {
    // A cyclic or BigInt output must not lose the success: store a note instead.
    return JSON.stringify({ unserializable: errorMessage(e) })
  }
  if (json.length > MAX_OUTPUT_CHARS) {
    return JSON.stringify({ tooLarge: { characters: json.length, limit: MAX_OUTPUT_CHARS } })
  }
  // JSON.stringify writes NUL as the escape \u0000, and a lone surrogate as \udXXX (a pair is written as it is);
  // jsonb refuses both: each is stored as U+FFFD. An escaped backslash before the "u" (an even count) is text.
  return json.includes("\\u0000") || /\\ud[89a-f]/.test(json)
    ? json.replace(/(\\+)u(?:0000|d[89a-f][0-9a-f]{2})/g, (all, slashes: string) =>
        slashes.length % 2 === 1 ? `${slashes}ufffd` : all
      )
    : json
}
