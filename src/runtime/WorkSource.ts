/**
 * Work sources and the execution pipeline they share.
 *
 * A work source (scheduled runs, queue items) knows how to claim executions, renew their leases, record how they
 * finished and release them at a forced stop. The pipeline (`makeLane`) does the rest the same way for every
 * source: it runs each claimed execution's handler in a fiber of the runner, keeps its lease in the runner's one
 * renewal round, and queues its result for the runner's one results writer, which records a batch per statement.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Option from "effect/Option"
import * as RetryPolicy from "effect/Schedule"
import type { Job, JobKind } from "../domain/Job.js"
import type * as Retry from "../domain/Retry.js"
import * as Result from "../domain/Result.js"
import type { Task, Worker } from "./Capacity.js"
import { type Handler, HandlerTimeoutError, invoke, isEffect, PendingPromise, timedOut } from "./Handler.js"

/** One claimed execution, as a source hands it over: a key unique among this runner's executions, and its job. */
export interface Claimed {
  readonly key: string
  readonly job: Job
}

/** What a tick asks a source for. */
export interface ClaimRequest {
  /** The most executions to claim. */
  readonly limit: number
  readonly now: Date
  readonly owner: string
  readonly leaseUntil: Date
  /** The task types this runner has handlers for: it claims nothing else. */
  readonly taskTypes: ReadonlyArray<string>
  /** The live poll interval. */
  readonly interval: Duration.Duration
  /** An explicit tick: look at everything, whatever the source remembers about when work is next due. */
  readonly force: boolean
}

/** What a claim took. */
export interface ClaimReport<C> {
  readonly claimed: ReadonlyArray<C>
  /** Slots recorded as skipped because the previous run was still going. */
  readonly overlapped: number
  /** Executions whose owner was lost (lease expired), taken back. */
  readonly rescued: number
}

/** How one execution finished. */
export interface Finished<C> {
  readonly claim: C
  readonly result: Result.Result
  readonly startedAt: Date
  readonly finishedAt: Date
}

/**
 * How one execution ended, for a listener (the CLI prints a line per execution): ok, failed (`error` says why), or
 * cut short from outside — `lost` (its lease was lost; the result is discarded) or `interrupted` (a forced stop; the
 * work is handed back). `durationMs` is undefined when it was cut short.
 */
export interface ExecutionReport {
  readonly job: Job
  readonly outcome: "ok" | "failed" | "lost" | "interrupted"
  readonly error: string | undefined
  readonly durationMs: number | undefined
}

/** A source of work: the internal interface between the runner and what it runs. */
export interface WorkSource<C extends Claimed, E> {
  readonly kind: JobKind
  /**
   * Claims with a limit of 0 too, while every worker is busy: it records what takes no worker (a slot that
   * overlaps its still-running previous run is recorded as skipped on time, not forgotten).
   */
  readonly plansWhenFull?: boolean | undefined
  /** Claims up to `request.limit` executions (leased to `request.owner`). */
  readonly claim: (request: ClaimRequest) => Effect.Effect<ClaimReport<C>, E>
  /** When the source next has work due, if it knows: the idle runner sleeps until then (or the poll). */
  readonly nextWakeAt: (now: Date, taskTypes: ReadonlyArray<string>) => Effect.Effect<Option.Option<Date>, E>
  /** Extends the leases of these executions; returns the keys whose lease still held. */
  readonly renew: (claims: ReadonlyArray<C>, leaseUntil: Date, now: Date) => Effect.Effect<ReadonlySet<string>, E>
  /** Records finished executions, fenced by their leases; returns, in order, whether each was recorded. */
  readonly complete: (finished: ReadonlyArray<Finished<C>>) => Effect.Effect<ReadonlyArray<boolean>, E>
  /**
   * `complete`, and in the same round trip a claim of up to `next.limit`: what those results made claimable (the
   * next item of a sequential type they freed), or, with small batches, whatever a tick would claim (see the queue
   * source). Sources without it are completed, and claimed from at the tick.
   */
  readonly completeAndClaim?:
    | ((
        finished: ReadonlyArray<Finished<C>>,
        next: ClaimRequest
      ) => Effect.Effect<
        {
          readonly written: ReadonlyArray<boolean>
          readonly claimed: ReadonlyArray<C>
          /** The claim looked for the next item of every type the batch freed (false: it was only completed). */
          readonly chained: boolean
        },
        E
      >)
    | undefined
  /**
   * Whether this execution, once it succeeded, frees nothing but what `completeAndClaim` claims again along with its
   * result (the next item of a sequential type): the runner then needs no tick for it.
   */
  readonly chains?: ((claim: C) => boolean) | undefined
  /** Hands back executions interrupted by a forced stop, so another instance takes them at once. */
  readonly release: (interrupted: ReadonlyArray<C>, now: Date) => Effect.Effect<void, E>
  /**
   * Hands back these executions, claimed and never started (a stop), while others of this runner still run: another
   * instance takes them at once. Absent: `release` does.
   */
  readonly releaseUnstarted?: ((unstarted: ReadonlyArray<C>, now: Date) => Effect.Effect<void, E>) | undefined
}

