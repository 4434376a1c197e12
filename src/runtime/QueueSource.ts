/**
 * Queue items as a work source: claims executions of the task types this runner handles (at most `rateLimit`
 * started per poll interval), takes back executions whose lease expired, records results in batches.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { unsafeMakeJob } from "../domain/Job.js"
import * as Limits from "../domain/Limits.js"
import * as Result from "../domain/Result.js"
import type * as Retry from "../domain/Retry.js"
import { leaseTimes, type SchedulerConfig } from "../domain/SchedulerConfig.js"
import { type QueueClaim, QueueStore, type QueueStoreError, type RecordInput } from "../ports/QueueStore.js"
import type { LimitsView } from "./LimitsView.js"
import * as Metrics from "./Metrics.js"
import type { Claimed, ClaimRequest, Finished, WorkSource } from "./WorkSource.js"

/** A claimed execution of a queue item. */
export interface ClaimedItem extends Claimed {
  readonly claim: QueueClaim
}

/** How long after a lease's expiry the idle runner looks: the rescue takes leases that expired before its now. */
const EXPIRY_SLACK_MS = 10

/**
 * The largest batch size at which the results writer claims along with every batch it writes (see
 * `completeAndClaim`). Small claims are bound by their round trips, not by the work they do: a claim along with a
 * write costs no statement of its own, and it is a second claim in flight beside the tick's, so the workers wait less
 * for work (measured interleaved with the default batch of 20, no-op handlers: +17 … +65 % items/s, −16 … −40 % CPU
 * per item; +12 … +34 % at batches of 50 to 200). Large claims are bound by the work: two of 300 or 500 in flight skip
 * each other's locked rows and split into smaller claims, and the writes that carry them take twice as long
 * (−15 … −26 %).
 */
export const CLAIM_ALONG_MAX_BATCH = 200

/**
 * Writes results and claims in the same round trip (see `WorkSource.completeAndClaim`). A sequential execution's
 * result frees its type: the type's next item is claimed along. Other results, with batches of at most
 * CLAIM_ALONG_MAX_BATCH, are written with a claim like the tick's (up to the room the runner has), except when the
 * rescue of expired leases is due: the tick then claims, and takes them back.
 */
const writeAndClaim = (
  deps: {
    readonly config: SchedulerConfig
    readonly store: QueueStore["Type"]
    readonly owner: string
    readonly complete: (
      finished: ReadonlyArray<Finished<ClaimedItem>>
    ) => Effect.Effect<ReadonlyArray<boolean>, QueueStoreError>
    readonly toRecord: (finished: Finished<ClaimedItem>) => RecordInput
    readonly rescueDue: (nowMs: number) => boolean
    readonly limits: LimitsView | undefined
  },
  finished: ReadonlyArray<Finished<ClaimedItem>>,
  next: ClaimRequest
) => {
  const { complete, config, limits, owner, rescueDue, store, toRecord } = deps
  return Effect.gen(function* () {
    // Under a rate limit, starts are counted by the tick's claims only.
    if (config.rateLimit > 0 || next.limit <= 0 || next.taskTypes.length === 0)
      return { written: yield* complete(finished), claimed: [], chained: false }
    const types = new Set<string>()
    for (const f of finished) if (f.claim.claim.item.thread === 0) types.add(f.claim.claim.item.taskType)
    const handled = next.taskTypes.filter((t) => types.has(t))
    const chain = handled.length > 0
    if (!chain && (config.batchSize > CLAIM_ALONG_MAX_BATCH || rescueDue(next.now.getTime())))
      return { written: yield* complete(finished), claimed: [], chained: false }
    const claimStart = performance.now()
    const { claims, recorded } = yield* store.recordAndClaim(finished.map(toRecord), {
      limit: chain ? Math.min(next.limit, handled.length) : next.limit,
      taskTypes: chain ? handled : next.taskTypes,
      owner,
      leaseUntil: next.leaseUntil,
      now: next.now,
      repeatAfter: new Date(next.now.getTime() + Duration.toMillis(next.interval)),
      // The limits as the last tick read them: a change since woke the loop, whose tick reads it.
      limited: limitedOf(limits?.last(), chain ? handled : next.taskTypes)
    })
    Metrics.recordClaim("queue", performance.now() - claimStart, "write")
    // Chained when every freed type got its next sequential item. One that got none may be empty, or its claim
    // may have lost to another instance's tick holding the type's lock: a tick then looks again.
    const chained =
      chain &&
      next.limit >= handled.length &&
      handled.every((t) => claims.some((c) => c.item.taskType === t && c.item.thread === 0))
    return { written: recorded, claimed: claims.map(toClaimed), chained }
  })
}

/**
 * How many more executions the rate limit allows to start now: it is a sliding window, the start times of the last
 * `rateLimit` executions (dropped from `starts` once out of the window). At most that many start within any poll
 * interval, however often the runner ticks.
 */
