/**
 * The execution pipeline, the same for every work source: it runs each claimed execution's handler on a worker of
 * the runner (see Capacity), keeps its lease for the runner's one renewal round, ends it at its timeout for the
 * runner's one timeout watch, and queues its result for the runner's one results writer, which records a batch per
 * statement. A source wired into it is a `Lane`.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Option from "effect/Option"
import * as RetryPolicy from "effect/Schedule"
import type { Job, JobKind } from "../domain/Job.js"
import type * as Retry from "../domain/Retry.js"
import * as Result from "../domain/Result.js"
import type { LeaseTimes } from "../domain/SchedulerConfig.js"
import type { Task, Worker } from "./Capacity.js"
import {
  type Handler,
  HandlerTimeoutError,
  invoke,
  invokeInTransaction,
  PendingEffect,
  PendingPromise,
  timedOut
} from "./Handler.js"
import type { Claimed, ClaimRequest, Finished, Holdings, WorkSource } from "./WorkSource.js"
import type { Transacted, Transaction } from "../ports/Transaction.js"

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

/** How a source's store fails: `reason` "Unavailable" is for want of the database (as the stores' errors say). */
interface StoreFailure {
  readonly message: string
  readonly reason: string
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
  /** Each execution runs inside a transaction of the store's, its success recorded in it (see `transact`). */
  readonly transactional: boolean
}

/**
 * What a lane needs from the runner core. Called once per execution, on the hot path: plain functions, no Effect,
 * except where a fiber must wait.
 */
export interface LaneContext {
  /** The lease times of the runner's configuration. */
  readonly lease: LeaseTimes
  readonly handler: (taskType: string) => Registered | undefined
  /** Hands claimed executions to the workers, in claim order. */
  readonly submit: (tasks: ReadonlyArray<Task>) => Effect.Effect<void>
  /** A handler started on a worker. */
  readonly started: () => void
  /** A started handler returned after `tookMs` (undefined: it was interrupted). */
  readonly stopped: (tookMs: number | undefined) => void
  /**
   * A started execution ended with `result` (or never ran to a result: undefined, interrupted); its claim no longer
   * counts. `chained`: it succeeded and its result will be written with a claim of what it frees (see
   * `WorkSource.chains`).
   */
  readonly ended: (result: Result.Result | undefined, chained: boolean) => void
  /**
   * A claim that never started (handed back by a stop, or its lease lost while it waited) no longer counts. No
   * execution ended: it is neither a success nor a failure.
   */
  readonly dropped: () => void
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
  /** An execution must end by `atMs` (its timeout, or its lease's trust): the runner's one timeout watch is told. */
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
  /**
   * One renewal round for every held lease; lost ones are aborted. Never fails: false when the round could not be
   * made (logged; the leases stand as they were).
   */
  readonly renew: (leaseUntil: Date, now: Date) => Effect.Effect<boolean>
  /** Results waiting for the writer. */
  readonly pending: () => number
  /** Writes up to one batch of waiting results. Never fails: a batch that cannot be written is logged and dropped. */
  readonly flush: Effect.Effect<void>
  /** Hands back what a forced stop interrupted. Never fails. */
  readonly releaseInterrupted: (now: Date) => Effect.Effect<void>
  /** Hands back, at once, what a stop cancelled before it started. Never fails. */
  readonly releaseCancelled: (now: Date) => Effect.Effect<void>
  /** The earliest deadline of a running handler or of a lease's trust (Infinity: none). */
  readonly earliestDeadline: () => number
  /** The task types of the handlers running now (for a last word when the process exits under them). */
  readonly runningTaskTypes: () => ReadonlyArray<string>
  /**
   * Ends every handler whose timeout has passed as timed out (a pending promise settled, an Effect's fiber
   * interrupted), and aborts every execution whose lease was not confirmed in time.
   */
  readonly expire: (nowMs: number) => Effect.Effect<void>
}

