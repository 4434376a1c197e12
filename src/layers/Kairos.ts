/**
 * kairos without Effect: a Promise API over the Postgres runner, for code that only writes async functions.
 */
import { Effect, ManagedRuntime } from "effect"
import * as PgKairos from "./PgKairos.js"
import type { QueueItem } from "../domain/QueueItem.js"
import type { ScheduledJob } from "../domain/ScheduledJob.js"
import { now } from "../ports/Clock.js"
import { type EnqueueInput, QueueStore } from "../ports/QueueStore.js"
import type { Job } from "../domain/Job.js"
import type { HandlerOptions } from "../runtime/Handler.js"
import { type RecurringJob, Runner, type RunnerStats } from "../runtime/Runner.js"

/** A running kairos instance with a Promise API. */
export interface Kairos {
  /** Registers the handler of a task type: an async (or plain) function; a throw is a recorded failure. */
  readonly register: (
    taskType: string,
    handler: (job: Job, signal: AbortSignal) => unknown,
    options?: HandlerOptions
  ) => Promise<void>
  /** Upserts recurring jobs by name. */
  readonly defineJobs: (jobs: ReadonlyArray<RecurringJob>) => Promise<ReadonlyArray<ScheduledJob>>
  /** Adds a queue item. */
  readonly enqueue: (input: EnqueueInput) => Promise<QueueItem>
  /** Adds many queue items in one statement; returns their ids, in order. */
  readonly enqueueMany: (inputs: ReadonlyArray<EnqueueInput>) => Promise<ReadonlyArray<string>>
  /** Starts claiming and running work. */
  readonly start: () => Promise<void>
  /** Stops gracefully (running handlers get the grace period) and closes the pool. */
  readonly stop: () => Promise<void>
  /** Executions started, succeeded and failed so far. */
  readonly stats: () => Promise<RunnerStats>
}

/** Connects (and migrates, unless `migrate: false`), ready to register handlers and start. */
export const create = async (options: PgKairos.Options): Promise<Kairos> => {
  const runtime = ManagedRuntime.make(PgKairos.layer(options))
  const runner = await runtime.runPromise(Runner)
  return {
    register: (taskType, handler, handlerOptions) =>
      runtime.runPromise(runner.register(taskType, handler, handlerOptions)),
    defineJobs: (jobs) => runtime.runPromise(runner.defineJobs(jobs)),
    enqueue: (input) =>
      runtime.runPromise(Effect.flatMap(QueueStore, (queue) => Effect.flatMap(now, (at) => queue.enqueue(input, at)))),
    enqueueMany: (inputs) =>
      runtime.runPromise(
        Effect.flatMap(QueueStore, (queue) => Effect.flatMap(now, (at) => queue.enqueueMany(inputs, at)))
      ),
    start: () => runtime.runPromise(runner.start),
    stop: async () => {
      await runtime.runPromise(runner.stop)
      await runtime.dispose()
    },
    stats: () => runtime.runPromise(runner.stats)
  }
}