const allowedStarts = (config: SchedulerConfig, starts: Array<number>, now: number, intervalMs: number): number => {
  if (config.rateLimit <= 0) return Number.POSITIVE_INFINITY
  while (starts.length > 0 && starts[0]! <= now - intervalMs) starts.shift()
  return config.rateLimit - starts.length
}

/** The task types among `types` that have limits; undefined when none (the plain claim). */
const limitedOf = (
  limits: ReadonlyMap<string, Limits.FlowLimit> | undefined,
  types: ReadonlyArray<string>
): ReadonlyArray<string> | undefined => {
  if (limits === undefined || limits.size === 0) return undefined
  const limited = types.filter((t) => limits.has(t))
  return limited.length === 0 ? undefined : limited
}

/**
 * The earliest end of a rate window among the task types with a shared rate (see LimitsView), if any: a type held
 * back by its rate has work again then.
 */
const rateWindowEnd = (
  limits: LimitsView | undefined,
  now: number,
  taskTypes: ReadonlyArray<string>
): number | undefined => {
  const known = limits?.last()
  if (known === undefined || known.size === 0) return undefined
  let end: number | undefined
  for (const t of taskTypes) {
    const rate = known.get(t)?.rate
    if (rate === null || rate === undefined) continue
    const at = Limits.windowStart(rate, now) + rate.perMs
    end = end === undefined ? at : Math.min(end, at)
  }
  return end
}

/** A finished execution as recorded, with its task type's retry policy. */
const recordOf =
  (retryOf: QueueSourceOptions["retryOf"]) =>
  ({ claim, finishedAt, result, startedAt }: Finished<ClaimedItem>): RecordInput => ({
    claim: claim.claim,
    result: {
      startedAt,
      finishedAt,
      error: result.failed ? result.message : undefined,
      // Recorded only when the handler returned something (the log's output stays NULL otherwise).
      output: result.failed || result.output === undefined ? undefined : Result.encodeOutput(result.output)
    },
    retry: retryOf(claim.claim.item.taskType)
  })

/** The earlier of `due` and `atMs`. */
const sooner = (due: Option.Option<Date>, atMs: number | undefined): Option.Option<Date> =>
  atMs !== undefined && (Option.isNone(due) || atMs < due.value.getTime()) ? Option.some(new Date(atMs)) : due

/** The inputs of an item that waited for nothing: one frozen object for all. */
const NO_INPUTS: Readonly<Record<string, unknown>> = Object.freeze({})

/** A claim as the pipeline runs it. */
const toClaimed = (claim: QueueClaim): ClaimedItem => ({
  // The token too: a run-once item's executions share its lease id (the item's row), and one that lost its lease
  // may still run beside a later one of the same item.
  key: `lease:${claim.leaseId}:${claim.token}`,
  claim,
  job: unsafeMakeJob({
    id: claim.item.id,
    kind: "queue",
    name: claim.item.taskType,
    taskType: claim.item.taskType,
    // The handler gets text: "" for a NULL payload (what was stored is recorded as it was).
    payload: claim.item.payload ?? "",
    scheduledFor: claim.item.createdAt,
    attempt: claim.attempt,
    metadata: {
      priority: claim.item.priority,
      thread: claim.item.thread,
      maxRuns: claim.item.maxRuns,
      leaseId: claim.leaseId
    },
    inputs: claim.inputs ?? NO_INPUTS,
    group: claim.item.group
  })
})

/** What the queue's work source is made with. */
export interface QueueSourceOptions {
  readonly config: SchedulerConfig
  readonly owner: string
  /** The retry policy registered for a task type, if any: recorded with each result of its items. */
  readonly retryOf: (taskType: string) => Retry.Policy | undefined
  /** The flow limits as the runner knows them (see LimitsView); absent: none. */
  readonly limits?: LimitsView | undefined
}