/** Most results written in one statement. */
const RESULT_BATCH = 500

/**
 * Writing a batch again after a failure: a deadlock with another instance's batch rolls it back whole, and a
 * database that went away may come back. The leases are renewed meanwhile; past this (about 30 s), the batch is
 * dropped and its executions are taken back when their leases expire (they run again: nothing is lost). Tried every
 * second at most, as the wake-up listener reconnects: results are recorded within a second of the database's return
 * (a failover), not a doubled wait later while their jobs skip slots; a try against an absent database costs a
 * refused connection, and tries are not logged.
 */
export const resultWriteRetry = RetryPolicy.exponential("50 millis").pipe(
  RetryPolicy.union(RetryPolicy.spaced("1 second")),
  RetryPolicy.intersect(RetryPolicy.recurs(36))
)

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

type Why = "timeout" | "lost" | "stopped"

/**
 * One claimed execution, from its claim until its result is written (or it is handed back). It is its own `Task`:
 * the workers call its methods, so it costs one object, not three.
 */
class Execution<C extends Claimed> implements Task {
  /** The fiber of a running Effect handler (a synchronous one cannot be interrupted). */
  fiber: Fiber.RuntimeFiber<unknown, never> | undefined = undefined
  /** Settles a running handler's pending promise early: timed out, lease lost, or a forced stop. */
  settle: ((why: Why) => void) | undefined = undefined
  /** The running Effect handler's signal, aborted at its timeout. */
  controller: AbortController | undefined = undefined
  /** The running Effect handler (its timeout is recorded when the watch ends it). */
  handler: Registered | undefined = undefined
  /** When the running handler times out (ms). */
  deadline = Number.POSITIVE_INFINITY
  /** The Effect handler's fiber was interrupted by its timeout: recorded as timed out, not abandoned. */
  timedOut = false
  /** Not finished yet (waiting for a worker, or running). */
  running = true
  lost = false
  interrupted = false
  /**
   * A transactional execution whose handler succeeded, being recorded and committed: its transaction holds its
   * lease's row from its record until its COMMIT, so no one can take it over meanwhile, and a renewal would only
   * wait for the commit. The lease keeper and the lease watch leave it alone.
   */
  committing = false
  constructor(
    readonly lane: SourceLane<C, StoreFailure>,
    readonly claim: C,
    /**
     * When this execution stops trusting its lease (ms): a little before the lease's last confirmed expiry. A
     * renewal that fails or hangs does not extend it; past it the handler is aborted, since another instance may
     * take the work over at any moment.
     */
    public leaseDeadline: number
  ) {}
  run(worker: Worker): boolean {
    return this.lane.execute(this, worker)
  }
  // A stop before it ran: handed back at once (or, failing that, with the interrupted ones).
  cancel(): void {
    this.running = false
    this.interrupted = true
    this.lane.cancelled.push(this)
    this.lane.context.dropped()
  }
}

/** A source wired into the pipeline. */
class SourceLane<C extends Claimed, E extends StoreFailure> implements Lane<E> {
  readonly active = new Map<string, Execution<C>>()
  readonly waiting: Array<Finished<C>> = []
  /** Executions a stop cancelled before they started, to hand back at once. */
  readonly cancelled: Array<Execution<C>> = []
  /** Claims in flight, and claims begun so far: see `holdings`. */
  claiming = 0
  claimsBegun = 0
  readonly kind: JobKind
  readonly plansWhenFull: boolean
  readonly nextWakeAt: Lane<E>["nextWakeAt"]

  constructor(
    readonly source: WorkSource<C, E>,
    readonly context: LaneContext
  ) {
    this.kind = source.kind
    this.plansWhenFull = source.plansWhenFull === true
    this.nextWakeAt = source.nextWakeAt
  }

  chainable(claim: C, result: Result.Result): boolean {
    return this.source.chains !== undefined && !Result.isFailure(result) && this.source.chains(claim)
  }

