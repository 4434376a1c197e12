/**
 * The operator's actions, written once over the ports: the pause switch (pause, resume, isPaused), a job's pause,
 * resume and run-now, cancelling a queue item and retrying an execution. The CLI, the dashboard and the Promise API
 * (`Kairos.create`) all perform them here, and all fail the same way when the thing named does not exist:
 * `NotFoundError`, which names it.
 *
 * A change is stamped with the caller's `now`, which is the database's time everywhere (the CLI and the dashboard
 * read it from the database, the Promise API from `PgClock`): an operator's change is judged by the clock every
 * runner judges time by.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { isId } from "../domain/Id.js"
import type { QueueItem } from "../domain/QueueItem.js"
import type { JobRun, ScheduledJob } from "../domain/ScheduledJob.js"
import { JobStore, type JobStoreError } from "../ports/JobStore.js"
import { QueueStore, type QueueStoreError } from "../ports/QueueStore.js"
import { Semaphore, type SemaphoreError } from "../ports/Semaphore.js"

/** What an action named and found nothing under: a job (by name), a queue item or an execution (by id). */
export type Missing = "job" | "item" | "execution"

/**
 * The job, queue item or execution an action names does not exist (an item may have finished or been cancelled, an
 * execution pruned). `what` says which kind, `key` the name or id given; `message` says both, e.g.
 * `no job named "nightly"`, `no queue item 12`, `no execution 7`.
 */
export class NotFoundError extends Data.TaggedError("NotFoundError")<{
  readonly what: Missing
  readonly key: string
  readonly message: string
}> {
  /** The error for `what` under `key`, with its message. */
  static of(what: Missing, key: string): NotFoundError {
    const message =
      what === "job"
        ? `no job named ${JSON.stringify(key)}`
        : what === "item"
          ? `no queue item ${key}`
          : `no execution ${key}`
    return new NotFoundError({ what, key, message })
  }
}

/**
 * The actions. Each fails with `NotFoundError` when what it names does not exist, else only with its store's error
 * or the clock's (`E`: reading the database's time failed).
 */
export interface Admin<E = never> {
  /** Turns the switch red: nothing new starts on any worker (running executions finish). */
  readonly pause: Effect.Effect<void, SemaphoreError>
  /** Turns the switch green: workers claim and run work again. */
  readonly resume: Effect.Effect<void, SemaphoreError>
  /** Whether the switch is red. */
  readonly isPaused: Effect.Effect<boolean, SemaphoreError>
  /** Pauses a job by name: its slots stop starting (running ones finish); re-defining it keeps it paused. */
  readonly pauseJob: (name: string) => Effect.Effect<ScheduledJob, NotFoundError | JobStoreError | E>
  /** Resumes a paused job; slots missed meanwhile follow its `missedSlots` policy. */
  readonly resumeJob: (name: string) => Effect.Effect<ScheduledJob, NotFoundError | JobStoreError | E>
  /** Fires a job now, as an extra slot beside its schedule. */
  readonly runJob: (name: string) => Effect.Effect<JobRun, NotFoundError | JobStoreError | E>
  /**
   * Cancels a queue item, pending or processing (a running execution's result is then refused); the status it had.
   * An id that is not one (see `domain/Id`) names no item.
   */
  readonly cancel: (itemId: string) => Effect.Effect<"pending" | "processing", NotFoundError | QueueStoreError | E>
  /** Enqueues again the item an execution ran: a new item with its task type and payload (priority 0, one run). */
  readonly retry: (executionId: string) => Effect.Effect<QueueItem, NotFoundError | QueueStoreError | E>
}

/** What the actions work over: the stores, the switch, and the clock their changes are stamped with (the database's). */
export interface AdminPorts<E> {
  readonly jobs: JobStore["Type"]
  readonly queue: QueueStore["Type"]
  readonly semaphore: Semaphore["Type"]
  /** The time a change is stamped with: the database's. */
  readonly now: Effect.Effect<Date, E>
}

/** The found value, or `NotFoundError` for `what` under `key`. */
const found =
  (what: Missing, key: string) =>
  <A, E>(self: Effect.Effect<Option.Option<A>, E>): Effect.Effect<A, E | NotFoundError> =>
    Effect.flatMap(
      self,
      Option.match({ onNone: () => Effect.fail(NotFoundError.of(what, key)), onSome: Effect.succeed })
    )

/** The actions over `ports`; the clock's failure (a database away) is a failure of the action. */
export const make = <E>(ports: AdminPorts<E>): Admin<E> => {
  const { jobs, now, queue, semaphore } = ports
  const setEnabled = (name: string, enabled: boolean) =>
    Effect.flatMap(now, (at) => jobs.setJobEnabled(name, enabled, at)).pipe(found("job", name))
  return {
    pause: semaphore.setRed,
    resume: semaphore.setGreen,
    isPaused: Effect.map(semaphore.isGreen, (green) => !green),
    pauseJob: (name) => setEnabled(name, false),
    resumeJob: (name) => setEnabled(name, true),
    runJob: (name) => Effect.flatMap(now, (at) => jobs.runJobNow(name, at)).pipe(found("job", name)),
    cancel: (itemId) =>
      isId(itemId) ? queue.cancel(itemId).pipe(found("item", itemId)) : Effect.fail(NotFoundError.of("item", itemId)),
    retry: (executionId) =>
      isId(executionId)
        ? Effect.flatMap(now, (at) => queue.retryExecution(executionId, at)).pipe(found("execution", executionId))
        : Effect.fail(NotFoundError.of("execution", executionId))
  }
}

/** The actions over the stores in context, stamped by Effect's Clock (in `PgKairos`, the database's clock). */
export const fromContext = <E>(
  now: Effect.Effect<Date, E>
): Effect.Effect<Admin<E>, never, JobStore | QueueStore | Semaphore> =>
  Effect.map(Effect.all([JobStore, QueueStore, Semaphore]), ([jobs, queue, semaphore]) =>
    make({ jobs, queue, semaphore, now })
  )
