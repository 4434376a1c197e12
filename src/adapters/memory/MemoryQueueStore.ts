/**
 * An in-memory QueueStore with the Postgres store's rules: normalisation, priority then queue order (`seq`), one
 * sequential execution per task type, forever-repeating items paced by `runAfter`, per-execution leases fenced by
 * tokens, an insert-only log. A new item notifies the MemoryDatabase's listeners ("queue"), as the table's insert
 * trigger does in Postgres.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { ProcessedItem } from "../../domain/ProcessedItem.js"
import * as Retention from "../../domain/Retention.js"
import type { InvalidRetryError } from "../../domain/errors.js"
import * as Retry from "../../domain/Retry.js"
import {
  FOREVER,
  gaveUpMessage,
  MAX_UNFINISHED,
  normalizeMaxRuns,
  normalizePayload,
  normalizePriority,
  normalizeRunAfter,
  normalizeThread,
  normalizeUniqueKey,
  type QueueItem
} from "../../domain/QueueItem.js"
import {
  durationMs,
  type EnqueueInput,
  type ExecutionResult,
  type ClaimOptions,
  type QueueClaim,
  QueueStore,
  type RecordInput
} from "../../ports/QueueStore.js"
import { layer as databaseLayer, MemoryDatabase } from "./MemoryDatabase.js"
import { transactWith } from "./MemoryTransaction.js"

interface Row {
  item: QueueItem
  seq: number
  inFlight: number
  runsDone: number
  runsStarted: number
  /** Executions taken back because their lease expired, since the item's last give-up (see MAX_UNFINISHED). */
  unfinished: number
  /** The item's own retry policy (`null`: its task type's). */
  retry: Retry.Policy | null
  /** Failed attempts at the item's current run (see Retry.settle). */
  failures: number
}

interface LeaseRow {
  readonly id: string
  readonly itemId: string
  readonly token: string
  readonly owner: string
  leaseUntil: Date
}

/** What tests see of the memory queue besides the port. */
export class MemoryQueue extends Context.Tag("kairos/MemoryQueue")<
  MemoryQueue,
  {
    /** Every item still queued, in insertion order. */
    readonly items: Effect.Effect<ReadonlyArray<QueueItem & { readonly inFlight: number }>>
    /** Every recorded execution, oldest first. */
    readonly processed: Effect.Effect<ReadonlyArray<ProcessedItem>>
  }
>() {}

/** Builds the store over the MemoryDatabase in context (whose listeners hear of new items). */
export const make: Effect.Effect<
  { readonly store: QueueStore["Type"]; readonly memory: MemoryQueue["Type"] },
  never,
  MemoryDatabase
