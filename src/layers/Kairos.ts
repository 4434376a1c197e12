/**
 * kairos without Effect: a Promise API over the Postgres runner, for code that only writes async functions.
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as PgKairos from "./PgKairos.js"
import type { QueueItem } from "../domain/QueueItem.js"
import type { JobRun, ScheduledJob } from "../domain/ScheduledJob.js"
import { now } from "../ports/Clock.js"
import { layerPlain, type PlainLogger } from "../ports/Logger.js"
import { type EnqueueInput, type FlowStepInput, QueueStore } from "../ports/QueueStore.js"
import type { Job } from "../domain/Job.js"
import type { FlowLimit, FlowLimitInput } from "../domain/Limits.js"
import { Limits } from "../ports/Limits.js"
import type { Handler, HandlerOptions, HandlerTransaction, TransactionalOptions } from "../runtime/Handler.js"
import { NotFoundError } from "../runtime/Admin.js"
import * as Admin from "../runtime/Admin.js"
import { type RecurringJob, Runner, type RunnerStats } from "../runtime/Runner.js"

/** A running kairos instance with a Promise API. */
export interface Kairos {
  /**
   * Registers the handler of a task type: an async (or plain) function; a throw is a recorded failure. With
   * `{ transactional: true }` its second argument is the transaction it runs in (`tx.query(text, values)` resolves
   * to `{ rows }`, `tx.signal` is the execution's abort signal), and its success is recorded in that transaction.
   */
  readonly register: {
    (
      taskType: string,
      handler: (job: Job, tx: HandlerTransaction) => unknown,
      options: TransactionalOptions
    ): Promise<void>
    (taskType: string, handler: (job: Job, signal: AbortSignal) => unknown, options?: HandlerOptions): Promise<void>
  }
  /** Upserts recurring jobs by name. */
  readonly defineJobs: (jobs: ReadonlyArray<RecurringJob>) => Promise<ReadonlyArray<ScheduledJob>>
  /** Adds a queue item. */
  readonly enqueue: (input: EnqueueInput) => Promise<QueueItem>
  /** Adds many queue items in one statement; returns their ids, in order. */
  readonly enqueueMany: (inputs: ReadonlyArray<EnqueueInput>) => Promise<ReadonlyArray<string>>
  /**
   * Adds a flow in one transaction: steps named by `key`, each waiting for the steps its `after` names; resolves to
   * the ids by key. Rejects with InvalidFlowError (a cycle, a key used twice, an unknown `after` key) and inserts
   * nothing then.
   */
  readonly enqueueFlow: (steps: ReadonlyArray<FlowStepInput>) => Promise<Readonly<Record<string, string>>>
  /** Starts claiming and running work. */
  readonly start: () => Promise<void>
  /** Stops gracefully (running handlers get the grace period) and closes the pool. */
  readonly stop: () => Promise<void>
  /**
   * Pauses every instance on the database (the semaphore turns red): nothing new starts; running executions finish.
   * Idle instances hear of it at once (NOTIFY); the rest at their next tick.
   */
  readonly pause: () => Promise<void>
  /** Resumes every instance on the database (the semaphore turns green); idle ones wake at once. */
  readonly resume: () => Promise<void>
  /** Whether the instances on the database are paused (the semaphore is red). */
  readonly isPaused: () => Promise<boolean>
  /** Pauses a job by name: its slots stop starting (running ones finish); re-defining it keeps it paused. */
  readonly pauseJob: (name: string) => Promise<ScheduledJob>
  /** Resumes a paused job; slots missed meanwhile follow its `missedSlots` policy. */
  readonly resumeJob: (name: string) => Promise<ScheduledJob>
  /** Fires a job now, as an extra slot beside its schedule (every runner on the database is woken). */
  readonly runJob: (name: string) => Promise<JobRun>
  /**
   * Cancels a queue item, pending or processing (a running execution's result is then refused); resolves to the
   * status it had, or rejects with ItemNotFoundError.
   */
  readonly cancel: (itemId: string) => Promise<"pending" | "processing">
  /** Enqueues again the item an execution ran (its task type and payload); rejects with ItemNotFoundError. */
  readonly retry: (processedId: string) => Promise<QueueItem>
  /** Executions started, succeeded and failed so far. */
  readonly stats: () => Promise<RunnerStats>
  /**
   * Sets a task type's flow limits, replacing what it had, for every worker on the database (they hear of it at
   * once): `{ taskType, concurrency?, perGroup?, rate?, per?, ratePerGroup? }` (`perGroup`: the concurrency is each
   * group's; `ratePerGroup`: the rate is). Rejects with InvalidLimitError when not valid.
   */
  readonly setLimit: (input: FlowLimitInput) => Promise<FlowLimit>
  /** Removes a task type's flow limits; resolves to whether it had any. */
  readonly clearLimit: (taskType: string) => Promise<boolean>
  /** Every task type's flow limits. */
  readonly limits: () => Promise<ReadonlyArray<FlowLimit>>
  /**
   * Resolves when the queue is empty (no item pending or processing, by any worker) and this instance runs
   * nothing; rejects after `timeout` (default: never). Items that repeat forever, or whose task type no worker
   * handles, keep it waiting: give a timeout where that can happen.
   */
  readonly drain: (options?: { readonly timeout?: Duration.DurationInput }) => Promise<void>
  /**
   * Calls `listener` each time this instance becomes idle: the queue empty and nothing running here (checked every
   * `checkEvery`, default 250 ms, while a listener is subscribed). Returns the unsubscribe function.
   */
  readonly onIdle: (listener: () => void, options?: { readonly checkEvery?: Duration.DurationInput }) => () => void
}