  leased(): number {
    return this.active.size
  }

  pending(): number {
    return this.waiting.length
  }

  /** Finished with a result: queued for the writer, and the worker is free as soon as the handler returns. */
  finish(entry: Execution<C>, result: Result.Result, startedAt: number, finishedAt: number): void {
    const context = this.context
    entry.running = false
    entry.fiber = undefined
    context.stopped(finishedAt - startedAt)
    this.waiting.push({ claim: entry.claim, result, startedAt: new Date(startedAt), finishedAt: new Date(finishedAt) })
    context.resultsReady()
    context.ended(result, this.chainable(entry.claim, result))
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
  abandon(entry: Execution<C>): void {
    const context = this.context
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
  awaitPromise(
    entry: Execution<C>,
    pending: PendingPromise,
    handler: Registered,
    startedAt: number,
    worker: Worker
  ): false {
    const settle = (result: Result.Result | "lost" | "stopped", byPromise: boolean) => {
      if (entry.settle === undefined) return
      entry.settle = undefined
      try {
        if (result === "lost" || result === "stopped") {
          pending.controller?.abort(new Error("the execution was interrupted"))
          this.abandon(entry)
        } else {
          if (Result.isFailure(result) && result.error instanceof HandlerTimeoutError) {
            pending.controller?.abort(result.error)
          }
          this.finish(entry, result, startedAt, worker.now())
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
    entry.settle = (why) => settle(why === "timeout" ? timedOut(entry.claim.job.taskType, handler.timeout) : why, false)
    entry.deadline = startedAt + handler.timeoutMs
    this.context.deadline(entry.deadline)
    // A forced stop: the execution is handed back.
    worker.onStop(() => settle("stopped", false))
    Promise.resolve(pending.promise).then(
      (value) => settle(Result.fromReturned(value), true),
      (error: unknown) => settle(Result.failure(error), true)
    )
    return false
  }

  // An Effect handler runs in a fiber of its own, so a lost lease or its timeout interrupts this execution only.
  runEffect(
    entry: Execution<C>,
    pending: PendingEffect,
    handler: Registered,
    startedAt: number,
    worker: Worker
  ): false {
    const job = entry.claim.job
    const run = traced(this.kind, job, pending.effect).pipe(
      Effect.onExit((exit) =>
        Effect.sync(() =>
          Exit.isSuccess(exit)
            ? this.finish(entry, exit.value, startedAt, worker.now())
            : entry.timedOut
              ? this.finish(entry, timedOut(job.taskType, handler.timeout), startedAt, worker.now())
              : this.abandon(entry)
        )
      )
    )
    return this.fork(entry, handler, pending.controller, run, startedAt, worker)
  }

  // Runs an execution's fiber on its worker: its timeout is armed while it runs, and the worker goes on when it ends.
  private fork(
    entry: Execution<C>,
    handler: Registered,
    controller: AbortController | undefined,
    run: Effect.Effect<void>,
    startedAt: number,
    worker: Worker
  ): false {
    entry.controller = controller
    entry.handler = handler
    const fiber = worker.fork(run)
    if (entry.running) {
      entry.fiber = fiber
      entry.deadline = startedAt + handler.timeoutMs
      this.context.deadline(entry.deadline)
    }
    fiber.addObserver(() => worker.done())
    return false
  }

  // A transactional handler runs in a fiber of its own, inside its store's transaction (`WorkSource.transact`), whatever
  // kind of handler it is. The fiber is interrupted as an Effect handler's is (its timeout, a lost lease, a forced
  // stop): that reaches the handler only, and the store rolls back. Once the handler returned, its record and COMMIT
  // are not interrupted, and how they ended is settled from inside (an interruption asked for meanwhile comes after).
  runTransactional(entry: Execution<C>, handler: Registered, startedAt: number, worker: Worker): false {
    const job = entry.claim.job
    const controller = new AbortController()
    // Whether the transaction began: the store runs `body` only then.
    let began = false
    const body = (tx: Transaction) =>
      traced(
        this.kind,
        job,
        Effect.suspend(() => {
          began = true
          return invokeInTransaction(handler.run, job, { query: tx.query, signal: controller.signal }, controller)
        })
      ).pipe(
        Effect.map((result): Finished<C> => {
          // The handler returned: its timeout no longer applies; a success is recorded, then committed.
          entry.deadline = Number.POSITIVE_INFINITY
          if (!result.failed) entry.committing = true
          return { claim: entry.claim, result, startedAt: new Date(startedAt), finishedAt: new Date(worker.now()) }
        })
      )
    const run = Effect.uninterruptibleMask((restore) =>
      this.source
        .transact(entry.claim, (tx) => restore(body(tx)), { timeoutMs: handler.timeoutMs })
        .pipe(
          Effect.exit,
          Effect.flatMap((exit) => this.settleTransaction(entry, exit, handler, startedAt, worker, began))
        )
    )
    return this.fork(entry, handler, controller, run, startedAt, worker)
  }

  // How a transactional execution ended: committed with its record (nothing left for the writer), refused (its lease
  // was lost: everything rolled back), failed for want of the database (let go, below), or a failure for the writer
  // to record in a transaction of its own — the handler's, its timeout, or the transaction's own (it could not begin,
  // record or commit for another reason).
  settleTransaction(
    entry: Execution<C>,
    exit: Exit.Exit<Transacted<Finished<C>>, E>,
    handler: Registered,
    startedAt: number,
    worker: Worker,
    began: boolean
  ): Effect.Effect<void> {
    return Effect.suspend(() => {
      entry.committing = false
      if (Exit.isSuccess(exit)) {
        const { value } = exit.value
        switch (exit.value._tag) {
          case "Committed":
            this.committed(entry, value)
            return Effect.void
          case "RolledBack":
            this.finish(entry, value.result, startedAt, value.finishedAt.getTime())
            return Effect.void
          case "Refused":
            return this.letGo(
              entry,
              "result refused: the execution's lease was lost; its transaction was rolled back, the handler's writes with it"
            )
        }
      }
      const cause = exit.cause
      if (Cause.isInterruptedOnly(cause)) {
        if (entry.timedOut)
          this.finish(entry, timedOut(entry.claim.job.taskType, handler.timeout), startedAt, worker.now())
        else this.abandon(entry)
        return Effect.void
      }
      const failure = Cause.failureOption(cause)
      // The transaction failed for want of the database: no connection could be had or its BEGIN went unanswered
      // (the handler never ran), or its record or COMMIT went unanswered (it may have committed: nothing says). Either
      // way this is no failure of the execution's, and this runner does not know how it ended, as after a crash: it
      // lets the execution go as a lost one, records nothing, and the lease decides. A queue item is taken back when
      // its lease expires (counted, as an expired lease is, toward giving up), a job's run is let go at this runner's
      // next claim and retried — unless the COMMIT went through, which ended the lease with the record. Handing it
      // back at once would claim it again at once while the database refuses connections.
      if (failure._tag === "Some" && failure.value.reason === "Unavailable") {
        return this.letGo(
          entry,
          began
            ? `a transactional execution's record or COMMIT went unanswered (${failure.value.message}): whether it committed is not known; let go, nothing more recorded: unless it committed, it runs again once its lease is taken back`
            : `a transactional execution could not begin its transaction (${failure.value.message}): the handler did not run; let go, nothing recorded, it runs again once its lease is taken back`
        )
      }
      const error = failure._tag === "Some" ? failure.value : Cause.squash(cause)
      this.finish(
        entry,
        Result.failure(
          error,
          `the handler's transaction failed: ${error instanceof Error ? error.message : Result.errorMessage(error)}`
        ),
        startedAt,
        worker.now()
      )
      return Effect.void
    })
  }

  // A transactional execution whose end this lane cannot record: ended as a lost one (its lease no longer renewed,
  // nothing recorded; whoever takes the lease back decides), and `why` logged once.
  letGo(entry: Execution<C>, why: string): Effect.Effect<void> {
    this.forget(entry)
    entry.lost = true
    this.abandon(entry)
    return Effect.logWarning(why).pipe(Effect.annotateLogs(batchAnnotations(this.kind, [entry.claim.job])))
  }

  // Its lease is no longer this lane's to renew (a lost one may already be gone).
  forget(entry: Execution<C>): void {
    if (this.active.get(entry.claim.key) === entry) this.active.delete(entry.claim.key)
  }

  // A transactional execution committed with its record: what the writer does after a write, for this one.
  committed(entry: Execution<C>, finished: Finished<C>): void {
    const context = this.context
    entry.running = false
    entry.fiber = undefined
    this.forget(entry)
    context.stopped(finished.finishedAt.getTime() - finished.startedAt.getTime())
    context.ended(finished.result, false)
    // What it freed (a sequential type's next item, a job's next run) may be claimable now.
    context.written(false)
    if (context.executed !== undefined) {
      context.executed({
        job: entry.claim.job,
        outcome: "ok",
        error: undefined,
        durationMs: finished.finishedAt.getTime() - finished.startedAt.getTime()
      })
    }
  }

  // Runs an execution on a worker; true when it ended before returning (see `Task.run`).
  execute(entry: Execution<C>, worker: Worker): boolean {
    const job = entry.claim.job
    const context = this.context
    if (entry.lost) {
      entry.running = false
      context.dropped()
      return true
    }
    const handler = context.handler(job.taskType)
    context.started()
    const startedAt = worker.now()
    if (handler?.transactional === true) return this.runTransactional(entry, handler, startedAt, worker)
    const out = handler === undefined ? unknownTaskType(job.taskType) : invoke(handler.run, job, handler.takesSignal)
    if (out instanceof PendingPromise) return this.awaitPromise(entry, out, handler!, startedAt, worker)
    if (out instanceof PendingEffect) return this.runEffect(entry, out, handler!, startedAt, worker)
    this.finish(entry, out, startedAt, worker.now())
    return true
  }

  claimAndStart(request: ClaimRequest) {
    return Effect.gen(this, function* () {
      if (request.limit <= 0 && !this.plansWhenFull) return { started: 0, overlapped: 0, rescued: 0 }
      // In flight until what it claimed is among the executions held (`startClaimed` adds them first thing).
      this.claiming++
      this.claimsBegun++
      const report = yield* Effect.ensuring(
        Effect.tap(this.source.claim(request, this.holdings), (report) => this.startClaimed(report.claimed, request)),
        Effect.sync(() => {
          this.claiming--
        })
      )
      return { started: report.claimed.length, overlapped: report.overlapped, rescued: report.rescued }
    })
  }

  // What this runner holds of the source, for a claim that is the only one in flight (see `Holdings`).
  readonly holdings = (): Holdings<C> | undefined => {
    if (this.claiming !== 1) return undefined
    const begun = this.claimsBegun
    return {
      claims: [...this.active.values()].map((e) => e.claim),
      current: () => this.claimsBegun === begun
    }
  }

  // Claimed executions, leased until `request.leaseUntil`, handed to the workers in claim order.
  startClaimed(claimed: ReadonlyArray<C>, request: ClaimRequest): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (claimed.length === 0) return Effect.void
      const context = this.context
      if (this.active.size === 0) context.leasesHeld()
      const leaseDeadline = request.leaseUntil.getTime() - context.lease.trustMarginMs
      const tasks: Array<Execution<C>> = []
      for (const claim of claimed) {
        const entry = new Execution<C>(this, claim, leaseDeadline)
        this.active.set(claim.key, entry)
        tasks.push(entry)
      }
      context.deadline(leaseDeadline)
      // After a stop began, nothing submitted starts (see `Capacity.close`): handed back at once.
      return Effect.zipRight(
        context.submit(tasks),
        Effect.suspend(() => (this.cancelled.length > 0 ? this.releaseCancelled(request.now) : Effect.void))
      )
    })
  }

  // An execution whose lease is gone (or no longer trusted): aborted if it runs, never started if it waits.
  loseLease(entry: Execution<C>): Effect.Effect<void> {
    return Effect.suspend(() => {
      entry.lost = true
      this.active.delete(entry.claim.key)
      entry.settle?.("lost")
      return entry.fiber === undefined ? Effect.void : Fiber.interruptFork(entry.fiber)
    })
  }

  // An Effect handler past its timeout: its signal aborted, its fiber interrupted, recorded as timed out.
  timeOut(entry: Execution<C>): Effect.Effect<void> {
    return Effect.suspend(() => {
      const fiber = entry.fiber
      if (fiber === undefined) return Effect.void
      entry.timedOut = true
      entry.deadline = Number.POSITIVE_INFINITY
      entry.controller?.abort(
        new HandlerTimeoutError({ taskType: entry.claim.job.taskType, timeout: entry.handler!.timeout })
      )
      return Fiber.interruptFork(fiber)
    })
  }

  renew(leaseUntil: Date, now: Date): Effect.Effect<boolean> {
    return renewRound(this, leaseUntil, now)
  }

  get flush(): Effect.Effect<void> {
    return flushBatch(this)
  }

  releaseInterrupted(now: Date): Effect.Effect<void> {
    return Effect.suspend(() => {
      const interrupted = [...this.active.values()].filter((e) => e.interrupted)
      for (const entry of interrupted) this.active.delete(entry.claim.key)
      return this.source.release(
        interrupted.map((e) => e.claim),
        now
      )
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logError("could not release leases at stop", cause)),
      Effect.annotateLogs({ kind: this.kind })
    )
  }

  releaseCancelled(now: Date): Effect.Effect<void> {
    return Effect.suspend(() => {
      // Only those still held: a lease lost meanwhile is someone else's now.
      const unstarted = this.cancelled.splice(0).filter((e) => this.active.get(e.claim.key) === e)
      if (unstarted.length === 0) return Effect.void
      for (const entry of unstarted) this.active.delete(entry.claim.key)
      const claims = unstarted.map((e) => e.claim)
      return (this.source.releaseUnstarted ?? this.source.release)(claims, now)
    }).pipe(
      Effect.catchAllCause((cause) =>
        Effect.logError("could not hand back executions claimed ahead at stop (their leases expire instead)", cause)
      ),
      Effect.annotateLogs({ kind: this.kind })
    )
  }

  earliestDeadline(): number {
    let earliest = Number.POSITIVE_INFINITY
    for (const entry of this.active.values()) {
      if ((entry.settle !== undefined || entry.fiber !== undefined) && entry.deadline < earliest)
        earliest = entry.deadline
      if (entry.running && !entry.committing && entry.leaseDeadline < earliest) earliest = entry.leaseDeadline
    }
    return earliest
  }

  runningTaskTypes(): ReadonlyArray<string> {
    const types = new Set<string>()
    for (const entry of this.active.values()) if (entry.running) types.add(entry.claim.job.taskType)
    return [...types]
  }

  expire(nowMs: number): Effect.Effect<void> {
    return Effect.gen(this, function* () {
      const unconfirmed: Array<Job> = []
      for (const entry of [...this.active.values()]) {
        if (entry.running && !entry.committing && entry.leaseDeadline <= nowMs) {
          unconfirmed.push(entry.claim.job)
          yield* this.loseLease(entry)
        } else if (entry.deadline <= nowMs) {
          if (entry.settle !== undefined) entry.settle("timeout")
          else if (entry.fiber !== undefined) yield* this.timeOut(entry)
        }
      }
      if (unconfirmed.length > 0) {
        yield* Effect.logWarning(
          `${unconfirmed.length} lease(s) not renewed in time (the database cannot be reached?): their executions ` +
            "were aborted, for another instance may take them over"
        ).pipe(Effect.annotateLogs(batchAnnotations(this.kind, unconfirmed)))
      }
    })
  }
}

// One renewal round for every lease the lane holds; a lost one is aborted. A renewal that hangs (a frozen network)
// is given up after half a renewal period, so the next round still comes before the lease is no longer trusted.
// False when the round failed.
const renewRound = <C extends Claimed, E extends StoreFailure>(
  lane: SourceLane<C, E>,
  leaseUntil: Date,
  now: Date
): Effect.Effect<boolean> =>
  Effect.gen(function* () {
    const entries = [...lane.active.values()].filter((e) => !e.committing)
    if (entries.length === 0) return true
    const lease = lane.context.lease
    const held = yield* lane.source
      .renew(
        entries.map((e) => e.claim),
        leaseUntil,
        now
      )
      .pipe(
        Effect.timeoutFail({
          duration: Duration.millis(lease.renewalTimeoutMs),
          onTimeout: () => new Error("no answer within half a renewal period")
        })
      )
    const leaseDeadline = leaseUntil.getTime() - lease.trustMarginMs
    // One line for the round, not one per execution: a runner that was cut off may lose hundreds at once.
    const lost: Array<Job> = []
    let aborted = 0
    for (const entry of entries) {
      if (lane.active.get(entry.claim.key) !== entry) continue
      // Committing since the round began: its renewal met its record's row lock, and found the row gone after COMMIT.
      if (entry.committing) continue
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
      yield* lane.loseLease(entry)
    }
    if (lost.length > 0) {
      const unstarted = lost.length - aborted
      const parts = [
        aborted > 0 ? `${aborted} running (aborted, results discarded)` : undefined,
        unstarted > 0 ? `${unstarted} not started yet (not run)` : undefined
      ].filter((p) => p !== undefined)
      yield* Effect.logWarning(
        `${lost.length} lease(s) lost (another instance took the work back): ${parts.join(", ")}`
      ).pipe(Effect.annotateLogs(batchAnnotations(lane.kind, lost)))
    }
    return true
  }).pipe(
    // A renewal that fails is not a lost lease: the next round tries again.
    // The reason in the line itself: without --verbose the CLI prints a log's message, not its cause.
    Effect.catchAllCause((cause) =>
      Effect.as(
        Effect.logWarning(
          `lease renewal failed; retrying next round: ${Result.errorMessage(Cause.squash(cause))}`,
          cause
        ),
        false
      )
    ),
    Effect.annotateLogs({ kind: lane.kind })
  )

interface Written<C> {
  readonly written: ReadonlyArray<boolean | undefined>
  readonly claimed: ReadonlyArray<C>
  readonly chained: boolean
  readonly next: ClaimRequest | undefined
}

// Writes one batch, claiming along with it when the source can and the runner may (a first try only: a write tried
// again only records, so whatever failed, a claim cannot keep results from being recorded; the tick that follows
// claims instead). Any cause is retried, defects included: a store that dies on a dead connection may work on the
// next try. The retry's schedule is set up only once a try failed (most writes never do): that failure is the
// schedule's first input, so the waits between tries are those of retrying from the start.
const writeBatch = <C extends Claimed, E extends StoreFailure>(
  lane: SourceLane<C, E>,
  batch: ReadonlyArray<Finished<C>>,
  tries: { n: number }
): Effect.Effect<Written<C>> => {
  const { context, source } = lane
  const completeAndClaim = source.completeAndClaim
  const write = Effect.gen(function* () {
    tries.n++
    const next = completeAndClaim === undefined || tries.n > 1 ? undefined : yield* context.chain
    if (completeAndClaim === undefined || next === undefined)
      return { written: yield* source.complete(batch), claimed: [], chained: false, next: undefined }
    return { ...(yield* completeAndClaim(batch, next)), next }
  })
  const attempt = Effect.sandbox(write)
  return attempt.pipe(
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
          "recording results failed; their executions run again once their leases expire (nothing is lost): " +
            Result.errorMessage(Cause.squash(cause)),
          cause
        ).pipe(Effect.annotateLogs({ kind: lane.kind })),
        { written: batch.map(() => undefined), claimed: [], chained: false, next: undefined }
      )
    )
  )
}

