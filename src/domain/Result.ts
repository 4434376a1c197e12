/**
 * The outcome of one execution. `failed` is true exactly when there is an error.
 */
import { Cause, Data, Predicate } from "effect"

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

/** A failed result; the message is taken from the error unless given. */
export const failure = (error: unknown, message?: string): Result =>
  new Failure({ error, message: message ?? errorMessage(error) })

/** Narrows a result to a failure. */
export const isFailure = (result: Result): result is Failure => result._tag === "Failure"

/**
 * A one-line, human-readable message for anything a handler may fail with: an `Error`, a tagged error, a
 * `Cause`, a string or any other value.
 */
export const errorMessage = (error: unknown): string => {
  if (Cause.isCause(error)) return Cause.pretty(error).split("\n")[0] ?? "unknown failure"
  if (error instanceof Error) {
    const tag = Predicate.hasProperty(error, "_tag") && typeof error._tag === "string" ? error._tag : undefined
    if (error.message.length > 0) return tag !== undefined ? `${tag}: ${error.message}` : error.message
    return tag ?? error.name
  }
  if (typeof error === "string") return error
  if (Predicate.hasProperty(error, "message") && typeof error.message === "string") return error.message
  if (Predicate.hasProperty(error, "_tag") && typeof error._tag === "string") return error._tag
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}

/** The JSON text stored for a successful output: `{}` when the handler returned nothing. */
export const encodeOutput = (output: unknown): string => {
  if (output === undefined) return "{}"
  try {
    return JSON.stringify(output) ?? "{}"
  } catch (e) {
    // A cyclic or BigInt output must not lose the success: store a note instead.
    return JSON.stringify({ unserializable: errorMessage(e) })
  }
}