/** A registered handler and its timeout. */
export interface Registered {
  readonly run: Handler<unknown, unknown, never>
  readonly timeout: Duration.Duration
  /** `timeout` in milliseconds (read per execution). */
  readonly timeoutMs: number
  /** The handler declares a second parameter: it gets a live `AbortSignal`. */
  readonly takesSignal: boolean
  /** The task type's retry policy for queue items; absent: attempted once. */
  readonly retry: Retry.Policy | undefined
}

/**
 * What a lane needs from the runner core. Called once per execution, on the hot path: plain functions, no Effect,
 * except where a fiber must wait.
 */
export interface LaneContext {
  readonly handler: (taskType: string) => Registered | undefined
  /** Hands claimed executions to the workers, in claim order. */
  readonly submit: (tasks: ReadonlyArray<Task>) => Effect.Effect<void>
  /** A handler started on a worker. */
  readonly started: () => void
  /** A started handler returned after `tookMs` (undefined: it was interrupted). */
  readonly stopped: (tookMs: number | undefined) => void
  /**
   * An execution ended with `result` (or never ran to a result: undefined); its claim no longer counts. `chained`:
   * it succeeded and its result will be written with a claim of what it frees (see `WorkSource.chains`).
   */
  readonly ended: (result: Result.Result | undefined, chained: boolean) => void
  /** A result is waiting for the writer. */
  readonly resultsReady: () => void
  /** Leases are now held (the renewal round should run). */
  readonly leasesHeld: () => void
  /**
   * A batch of results was written: work they blocked (a sequential type, an item's next run) may be claimable.
   * `chained`: every result in it was chainable and the write claimed again what they freed.
   */
  readonly written: (chained: boolean) => void
  /**
   * What the results writer may claim along with a batch (see `WorkSource.completeAndClaim`): undefined while the
   * runner is paused, disabled, stopping or full (the tick claims then, as usual).
   */
  readonly chain: Effect.Effect<ClaimRequest | undefined>
  /** A handler's promise must settle by `atMs` (its timeout): the runner's one timeout watch is told. */
  readonly deadline: (atMs: number) => void
  /** Told how every execution ended, when someone listens (undefined: no report is even built). */
  readonly executed?: ((report: ExecutionReport) => void) | undefined
}

