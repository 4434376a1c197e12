/**
 * Handlers: what a task type runs. An Effect, an async function or a plain function are all accepted; whatever
 * they do — return, fail, throw, reject, die, hang past the timeout, get interrupted — becomes a `Result`. A handler
 * may also return a `Result` itself: `Result.failure(error, message?)` is recorded as a failure (retried like a
 * throw), `Result.success(output)` as a success whose output is `output`.
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Job } from "../domain/Job.js"
import type * as Retry from "../domain/Retry.js"
import * as Result from "../domain/Result.js"
import type { Transaction } from "../ports/Transaction.js"

/**
 * A handler for one task type. It receives the job and an `AbortSignal` that fires when the execution times out or
 * the runner is forced to stop (for plain async code; Effect handlers are interrupted instead). The signal is live
 * when the handler declares a second parameter (`(job, signal) => …`); otherwise none is made for it.
 */
export type Handler<A = unknown, E = unknown, R = never> = (
  job: Job,
  signal: AbortSignal
) => Effect.Effect<A, E, R> | PromiseLike<A> | A

/**
 * What a transactional handler gets as its second argument: the transaction it runs in (`tx.query(text, values)`
 * resolves to `{ rows }`), and the execution's `AbortSignal` (`tx.signal`), which fires when it times out, loses its
 * lease or is forced to stop (the transaction is then rolled back, and later statements refused).
 */
export interface HandlerTransaction extends Transaction {
  readonly signal: AbortSignal
}

/**
 * A handler registered with `{ transactional: true }`: it runs inside one transaction of kairos's own database, and
 * its success is recorded in that same transaction (see `HandlerOptions.transactional`). An Effect handler uses its
 * `SqlClient` as usual: inside the handler it is the transaction. Other code uses `tx`.
 */
export type TransactionalHandler<A = unknown, E = unknown, R = never> = (
  job: Job,
  tx: HandlerTransaction
) => Effect.Effect<A, E, R> | PromiseLike<A> | A

/** Options of a registered handler. */
export interface HandlerOptions {
  /** How long one execution may run before it is interrupted. Default: the runner's `timeout` (15 minutes). */
  readonly timeout?: Duration.DurationInput | undefined
  /**
   * Retries for this task type's queue items: `{ attempts: 5 }` tries one run up to five times, waiting an
   * exponential backoff (1 s, 2 s, 4 s … at most an hour) between attempts; `backoff` sets it (`"30s"` fixed, or
   * `{ type: "exponential", delay, max }`). An item enqueued with its own `retry` uses that instead. Default: no
   * retry. Scheduled jobs retry their slots with the runner's `retryAttempts` instead.
   */
  readonly retry?: Retry.Input | undefined
}

/** The options of a transactional handler (see `TransactionalHandler`). */
export interface TransactionalOptions extends HandlerOptions {
  /**
   * Runs each execution inside one transaction of kairos's own database, and records its success in that same
   * transaction, fenced by the execution's lease: the handler's writes and the record commit together, or neither
   * does. A lease lost while it runs (a frozen worker, another instance took the work over) rolls it all back; a
   * failure rolls back the handler's writes and is recorded (and retried) in a transaction of its own; a timeout
   * cancels the statement in flight and rolls back. The memory stores have no database: there the handler runs, its
   * record is made at once (fenced), and `tx.query` is refused.
   */
  readonly transactional: true
}

/** Whether options registered with a handler make it transactional. */
export const isTransactional = (options: HandlerOptions | TransactionalOptions | undefined): boolean =>
  (options as Partial<TransactionalOptions> | undefined)?.transactional === true

/** An execution ran past its timeout and was interrupted. */
export class HandlerTimeoutError extends Data.TaggedError("HandlerTimeoutError")<{
  readonly taskType: string
  readonly timeout: Duration.Duration
}> {
  override get message(): string {
    return `timed out after ${Duration.format(this.timeout)}: the handler was interrupted`
  }
}

const isObjectLike = (u: unknown): u is object => (typeof u === "object" && u !== null) || typeof u === "function"

/**
 * `Effect.isEffect`, checked directly: the same test, without the generic property check behind it (a `dual` that
 * allocates per call). Asked of every handler's return, on the hot path.
 */
export const isEffect = (u: unknown): u is Effect.Effect<unknown, unknown, unknown> =>
  isObjectLike(u) && Effect.EffectTypeId in u

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  isObjectLike(u) && typeof (u as { readonly then?: unknown }).then === "function"

/** A signal for handlers that declare no second parameter: they cannot read it, so none is made per execution. */
const unusedSignal: AbortSignal = new AbortController().signal

/**
 * A handler's promise, still pending. The runner waits for it on the worker itself (no fiber of its own, no timer
 * per execution: timeouts are watched for all executions at once), and settles it early on a timeout, a lost lease
 * or a forced stop, aborting `controller` when the handler took a signal.
 */