/**
 * Raised by `pauseJob`, `resumeJob`, `runJob` (a name no job has), `cancel` and `retry` (an id no item or execution
 * has): kairos's one not-found error, the same the CLI and the dashboard answer with. `what` says which kind,
 * `key` the name or id.
 */
export { NotFoundError } from "../runtime/Admin.js"

/**
 * A `NotFoundError` about a job: `error instanceof JobNotFoundError` holds for those (kept from before the one
 * `NotFoundError`; its `_tag` is `"NotFoundError"`).
 */
export class JobNotFoundError extends NotFoundError {
  static override [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof NotFoundError && value.what === "job"
  }
}

/**
 * A `NotFoundError` about a queue item or an execution: `error instanceof ItemNotFoundError` holds for those (kept
 * from before the one `NotFoundError`; its `_tag` is `"NotFoundError"`).
 */
export class ItemNotFoundError extends NotFoundError {
  static override [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof NotFoundError && value.what !== "job"
  }
}

/** Raised by `drain` when its timeout passes first. */
export class DrainTimeoutError extends Data.TaggedError("DrainTimeoutError")<{ readonly message: string }> {}

/** What `create` takes: the Postgres layer's options, and a logger. */
export interface Options extends PgKairos.Options {
  /**
   * Where kairos's lines go (pino, winston, or any object with `info`, `error` and optionally `warn`): every line the
   * runner and this API write, with their annotations as fields. Default: Effect's logger, on the console.
   */
  readonly logger?: PlainLogger | undefined
}

/**
 * Connects (and migrates, unless `migrate: false`), ready to register handlers and start. With `startGreen: false`,
 * a database that has no pause switch yet starts paused (`resume()` starts work).
 */