/** A source wired into the pipeline, its claim type hidden: what the runner core drives. */
export interface Lane<E> {
  readonly kind: JobKind
  /** See `WorkSource.plansWhenFull`. */
  readonly plansWhenFull: boolean
  /** Claims up to the request's limit and starts every claimed execution. */
  readonly claimAndStart: (
    request: ClaimRequest
  ) => Effect.Effect<{ readonly started: number; readonly overlapped: number; readonly rescued: number }, E>
  readonly nextWakeAt: (now: Date, taskTypes: ReadonlyArray<string>) => Effect.Effect<Option.Option<Date>, E>
  /** Executions holding a lease (running, or finished and waiting for their result to be written). */
  readonly leased: () => number
  /** One renewal round for every held lease; lost ones are aborted. Never fails. */
  readonly renew: (leaseUntil: Date, now: Date) => Effect.Effect<void>
  /** Results waiting for the writer. */
  readonly pending: () => number
  /** Writes up to one batch of waiting results. Never fails: a batch that cannot be written is logged and dropped. */
  readonly flush: Effect.Effect<void>
  /** Hands back what a forced stop interrupted. Never fails. */
  readonly releaseInterrupted: (now: Date) => Effect.Effect<void>
  /** Hands back, at once, what a stop cancelled before it started. Never fails. */
  readonly releaseCancelled: (now: Date) => Effect.Effect<void>
  /** The earliest deadline of a handler's pending promise (Infinity: none). */
  readonly earliestDeadline: () => number
  /** The task types of the handlers running now (for a last word when the process exits under them). */
  readonly runningTaskTypes: () => ReadonlyArray<string>
  /**
   * Settles every pending promise whose deadline has passed as timed out, and aborts every execution whose lease
   * was not confirmed in time.
   */
  readonly expire: (nowMs: number) => Effect.Effect<void>
}

/** Most results written in one statement. */
const RESULT_BATCH = 500

/**
 * Writing a batch again after a failure: a deadlock with another instance's batch rolls it back whole, and a
 * database that went away may come back. The leases are renewed meanwhile; past this, the batch is dropped and its
 * executions are taken back when their leases expire (they run again: nothing is lost).
 */
export const resultWriteRetry = RetryPolicy.exponential("50 millis").pipe(
  RetryPolicy.union(RetryPolicy.spaced("5 seconds")),
  RetryPolicy.intersect(RetryPolicy.recurs(12))
)

interface Entry<C> {
  readonly claim: C
  /** The fiber of a running Effect handler (a synchronous one cannot be interrupted). */
  fiber: Fiber.RuntimeFiber<unknown, never> | undefined
  /** Settles a running handler's pending promise early: timed out, lease lost, or a forced stop. */
  settle: ((why: "timeout" | "lost" | "stopped") => void) | undefined
  /** When a pending promise times out (ms). */
  deadline: number
  /**
   * When this execution stops trusting its lease (ms): a little before the lease's last confirmed expiry. A renewal
   * that fails or hangs does not extend it; past it the handler is aborted, since another instance may take the
   * work over at any moment.
   */
  leaseDeadline: number
  /** Not finished yet (waiting for a worker, or running). */
  running: boolean
  lost: boolean
  interrupted: boolean
}

/**
 * How long before a lease's expiry its execution gives up when no renewal confirmed it: a tenth of the lease, so a
 * process that cannot reach the database stops before another instance may take its work over.
 */
const leaseMargin = (leaseMs: number) => Math.max(1, Math.floor(leaseMs / 10))

/** What a line about several executions names: their task types and up to ten job ids, so one line stays short. */
const batchAnnotations = (kind: string, jobs: ReadonlyArray<Job>) => {
  const taskTypes = [...new Set(jobs.map((job) => job.taskType))]
  const ids = jobs.slice(0, 10).map((job) => String(job.id))
  return {
    kind,
    taskType: taskTypes.join(","),
    jobId: jobs.length > ids.length ? `${ids.join(",")},… (${jobs.length - ids.length} more)` : ids.join(",")
  }
}

const unknownTaskType = (taskType: string) =>
  Result.failure(`unknown task type "${taskType}": no handler is registered`)

/** Runs a log line off the worker, in a fiber of the runner; nothing is forked for nothing to do. */
const runAside = (worker: Worker, effect: Effect.Effect<void>) => {
  if (effect !== Effect.void) worker.fork(effect)
}