export const make = (
  options: QueueSourceOptions
): Effect.Effect<WorkSource<ClaimedItem, QueueStoreError>, never, QueueStore> =>
  Effect.gen(function* () {
    const { config, limits, owner, retryOf } = options
    const store = yield* QueueStore
    const { freshnessMs } = leaseTimes(config)
    let lastRescue = Number.NEGATIVE_INFINITY
    // The rate limit is a sliding window: the start times of the last `rateLimit` executions. At most that many
    // start within any poll interval, however often the runner ticks.
    const starts: Array<number> = []
    let windowMs = Duration.toMillis(config.interval)
    // The last claim took nothing: the runner is about to idle, so it asks when another owner's lease expires (a
    // busy runner does not pay that query: its next claim comes soon anyway).
    let idle = false
    // When that lease expires: the claim then rescues, however recently it last did.
    let expiryAt = Number.POSITIVE_INFINITY
    // The last claim took less than it could: nothing else was due, so the runner asks when the next delayed item
    // (`run_after`) becomes due and wakes then. A claim that filled its limit comes back soon anyway.
    let drained = false
    // That claim's time: items due after it (even due by now, between the claim and this question) wake the runner.
    let claimedAt = new Date(0)

    // The tick's claims take back expired leases (see `claim`); a write's claim never does (see `completeAndClaim`).
    const rescueDue = (now: number) => now - lastRescue >= freshnessMs || now >= expiryAt

    const toRecord = recordOf(retryOf)
    const complete = (finished: ReadonlyArray<Finished<ClaimedItem>>) => store.recordResults(finished.map(toRecord))

    const writeDeps = { config, store, owner, complete, toRecord, rescueDue, limits }

    return {
      kind: "queue",
      claim: (request) =>
        Effect.gen(function* () {
          const now = request.now.getTime()
          // At most every third of a lease: take back executions whose owner stopped renewing.
          let rescued = 0
          if (rescueDue(now)) {
            lastRescue = now
            expiryAt = Number.POSITIVE_INFINITY
            rescued = yield* store.recoverStuck(request.now)
            if (rescued > 0) yield* Effect.logWarning(`took back ${rescued} queue execution(s) whose lease expired`)
          }
          const intervalMs = Duration.toMillis(request.interval)
          windowMs = intervalMs
          const limit = Math.min(request.limit, allowedStarts(config, starts, now, intervalMs))
          idle = false
          drained = false
          if (limit <= 0 || request.taskTypes.length === 0) return { claimed: [], overlapped: 0, rescued }
          const known = limits === undefined ? undefined : yield* limits.current(now, intervalMs)
          const claimStart = performance.now()
          const claims = yield* store.claimBatch({
            limit,
            taskTypes: request.taskTypes,
            owner,
            leaseUntil: request.leaseUntil,
            now: request.now,
            repeatAfter: new Date(now + intervalMs),
            limited: limitedOf(known, request.taskTypes)
          })
          Metrics.recordClaim("queue", performance.now() - claimStart)
          if (config.rateLimit > 0) for (let i = 0; i < claims.length; i++) starts.push(now)
          idle = claims.length === 0
          drained = claims.length < limit
          claimedAt = request.now
          return { claimed: claims.map(toClaimed), overlapped: 0, rescued }
        }),
      // New items announce themselves (NOTIFY). Otherwise the queue next has work when the rate limit's window
      // moves on, when a delayed item becomes due, or when a lease of a dead owner expires (taken back a moment
      // after).
      nextWakeAt: (_now, taskTypes) =>
        Effect.gen(function* () {
          if (config.rateLimit > 0 && starts.length >= config.rateLimit)
            return Option.some(new Date(starts[0]! + windowMs))
          // A type held back by its shared rate: look again when the window ends.
          const due = sooner(
            drained && taskTypes.length > 0 ? yield* store.nextRunAfter(taskTypes, claimedAt) : Option.none<Date>(),
            drained ? rateWindowEnd(limits, claimedAt.getTime(), taskTypes) : undefined
          )
          if (!idle) return due
          const expiry = yield* store.nextLeaseExpiry(owner)
          if (Option.isNone(expiry)) return due
          expiryAt = expiry.value.getTime() + EXPIRY_SLACK_MS
          return Option.some(new Date(Option.isSome(due) ? Math.min(expiryAt, due.value.getTime()) : expiryAt))
        }),
      renew: (claims, leaseUntil, now) =>
        Effect.map(
          store.renewLeases(
            claims.map((c) => c.claim),
            leaseUntil,
            now
          ),
          (held) => new Set(claims.flatMap((c, i) => (held[i] === true ? [c.key] : [])))
        ),
      complete,
      transact: (_claim, run, options) =>
        store.transact(run, (finished) => (finished.result.failed ? undefined : toRecord(finished)), options),
      // A sequential execution's result frees its type: the type's next item is claimed in the same round trip, so
      // a chain of sequential items does not wait for a tick (and its read of the switches) per item (see
      // `writeAndClaim`).
      completeAndClaim: (finished, next) => writeAndClaim(writeDeps, finished, next),
      // A run-once sequential item frees only its type's slot, which the write's chained claim takes again. Under a
      // rate limit nothing is chained.
      chains: (claimed) => config.rateLimit <= 0 && claimed.claim.item.thread === 0 && claimed.claim.item.maxRuns === 1,
      // Everything this owner still holds is handed back (its interrupted executions among them).
      release: (_interrupted, now) => Effect.asVoid(store.recoverStuck(now, owner)),
      // Only these: the others this owner holds still run.
      releaseUnstarted: (unstarted, now) =>
        Effect.asVoid(
          store.releaseLeases(
            unstarted.map((c) => c.claim),
            now
          )
        )
    }
  })