// Writes up to one batch of waiting results, then starts what the write claimed along.
const flushBatch = <C extends Claimed, E extends StoreFailure>(lane: SourceLane<C, E>): Effect.Effect<void> =>
  Effect.gen(function* () {
    const batch = lane.waiting.splice(0, RESULT_BATCH)
    if (batch.length === 0) return
    const tries = { n: 0 }
    const { chained, claimed, next, written } = yield* writeBatch(lane, batch, tries)
    const refused: Array<Finished<C>> = []
    for (let i = 0; i < batch.length; i++) {
      const finished = batch[i]!
      // Written or not, the lease is no longer renewed: a dropped result's lease expires and the work is taken back.
      lane.active.delete(finished.claim.key)
      if (written[i] === false) refused.push(finished)
    }
    if (refused.length > 0) yield* logRefused(lane.kind, refused, tries.n)
    if (next !== undefined) yield* lane.startClaimed(claimed, next)
    lane.context.written(chained && batch.every((f) => lane.chainable(f.claim, f.result)))
  })

// One line per batch, not per item: after an outage a whole batch is refused at once, and a line each would bury
// the outage's own lines. A try that failed may have committed before its answer was lost: a later try then finds
// the lease gone because the result was written, not because the lease was lost. Which one cannot be told here.
const logRefused = <C extends Claimed>(kind: string, refused: ReadonlyArray<Finished<C>>, tries: number) => {
  const n = refused.length
  const [what, whose] =
    n === 1 ? ["1 result", "its execution's lease was"] : [`${n} results`, "their executions' leases were"]
  return Effect.logWarning(
    tries > 1
      ? `${what} not confirmed: an earlier try of this write may have recorded ${n === 1 ? "it" : "them"} ` +
          `(its answer was lost), or ${whose} lost`
      : `${what} refused: ${whose} lost`
  ).pipe(
    Effect.annotateLogs(
      batchAnnotations(
        kind,
        refused.map((f) => f.claim.job)
      )
    )
  )
}

/** An execution's handler effect, traced: its log lines annotated, and a span of its own with its outcome. */
const traced = (kind: JobKind, job: Job, effect: Effect.Effect<Result.Result>): Effect.Effect<Result.Result> =>
  effect.pipe(
    Effect.annotateLogs({ kind, taskType: job.taskType, jobId: job.id, attempt: job.attempt }),
    // The handler's failure is already a Result here: say it on the span, which would otherwise end "ok".
    Effect.tap((result) =>
      Result.isFailure(result)
        ? Effect.annotateCurrentSpan({ "kairos.outcome": "failed", "kairos.error": result.message })
        : Effect.annotateCurrentSpan("kairos.outcome", "ok")
    ),
    // A span per execution of an Effect handler: exported by whatever Tracer the application installs.
    Effect.withSpan("kairos.execute", {
      attributes: {
        "kairos.kind": kind,
        "kairos.task_type": job.taskType,
        "kairos.id": job.id,
        "kairos.name": job.name,
        "kairos.attempt": job.attempt
      }
    })
  )

/** Wires a source into the pipeline. */
export const makeLane = <C extends Claimed, E extends StoreFailure>(
  source: WorkSource<C, E>,
  context: LaneContext
): Lane<E> => new SourceLane(source, context)
