/**
 * Work sources: what the runner runs. A work source (scheduled runs, queue items) knows how to claim executions,
 * renew their leases, record how they finished and hand them back at a stop. The execution pipeline (`Pipeline`)
 * does the rest the same way for every source.
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { Job, JobKind } from "../domain/Job.js"
import type * as Result from "../domain/Result.js"
import type { Transacted, Transaction, TransactOptions } from "../ports/Transaction.js"

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
 * What this runner holds of a source when a claim begins: the executions it runs or whose results wait to be
 * written. Every lease the runner took of the source and still stands for is among them, so a running execution
 * leased to this runner and not among them is one it no longer runs: its record of finishing was lost (a failover
 * to a standby that had not received it), or it gave the execution up. A claim may let such executions go at once.
 */
export interface Holdings<C> {
  readonly claims: ReadonlyArray<C>
  /**
   * Whether `claims` still covers every lease of this runner: false once another claim of the source began (its
   * leases may be committed and not yet among them). Ask it after reading what to let go, before letting go.
   */
  readonly current: () => boolean
}

/** A source of work: the internal interface between the runner and what it runs. */
export interface WorkSource<C extends Claimed, E> {
  readonly kind: JobKind
  /**
   * Claims with a limit of 0 too, while every worker is busy: it records what takes no worker (a slot that
   * overlaps its still-running previous run is recorded as skipped on time, not forgotten).
   */
  readonly plansWhenFull?: boolean | undefined
  /**
   * Claims up to `request.limit` executions (leased to `request.owner`). `holdings` says what the runner holds of
   * this source now; undefined while another claim of it is in flight (what that one takes is not known yet).
   */
  readonly claim: (request: ClaimRequest, holdings: () => Holdings<C> | undefined) => Effect.Effect<ClaimReport<C>, E>
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
   * A transactional execution (see ports/Transaction): `run` (the handler) inside one transaction of the source's
   * store; a success is recorded in that same transaction, fenced by the execution's lease, and commits with what the
   * handler wrote (or nothing does); a failure is rolled back and handed back (`RolledBack`), to be recorded with the
   * other results, in a transaction of its own.
   */
  readonly transact: (
    claim: C,
    run: (tx: Transaction) => Effect.Effect<Finished<C>>,
    options: TransactOptions
  ) => Effect.Effect<Transacted<Finished<C>>, E>
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