export const create = async (options: Options): Promise<Kairos> => {
  const layer = PgKairos.layer(options)
  const runtime = ManagedRuntime.make(
    options.logger === undefined ? layer : layer.pipe(Layer.provide(layerPlain(options.logger)))
  )
  // Promises reject with kairos's own error (a tagged error with a message), not Effect's FiberFailure wrapper.
  const run = <A, E>(effect: Effect.Effect<A, E, ManagedRuntime.ManagedRuntime.Context<typeof runtime>>): Promise<A> =>
    runtime.runPromiseExit(effect).then((exit) => {
      if (Exit.isSuccess(exit)) return exit.value
      throw Cause.squash(exit.cause)
    })
  const runner = await run(Runner).catch(async (error: unknown) => {
    await runtime.dispose()
    throw error
  })
  // The operator's actions, stamped by the runtime's Clock (PgClock: the database's); a job change then wakes this
  // runner at once (others hear the database's NOTIFY).
  const admin = await run(Admin.fromContext(now))
  const thenWake = <A, E>(self: Effect.Effect<A, E>) => Effect.zipLeft(self, runner.wake)
  // onIdle's watches: stopped by `stop`, so none outlives the pool.
  const watchers = new Set<Fiber.RuntimeFiber<unknown, unknown>>()
  // Nothing running here (no query), then nothing in the queue (a bounded count: a long backlog costs no more).
  const idle = Effect.flatMap(runner.running, (running) =>
    running > 0
      ? Effect.succeed(false)
      : Effect.map(
          Effect.flatMap(QueueStore, (queue) => queue.depth()),
          (depth) => depth.count === 0
        )
  )
  return {
    // One function for both forms: the runner tells them apart by the options, and passes the second argument.
    register: (
      taskType: string,
      handler: (job: Job, second: AbortSignal & HandlerTransaction) => unknown,
      handlerOptions?: HandlerOptions | TransactionalOptions
    ) => run(runner.register(taskType, handler as Handler<unknown>, handlerOptions as HandlerOptions)),
    defineJobs: (jobs) => run(runner.defineJobs(jobs)),
    enqueue: (input) =>
      run(Effect.flatMap(QueueStore, (queue) => Effect.flatMap(now, (at) => queue.enqueue(input, at)))),
    enqueueMany: (inputs) =>
      run(Effect.flatMap(QueueStore, (queue) => Effect.flatMap(now, (at) => queue.enqueueMany(inputs, at)))),
    enqueueFlow: (steps) =>
      run(Effect.flatMap(QueueStore, (queue) => Effect.flatMap(now, (at) => queue.enqueueFlow(steps, at)))),
    start: () => run(runner.start),
    stop: async () => {
      await run(Fiber.interruptAll([...watchers]))
      watchers.clear()
      await run(runner.stop)
      await runtime.dispose()
    },
    pause: () => run(admin.pause),
    resume: () => run(admin.resume),
    isPaused: () => run(admin.isPaused),
    pauseJob: (name) => run(thenWake(admin.pauseJob(name))),
    resumeJob: (name) => run(thenWake(admin.resumeJob(name))),
    runJob: (name) => run(thenWake(admin.runJob(name))),
    cancel: (itemId) => run(admin.cancel(itemId)),
    retry: (processedId) => run(admin.retry(processedId)),
    stats: () => run(runner.stats),
    setLimit: (input) => run(Effect.flatMap(Limits, (limits) => limits.set(input))),
    clearLimit: (taskType) => run(Effect.flatMap(Limits, (limits) => limits.clear(taskType))),
    limits: () => run(Effect.flatMap(Limits, (limits) => limits.list)),
    drain: (drainOptions) => {
      const waitIdle = idle.pipe(
        // A database hiccup is not an answer: ask again.
        Effect.orElseSucceed(() => false),
        Effect.repeat({ until: (done) => done, schedule: Schedule.spaced("100 millis") })
      )
      const timeout = drainOptions?.timeout
      return run(
        timeout === undefined
          ? Effect.asVoid(waitIdle)
          : waitIdle.pipe(
              Effect.asVoid,
              Effect.timeoutFail({
                duration: timeout,
                onTimeout: () =>
                  new DrainTimeoutError({ message: `the queue was not drained within ${Duration.format(timeout)}` })
              })
            )
      )
    },
    onIdle: (listener, idleOptions) => {
      let wasIdle = false
      const watch = idle.pipe(
        Effect.orElseSucceed(() => false),
        Effect.tap((now) => {
          // Once per busy-to-idle change; a listener that throws does not stop the watch.
          const call = now && !wasIdle
          wasIdle = now
          return call
            ? Effect.try(listener).pipe(
                Effect.catchAll((error) => Effect.logError("kairos: an onIdle listener threw", Cause.fail(error.error)))
              )
            : Effect.void
        }),
        Effect.repeat(Schedule.spaced(idleOptions?.checkEvery ?? "250 millis"))
      )
      const fiber = runtime.runFork(watch)
      watchers.add(fiber)
      return () => {
        watchers.delete(fiber)
        runtime.runFork(Fiber.interrupt(fiber))
      }
    }
  }
}