> = Effect.gen(function* () {
  const db = yield* MemoryDatabase
  const rows: Array<Row> = []
  const leases: Array<LeaseRow> = []
  const log: Array<ProcessedItem> = []
  let nextId = 1
  let nextLogId = 1
  let nextSeq = 1
  let nextLease = 1
  let nextToken = 1
  const wakeAll = () => db.notify("queue")
  const claimable = (r: Row, now: Date) =>
    (r.item.runAfter === null || r.item.runAfter.getTime() <= now.getTime()) &&
    (r.inFlight === 0 || (r.item.thread === 1 && (r.item.maxRuns === FOREVER || r.inFlight < r.item.maxRuns)))
  const order = (a: Row, b: Row) => b.item.priority - a.item.priority || a.seq - b.seq
  const setStatus = (r: Row, now: Date) => {
    r.item = { ...r.item, status: r.inFlight > 0 ? "processing" : "pending", updatedAt: now }
  }

  // Like the Postgres store: every execution whose lease is still held is logged; then each item is settled once
  // for all of its executions in the batch (Retry.settle), and deleted when its last run is used up.
  const recordBatch = (results: ReadonlyArray<RecordInput>): ReadonlyArray<boolean> => {
    const byItem = new Map<string, { failed: number; executions: number; lastFinish: Date; retry: Retry.Policy }>()
    const recorded = results.map(({ claim, result, retry }) => {
      const i = leases.findIndex((l) => l.id === claim.leaseId && l.token === claim.token)
      if (i < 0) return false
      const [lease] = leases.splice(i, 1)
      const failed = result.error !== undefined
      log.push(logRow(lease!.itemId, claim, result))
      const entry = byItem.get(lease!.itemId) ?? {
        failed: 0,
        executions: 0,
        lastFinish: result.finishedAt,
        retry: retry ?? Retry.none
      }
      entry.executions++
      if (failed) entry.failed++
      if (result.finishedAt > entry.lastFinish) entry.lastFinish = result.finishedAt
      byItem.set(lease!.itemId, entry)
      return true
    })
    for (const [itemId, done] of byItem) {
      const r = rows.find((x) => x.item.id === itemId)
      if (r === undefined) continue
      const settled = Retry.settle(r.retry ?? done.retry, r.failures, done.failed, done.executions)
      r.inFlight = Math.max(0, r.inFlight - done.executions)
      r.runsDone += done.executions
      r.failures = settled.failuresAfter
      r.item = {
        ...r.item,
        maxRuns: r.item.maxRuns === FOREVER ? FOREVER : Math.max(0, r.item.maxRuns - settled.runsUsed),
        runAfter: settled.retried > 0 ? new Date(done.lastFinish.getTime() + settled.delayMs) : r.item.runAfter
      }
      setStatus(r, done.lastFinish)
      if (r.item.maxRuns === 0 && r.inFlight === 0) rows.splice(rows.indexOf(r), 1)
    }
    return recorded
  }

  const logRow = (itemId: string, claim: QueueClaim, result: ExecutionResult): ProcessedItem => ({
    // Never reused, as a sequence: pruning shortens the log.
    id: String(nextLogId++),
    queueItemId: itemId,
    taskType: claim.item.taskType,
    payload: claim.item.payload,
    status: result.error !== undefined ? "error" : "ok",
    errorMsg: result.error ?? "",
    startedAt: result.startedAt,
    finishedAt: result.finishedAt,
    durationMs: durationMs(result),
    createdAt: result.finishedAt
  })

  // Validated before anything is written: a bad policy refuses the item (and, in a batch, the whole batch).
  const policyOf = (input: EnqueueInput): Effect.Effect<Retry.Policy | null, InvalidRetryError> =>
    input.retry === undefined ? Effect.succeed(null) : Effect.suspend(() => Retry.parse(input.retry!))

  // A unique key already queued inserts nothing and returns that item, as the partial unique index does in Postgres.
  const insert = (input: EnqueueInput, now: Date, retry: Retry.Policy | null): QueueItem => {
    const uniqueKey = normalizeUniqueKey(input.uniqueKey)
    const existing = uniqueKey === null ? undefined : rows.find((r) => r.item.uniqueKey === uniqueKey)
    if (existing !== undefined) return existing.item
    const item: QueueItem = {
      id: String(nextId++),
      taskType: input.taskType,
      payload: normalizePayload(input.payload),
      status: "pending",
      priority: normalizePriority(input.priority),
      maxRuns: normalizeMaxRuns(input.maxRuns),
      thread: normalizeThread(input.thread),
      runAfter: normalizeRunAfter(input.runAfter),
      uniqueKey,
      createdAt: now,
      updatedAt: now
    }
    rows.push({ item, seq: nextSeq++, inFlight: 0, runsDone: 0, runsStarted: 0, unfinished: 0, retry, failures: 0 })
    return item
  }

  const claim = ({
    leaseUntil,
    limit,
    now,
    owner,
    repeatAfter,
    taskTypes
  }: ClaimOptions): ReadonlyArray<QueueClaim> => {
    const types = new Set(taskTypes)
    const busySequential = new Set(
      rows.filter((r) => r.item.thread === 0 && r.inFlight > 0).map((r) => r.item.taskType)
    )
    const candidates = rows.filter((r) => types.has(r.item.taskType) && claimable(r, now)).sort(order)
    const claims: Array<QueueClaim> = []
    let room = Math.max(0, Math.floor(limit))
    for (const r of candidates) {
      if (room <= 0) break
      if (r.item.thread === 0) {
        if (busySequential.has(r.item.taskType)) continue
        busySequential.add(r.item.taskType)
      }
      const count = r.item.thread === 1 && r.item.maxRuns !== FOREVER ? Math.min(room, r.item.maxRuns - r.inFlight) : 1
      for (let i = 0; i < count; i++) {
        const lease: LeaseRow = {
          // As in Postgres: an execution of a run-once item holds its lease on the item's row, under the item's id
          // negated (every execution of that item, one at a time, the same id; its token tells them apart); others
          // hold a lease row of their own.
          id: r.item.maxRuns === 1 ? `-${r.item.id}` : String(nextLease++),
          itemId: r.item.id,
          token: `q${nextToken++}-${Math.random().toString(36).slice(2)}`,
          owner,
          leaseUntil
        }
        leases.push(lease)
        r.inFlight++
        r.runsStarted++
        setStatus(r, now)
        claims.push({
          item: r.item,
          runsDone: r.runsDone,
          attempt: r.runsStarted,
          leaseId: lease.id,
          token: lease.token
        })
      }
      // A forever-repeating item waits for the next interval, behind its peers of equal priority.
      if (r.item.maxRuns === FOREVER) {
        r.item = { ...r.item, runAfter: repeatAfter }
        r.seq = nextSeq++
      }
      room -= count
    }
    return claims
  }

  const store = QueueStore.of({
    enqueueMany: (inputs, now) =>
      Effect.map(Effect.forEach(inputs, policyOf), (policies) => {
        const ids = inputs.map((input, i) => insert(input, now, policies[i]!).id)
        if (ids.length > 0) wakeAll()
        return ids
      }),
    enqueue: (input, now) =>
      Effect.map(policyOf(input), (retry) => {
        const item = insert(input, now, retry)
        wakeAll()
        return item
      }),
    claimBatch: (options) => Effect.sync(() => claim(options)),
    recordAndClaim: (results, options) =>
      Effect.sync(() => {
        const recorded = recordBatch(results)
        return { recorded, claims: claim(options) }
      }),
    renewLeases: (claims, leaseUntil) =>
      Effect.sync(() =>
        claims.map((claim) => {
          const lease = leases.find((l) => l.id === claim.leaseId && l.token === claim.token)
          if (lease === undefined) return false
          lease.leaseUntil = leaseUntil
          return true
        })
      ),
    recordResults: (results) => Effect.sync(() => recordBatch(results)),
    transact: transactWith((results: ReadonlyArray<RecordInput>) => Effect.sync(() => recordBatch(results))),
    nextLeaseExpiry: (exceptOwner) =>
      Effect.sync(() => {
        const times = leases.filter((l) => l.owner !== exceptOwner).map((l) => l.leaseUntil.getTime())
        return times.length === 0 ? Option.none() : Option.some(new Date(Math.min(...times)))
      }),
    releaseLeases: (claims, now) =>
      Effect.sync(() => {
        let released = 0
        for (const claim of claims) {
          const i = leases.findIndex((l) => l.id === claim.leaseId && l.token === claim.token)
          if (i < 0) continue
          const [lease] = leases.splice(i, 1)
          const r = rows.find((x) => x.item.id === lease!.itemId)
          if (r !== undefined) {
            r.inFlight = Math.max(0, r.inFlight - 1)
            setStatus(r, now)
          }
          released++
        }
        return released
      }),
    recoverStuck: (now, owner) =>
      Effect.sync(() => {
        const lost = leases.filter((l) => l.leaseUntil.getTime() < now.getTime() || l.owner === owner)
        for (const l of lost) {
          leases.splice(leases.indexOf(l), 1)
          const r = rows.find((x) => x.item.id === l.itemId)
          if (r !== undefined) {
            r.inFlight = Math.max(0, r.inFlight - 1)
            if (l.leaseUntil.getTime() < now.getTime()) r.unfinished++
            setStatus(r, now)
          }
        }
        // Items whose executions keep ending without a result: that run is given up, recorded as an error.
        for (const r of rows.filter((x) => x.unfinished >= MAX_UNFINISHED && x.inFlight === 0)) {
          log.push({
            // Never reused, as a sequence: pruning shortens the log.
            id: String(nextLogId++),
            queueItemId: r.item.id,
            taskType: r.item.taskType,
            payload: r.item.payload,
            status: "error",
            errorMsg: gaveUpMessage(MAX_UNFINISHED),
            startedAt: now,
            finishedAt: now,
            durationMs: 0,
            createdAt: now
          })
          r.unfinished = 0
          r.failures = 0
          r.runsDone++
          r.item = { ...r.item, maxRuns: r.item.maxRuns === FOREVER ? FOREVER : Math.max(0, r.item.maxRuns - 1) }
          setStatus(r, now)
          if (r.item.maxRuns === 0) rows.splice(rows.indexOf(r), 1)
        }
        return lost.length
      }),
    nextRunAfter: (taskTypes, now) =>
      Effect.sync(() => {
        const types = new Set(taskTypes)
        const times = rows.flatMap((r) =>
          types.has(r.item.taskType) && r.item.runAfter !== null && r.item.runAfter.getTime() > now.getTime()
            ? [r.item.runAfter.getTime()]
            : []
        )
        return times.length === 0 ? Option.none() : Option.some(new Date(Math.min(...times)))
      }),
    pendingCount: () => Effect.sync(() => rows.length),
    cancel: (itemId) =>
      Effect.sync(() => {
        const i = rows.findIndex((r) => r.item.id === itemId)
        if (i < 0) return Option.none()
        const [row] = rows.splice(i, 1)
        // Its leases go with it, as ON DELETE CASCADE does: a result still in flight is refused.
        for (let j = leases.length - 1; j >= 0; j--) if (leases[j]!.itemId === itemId) leases.splice(j, 1)
        return Option.some(row!.inFlight > 0 ? ("processing" as const) : ("pending" as const))
      }),
    retryExecution: (processedId, createdAt) =>
      Effect.sync(() => {
        const execution = log.find((p) => p.id === processedId)
        if (execution === undefined) return Option.none()
        const item = insert({ taskType: execution.taskType, payload: execution.payload }, createdAt, null)
        wakeAll()
        return Option.some(item)
      }),
    pruneProcessed: (batch) =>
      Effect.sync(() => {
        if (batch.olderThan === undefined && batch.keepLast === undefined) return 0
        // The log is in insertion (id) order: the i-th row has log.length - 1 - i newer ones.
        const doomed = new Set(
          log.filter((p, i) => Retention.prunes(batch, p.createdAt, log.length - 1 - i)).slice(0, batch.limit)
        )
        for (let i = log.length - 1; i >= 0; i--) if (doomed.has(log[i]!)) log.splice(i, 1)
        return doomed.size
      }),
    // Memory keeps no dead rows: there is never anything to vacuum.
    vacuum: () => Effect.succeed({ _tag: "Clean", deadRows: 0 } as const)
  })

  const memory = MemoryQueue.of({
    items: Effect.sync(() => rows.map((r) => ({ ...r.item, inFlight: r.inFlight }))),
    processed: Effect.sync(() => [...log])
  })
  return { store, memory }
})

/** The QueueStore port and the MemoryQueue handle, over the MemoryDatabase in context (shared with the other ports). */
export const layerFromDatabase: Layer.Layer<QueueStore | MemoryQueue, never, MemoryDatabase> = Layer.effectContext(
  Effect.map(make, ({ memory, store }) => Context.make(QueueStore, store).pipe(Context.add(MemoryQueue, memory)))
)

/** The QueueStore port and the MemoryQueue handle with a MemoryDatabase of their own. */
export const layer: Layer.Layer<QueueStore | MemoryQueue | MemoryDatabase> = layerFromDatabase.pipe(
  Layer.provideMerge(databaseLayer())
)