export class PendingPromise {
  constructor(
    readonly promise: PromiseLike<unknown>,
    readonly controller: AbortController | undefined
  ) {}
}

/**
 * A handler's Effect, to run in a fiber of its own to a `Result`. Its timeout is watched with every other
 * execution's (no timer per execution): past it, the fiber is interrupted and the execution recorded as timed out,
 * `controller` aborted first.
 */
export class PendingEffect {
  constructor(
    readonly effect: Effect.Effect<Result.Result>,
    readonly controller: AbortController | undefined
  ) {}
}

/** The failure recorded for an execution that ran past its timeout. */
export const timedOut = (taskType: string, timeout: Duration.Duration): Result.Result => {
  const error = new HandlerTimeoutError({ taskType, timeout })
  return Result.failure(error, error.message)
}

/**
 * Calls a handler for one execution. A plain value or a throw is its `Result` at once, with no fiber, timer or
 * `AbortController` to pay for (the common case of a quick synchronous handler); a promise is a `PendingPromise`;
 * an Effect a `PendingEffect`. An `AbortSignal` is made only for handlers that declare a second parameter
 * (`takesSignal`).
 */
export const invoke = (
  handler: Handler<unknown, unknown, never>,
  job: Job,
  takesSignal: boolean
): Result.Result | PendingPromise | PendingEffect => {
  const controller = takesSignal ? new AbortController() : undefined
  let out: unknown
  let effect: boolean
  let promise: boolean
  try {
    out = handler(job, controller?.signal ?? unusedSignal)
    effect = isEffect(out)
    // Inside the try: a returned value whose `then` getter throws is that handler's failure, not the runner's.
    promise = !effect && isPromiseLike(out)
  } catch (e) {
    // A plain function that throws: its error, as it threw it.
    return Result.failure(e)
  }
  if (promise) return new PendingPromise(out as PromiseLike<unknown>, controller)
  if (!effect) return Result.fromReturned(out)
  return new PendingEffect(awaitResult(out as Effect.Effect<unknown, unknown>, controller), controller)
}

/** How an Effect handler's exit is recorded. */
const toResult = (exit: Exit.Exit<unknown, unknown>): Result.Result => {
  if (Exit.isSuccess(exit)) return Result.fromReturned(exit.value)
  const cause = exit.cause
  if (Cause.isTimeoutException(Cause.squash(cause))) return Result.failure(Cause.squash(cause))
  const failure = Cause.failureOption(cause)
  if (failure._tag === "Some") {
    if (failure.value instanceof HandlerTimeoutError) return Result.failure(failure.value, failure.value.message)
    return Result.failure(failure.value)
  }
  if (Cause.isInterruptedOnly(cause)) return Result.failure(cause, "interrupted: the handler was interrupted")
  const defect = Cause.squash(cause)
  return Result.failure(defect, `died: ${Result.errorMessage(defect)}`)
}

const interruptedError = () => new Error("the execution was interrupted")

// A handler that interrupts itself ends in an interrupted exit here: a recorded failure. Interruption from outside
// (a timeout, a lost lease, a forced stop) still interrupts the fiber running this.
const awaitResult = (
  out: Effect.Effect<unknown, unknown>,
  controller: AbortController | undefined
): Effect.Effect<Result.Result> =>
  Effect.map(
    Effect.exit(
      controller === undefined
        ? out
        : Effect.onInterrupt(out, () => Effect.sync(() => controller.abort(interruptedError())))
    ),
    toResult
  )

/**
 * Calls a transactional handler for one execution, as an Effect to run inside its transaction (see the lanes'
 * transactional path): whatever it returns, throws, rejects or fails with becomes its `Result`. Interrupted (its
 * timeout, a lost lease, a forced stop), `controller` is aborted; a pending promise runs on unobserved, and what it
 * sends through `tx` afterwards is refused by the store.
 */
export const invokeInTransaction = (
  handler: Handler<unknown, unknown, never>,
  job: Job,
  tx: HandlerTransaction,
  controller: AbortController
): Effect.Effect<Result.Result> =>
  Effect.suspend(() => {
    let out: unknown
    let effect: boolean
    let promise: boolean
    try {
      out = (handler as unknown as TransactionalHandler<unknown, unknown, never>)(job, tx)
      effect = isEffect(out)
      promise = !effect && isPromiseLike(out)
    } catch (e) {
      return Effect.succeed(Result.failure(e))
    }
    if (effect) return awaitResult(out as Effect.Effect<unknown, unknown>, controller)
    if (!promise) return Effect.succeed(Result.fromReturned(out))
    const pending = out as PromiseLike<unknown>
    return Effect.async<Result.Result>((resume) => {
      try {
        pending.then(
          (value) => resume(Effect.succeed(Result.fromReturned(value))),
          (error: unknown) => resume(Effect.succeed(Result.failure(error)))
        )
      } catch (e) {
        resume(Effect.succeed(Result.failure(e)))
      }
      return Effect.sync(() => controller.abort(interruptedError()))
    })
  })