/** Wires a source into the pipeline. */
export const makeLane = <C extends Claimed, E extends { readonly message: string }>(
  source: WorkSource<C, E>,
  context: LaneContext
): Lane<E> => {
  const active = new Map<string, Entry<C>>()
  const chainable = (claim: C, result: Result.Result) =>
    source.chains !== undefined && !Result.isFailure(result) && source.chains(claim)
  const waiting: Array<Finished<C>> = []
  // Executions a stop cancelled before they started, to hand back at once.
  const cancelled: Array<Entry<C>> = []
  const annotations = (job: Job) => ({ kind: source.kind, taskType: job.taskType, jobId: job.id, attempt: job.attempt })

  const finish = (entry: Entry<C>, result: Result.Result, startedAt: number, finishedAt: number) => {
    entry.running = false
    entry.fiber = undefined
    context.stopped(finishedAt - startedAt)
    waiting.push({ claim: entry.claim, result, startedAt: new Date(startedAt), finishedAt: new Date(finishedAt) })
    // The result is written by the runner's writer; the worker is free as soon as the handler returns.
    context.resultsReady()
    context.ended(result, chainable(entry.claim, result))
    if (context.executed !== undefined) {
      const failed = Result.isFailure(result)
      context.executed({
        job: entry.claim.job,
        outcome: failed ? "failed" : "ok",
        error: failed ? result.message : undefined,
        durationMs: finishedAt - startedAt
      })
    }
  }

  // A running handler cut short from outside: a lost lease (the result is discarded; whoever found the lease lost,
  // a renewal round or the lease watch, logged it once for all) or a forced stop (the claim is handed back).
  const abandon = (entry: Entry<C>): void => {
    entry.running = false
    entry.fiber = undefined
    context.stopped(undefined)
    context.ended(undefined, false)
    if (context.executed !== undefined) {
      context.executed({
        job: entry.claim.job,
        outcome: entry.lost ? "lost" : "interrupted",
        error: undefined,
        durationMs: undefined
      })
    }
    if (!entry.lost) entry.interrupted = true
  }

  // A handler's promise, awaited on the worker (no fiber, no timer: plain callbacks). Whichever comes first settles
  // it: the promise, its timeout (the runner's timeout watch), a lost lease (the renewal round) or a forced stop. A
  // promise cannot be cancelled: one settled early runs on unobserved, its signal aborted.
  const awaitPromise = (
    entry: Entry<C>,
    pending: PendingPromise,
    handler: Registered,
    startedAt: number,
    worker: Worker
  ): false => {
    const job = entry.claim.job
    const settle = (result: Result.Result | "lost" | "stopped", byPromise: boolean) => {
      if (entry.settle === undefined) return
      entry.settle = undefined
      try {
        if (result === "lost" || result === "stopped") {
          pending.controller?.abort(new Error("the execution was interrupted"))
          abandon(entry)
        } else {
          if (Result.isFailure(result) && result.error instanceof HandlerTimeoutError) {
            pending.controller?.abort(result.error)
          }
          finish(entry, result, startedAt, worker.now())
        }
      } catch (defect) {
        // A bug of the runner's own: logged, and the worker goes on all the same (else it would wait forever).
        runAside(worker, Effect.logError("settling an execution failed unexpectedly (going on)", defect))
      }
      // Settled from outside (a renewal round, the timeout watch, a stop going through every execution): the worker
      // goes on once that is done, so the next execution starts with what it learnt (its own lease lost too).
      if (byPromise) worker.done()
      else queueMicrotask(worker.done)
    }
    entry.settle = (why) => settle(why === "timeout" ? timedOut(job.taskType, handler.timeout) : why, false)
    entry.deadline = startedAt + handler.timeoutMs
    context.deadline(entry.deadline)
    // A forced stop: the execution is handed back.
    worker.onStop(() => settle("stopped", false))
    Promise.resolve(pending.promise).then(
      (value) => settle(Result.fromReturned(value), true),
      (error: unknown) => settle(Result.failure(error), true)
    )
    return false
  }

  // Runs an execution on a worker; true when it ended before returning (see `Task.run`).
  const execute = (entry: Entry<C>, worker: Worker): boolean => {
    const job = entry.claim.job
    if (entry.lost) {
      entry.running = false
      context.ended(undefined, false)
      return true
    }
    const handler = context.handler(job.taskType)
    context.started()
    const startedAt = worker.now()
    const out =
      handler === undefined
        ? unknownTaskType(job.taskType)
        : invoke(handler.run, job, handler.timeout, handler.takesSignal)
    if (out instanceof PendingPromise) return awaitPromise(entry, out, handler!, startedAt, worker)
    if (!isEffect(out)) {
      finish(entry, out, startedAt, worker.now())
      return true
    }
    // An Effect handler runs in a fiber of its own, so a lost lease interrupts this execution only.
    const run = out.pipe(
      Effect.annotateLogs(annotations(job)),
      // The handler's failure is already a Result here: say it on the span, which would otherwise end "ok".
      Effect.tap((result) =>
        Result.isFailure(result)
          ? Effect.annotateCurrentSpan({ "kairos.outcome": "failed", "kairos.error": result.message })
          : Effect.annotateCurrentSpan("kairos.outcome", "ok")
      ),
      // A span per execution of an Effect handler: exported by whatever Tracer the application installs.
      Effect.withSpan("kairos.execute", {
        attributes: {
          "kairos.kind": source.kind,
          "kairos.task_type": job.taskType,
          "kairos.id": job.id,
          "kairos.name": job.name,
          "kairos.attempt": job.attempt
        }
      }),
      Effect.onExit((exit) =>
        Exit.isSuccess(exit)
          ? Effect.sync(() => finish(entry, exit.value, startedAt, worker.now()))
          : Effect.sync(() => abandon(entry))
      )
    )
    const fiber = worker.fork(run)
    if (entry.running) entry.fiber = fiber
    fiber.addObserver(() => worker.done())
    return false
  }

  const claimAndStart = (request: ClaimRequest) =>
    Effect.gen(function* () {
      if (request.limit <= 0 && source.plansWhenFull !== true) return { started: 0, overlapped: 0, rescued: 0 }
      const report = yield* source.claim(request)
      yield* startClaimed(report.claimed, request)
      return { started: report.claimed.length, overlapped: report.overlapped, rescued: report.rescued }
    })

  // A claimed execution is its own Task: the workers call its methods, so it costs one object, not three.
  class LaneEntry implements Entry<C>, Task {
    fiber: Fiber.RuntimeFiber<unknown, never> | undefined = undefined
    settle: ((why: "timeout" | "lost" | "stopped") => void) | undefined = undefined
    deadline = Number.POSITIVE_INFINITY
    running = true
    lost = false
    interrupted = false
    constructor(
      readonly claim: C,
      public leaseDeadline: number
    ) {}
    run(worker: Worker): boolean {
      return execute(this, worker)
    }
    // A stop before it ran: handed back at once (or, failing that, with the interrupted ones).
    cancel(): void {
      this.running = false
      this.interrupted = true
      cancelled.push(this)
      context.ended(undefined, false)
    }
  }

  // Claimed executions, leased until `request.leaseUntil`, handed to the workers in claim order.
  const startClaimed = (claimed: ReadonlyArray<C>, request: ClaimRequest) =>
    Effect.suspend(() => {
      if (claimed.length === 0) return Effect.void
      if (active.size === 0) context.leasesHeld()
      const leaseUntilMs = request.leaseUntil.getTime()
      const leaseDeadline = leaseUntilMs - leaseMargin(leaseUntilMs - request.now.getTime())
      const tasks: Array<LaneEntry> = []
      for (const claim of claimed) {
        const entry = new LaneEntry(claim, leaseDeadline)
        active.set(claim.key, entry)
        tasks.push(entry)
      }
      context.deadline(leaseDeadline)
      // After a stop began, nothing submitted starts (see `Capacity.close`): handed back at once.
      return Effect.zipRight(
        context.submit(tasks),
        Effect.suspend(() => (cancelled.length > 0 ? releaseCancelled(request.now) : Effect.void))
      )
    })

  // An execution whose lease is gone (or no longer trusted): aborted if it runs, never started if it waits.
  const loseLease = (entry: Entry<C>): Effect.Effect<void> =>
    Effect.suspend(() => {
      entry.lost = true
      active.delete(entry.claim.key)
      entry.settle?.("lost")
      return entry.fiber === undefined ? Effect.void : Fiber.interruptFork(entry.fiber)
    })

  const renew = (leaseUntil: Date, now: Date) =>
    Effect.gen(function* () {
      const entries = [...active.values()]
      if (entries.length === 0) return
      // A renewal that hangs (a frozen network) is given up after half a renewal period, so the next round still
      // comes before the lease is no longer trusted.
      const held = yield* source
        .renew(
          entries.map((e) => e.claim),
          leaseUntil,
          now
        )
        .pipe(
          Effect.timeoutFail({
            duration: Duration.millis(Math.max(1, Math.floor((leaseUntil.getTime() - now.getTime()) / 6))),
            onTimeout: () => new Error("no answer within half a renewal period")
          })
        )
      const leaseUntilMs = leaseUntil.getTime()
      const leaseDeadline = leaseUntilMs - leaseMargin(leaseUntilMs - now.getTime())
      // One line for the round, not one per execution: a runner that was cut off may lose hundreds at once.
      const lost: Array<Job> = []
      let aborted = 0
      for (const entry of entries) {
        if (active.get(entry.claim.key) !== entry) continue
        if (held.has(entry.claim.key)) {
          entry.leaseDeadline = leaseDeadline
          continue
        }
        // A finished execution is not reported: its result may have been written (the lease released with it)
        // between this round's read and its answer, and the writer says so itself when a result is refused.
        if (entry.running) {
          if (entry.fiber !== undefined || entry.settle !== undefined) aborted++
          lost.push(entry.claim.job)
        }
        yield* loseLease(entry)
      }
      if (lost.length > 0) {
        const unstarted = lost.length - aborted
        const parts = [
          aborted > 0 ? `${aborted} running (aborted, results discarded)` : undefined,
          unstarted > 0 ? `${unstarted} not started yet (not run)` : undefined
        ].filter((p) => p !== undefined)
        yield* Effect.logWarning(
          `${lost.length} lease(s) lost (another instance took the work back): ${parts.join(", ")}`
        ).pipe(Effect.annotateLogs(batchAnnotations(source.kind, lost)))
      }
    }).pipe(
      // A renewal that fails is not a lost lease: the next round tries again.
      Effect.catchAllCause((cause) => Effect.logWarning("lease renewal failed; retrying next round", cause)),
      Effect.annotateLogs({ kind: source.kind })
    )

  const flush = Effect.gen(function* () {
    const batch = waiting.splice(0, RESULT_BATCH)
    if (batch.length === 0) return
    // Only a first try claims along: a write tried again only records, so whatever failed, a claim cannot keep
    // results from being recorded (the tick that follows the write claims instead).
    const completeAndClaim = source.completeAndClaim
    let tries = 0
    const write = Effect.gen(function* () {
      tries++
      const next = completeAndClaim === undefined || tries > 1 ? undefined : yield* context.chain
      if (completeAndClaim === undefined || next === undefined)
        return { written: yield* source.complete(batch), claimed: [], chained: false, next: undefined }
      return { ...(yield* completeAndClaim(batch, next)), next }
    })
    // Any cause is retried, defects included: a store that dies on a dead connection may work on the next try. The
    // retry's schedule is set up only once a try failed (most writes never do): that failure is the schedule's first
    // input, so the waits between tries are those of retrying from the start.
    const attempt = Effect.sandbox(write)
    const { chained, claimed, next, written } = yield* attempt.pipe(
      Effect.catchAll((firstFailure) => {
        let replay = true
        const again = Effect.suspend(() => {
          if (!replay) return attempt
          replay = false
          return Effect.fail(firstFailure)
        })
        return Effect.retry(again, resultWriteRetry)
      }),
      Effect.unsandbox,
      Effect.catchAllCause((cause) =>
        Effect.as(
          Effect.logError(
            "recording results failed; their executions run again once their leases expire (nothing is lost)",
            cause
          ).pipe(Effect.annotateLogs({ kind: source.kind })),
          { written: batch.map(() => undefined), claimed: [] as ReadonlyArray<C>, chained: false, next: undefined }
        )
      )
    )
    const refused: Array<Finished<C>> = []
    for (let i = 0; i < batch.length; i++) {
      const finished = batch[i]!
      // Written or not, the lease is no longer renewed: a dropped result's lease expires and the work is taken back.
      active.delete(finished.claim.key)
      if (written[i] === false) refused.push(finished)
    }
    // One line per batch, not per item: after an outage a whole batch is refused at once, and a line each would bury
    // the outage's own lines. A try that failed may have committed before its answer was lost: a later try then finds
    // the lease gone because the result was written, not because the lease was lost. Which one cannot be told here.
    if (refused.length > 0) {
      const n = refused.length
      const [what, whose] =
        n === 1 ? ["1 result", "its execution's lease was"] : [`${n} results`, "their executions' leases were"]
      yield* Effect.logWarning(
        tries > 1
          ? `${what} not confirmed: an earlier try of this write may have recorded ${n === 1 ? "it" : "them"} ` +
              `(its answer was lost), or ${whose} lost`
          : `${what} refused: ${whose} lost`
      ).pipe(
        Effect.annotateLogs(
          batchAnnotations(
            source.kind,
            refused.map((f) => f.claim.job)
          )
        )
      )
    }
    if (next !== undefined) yield* startClaimed(claimed, next)
    context.written(chained && batch.every((f) => chainable(f.claim, f.result)))
  })

  const releaseInterrupted = (now: Date) =>
    Effect.gen(function* () {
      const interrupted = [...active.values()].filter((e) => e.interrupted)
      for (const entry of interrupted) active.delete(entry.claim.key)
      yield* source.release(
        interrupted.map((e) => e.claim),
        now
      )
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logError("could not release leases at stop", cause)),
      Effect.annotateLogs({ kind: source.kind })
    )

  const releaseCancelled = (now: Date) =>
    Effect.suspend(() => {
      // Only those still held: a lease lost meanwhile is someone else's now.
      const unstarted = cancelled.splice(0).filter((e) => active.get(e.claim.key) === e)
      if (unstarted.length === 0) return Effect.void
      for (const entry of unstarted) active.delete(entry.claim.key)
      const claims = unstarted.map((e) => e.claim)
      return (source.releaseUnstarted ?? source.release)(claims, now)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Effect.logError("could not hand back executions claimed ahead at stop (their leases expire instead)", cause)
      ),
      Effect.annotateLogs({ kind: source.kind })
    )

  const earliestDeadline = () => {
    let earliest = Number.POSITIVE_INFINITY
    for (const entry of active.values()) {
      if (entry.settle !== undefined && entry.deadline < earliest) earliest = entry.deadline
      if (entry.running && entry.leaseDeadline < earliest) earliest = entry.leaseDeadline
    }
    return earliest
  }

  const expire = (nowMs: number) =>
    Effect.gen(function* () {
      const unconfirmed: Array<Job> = []
      for (const entry of [...active.values()]) {
        if (entry.running && entry.leaseDeadline <= nowMs) {
          unconfirmed.push(entry.claim.job)
          yield* loseLease(entry)
        } else if (entry.settle !== undefined && entry.deadline <= nowMs) entry.settle("timeout")
      }
      if (unconfirmed.length > 0) {
        yield* Effect.logWarning(
          `${unconfirmed.length} lease(s) not renewed in time (the database cannot be reached?): their executions ` +
            "were aborted, for another instance may take them over"
        ).pipe(Effect.annotateLogs(batchAnnotations(source.kind, unconfirmed)))
      }
    })

  return {
    kind: source.kind,
    plansWhenFull: source.plansWhenFull === true,
    claimAndStart,
    earliestDeadline,
    runningTaskTypes: () => {
      const types = new Set<string>()
      for (const entry of active.values()) if (entry.running) types.add(entry.claim.job.taskType)
      return [...types]
    },
    expire,
    nextWakeAt: source.nextWakeAt,
    leased: () => active.size,
    renew,
    pending: () => waiting.length,
    flush,
    releaseInterrupted,
    releaseCancelled
  }
}

/** The lease renewal cadence: a third of the lease, so two rounds can fail before it expires. */
export const renewEvery = (leaseDuration: Duration.Duration): Duration.Duration =>
  Duration.millis(Math.max(1, Math.floor(Duration.toMillis(leaseDuration) / 3)))
