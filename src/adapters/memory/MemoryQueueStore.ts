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
import * as Limits from "../../domain/Limits.js"
import * as Retention from "../../domain/Retention.js"
import { InvalidFlowError, type InvalidRetryError } from "../../domain/errors.js"
import * as Flow from "../../domain/Flow.js"
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
  pendingItem,
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
  /** The item's group (`group_key`), `null`: none. */
  group: string | null
}

/** An item waiting for others (Postgres: a row of queue_waiting). */
interface WaitRow {
  readonly id: string
  readonly input: EnqueueInput
  readonly retry: Retry.Policy | null
  readonly after: ReadonlyArray<string>
  readonly afterKeys: ReadonlyArray<string> | undefined
  readonly createdAt: Date
  remaining: number
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
  const waiting: Array<WaitRow> = []
  // A released item's inputs, by item id (Postgres: queue_items.inputs).
  const inputsOf = new Map<string, Readonly<Record<string, unknown>>>()
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
  // for all of its executions in the batch (Retry.settle), and deleted when its last run is used up. What waits for
  // the items that left is settled last, all together (removeRows).
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
    const gone: Array<readonly [Row, Date]> = []
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
      if (r.item.maxRuns === 0 && r.inFlight === 0) gone.push([r, done.lastFinish])
    }
    if (gone.length > 0)
      removeRows(
        gone.map(([r]) => [r, lastStatus(r.item.id)] as const),
        new Date(Math.max(...gone.map(([, at]) => at.getTime())))
      )
    return recorded
  }

  // How an item's last execution ended (an item that leaves the queue was just logged, unless cancelled).
  const lastStatus = (itemId: string): "ok" | "error" | undefined => {
    for (let i = log.length - 1; i >= 0; i--) if (log[i]!.queueItemId === itemId) return log[i]!.status
    return undefined
  }

  const byId = (a: { readonly id: string }, b: { readonly id: string }) => Number(a.id) - Number(b.id)

  /**
   * Items leave the queue together (one statement in Postgres), and what waits for them is settled as migration
   * 0028's trigger settles it: each waiter counted down by as many of those that ended well as it waits for, and those
   * with nothing left released, in id order; then what waits for each of the others, in id order, never runs.
   */
  const removeRows = (
    gone: ReadonlyArray<readonly [Row, "ok" | "error" | "cancelled" | undefined]>,
    now: Date
  ): void => {
    for (const [r] of gone) {
      rows.splice(rows.indexOf(r), 1)
      inputsOf.delete(r.item.id)
    }
    const ok = new Set(gone.filter(([, how]) => how === "ok").map(([r]) => r.item.id))
    const counted = waiting.filter((w) => w.after.some((dep) => ok.has(dep))).sort(byId)
    for (const w of counted) w.remaining -= new Set(w.after.filter((dep) => ok.has(dep))).size
    for (const w of counted) if (w.remaining <= 0) release(w, now)
    for (const [r, how] of [...gone].sort(([a], [b]) => byId(a.item, b.item))) {
      if (how === "ok") continue
      const waiters = waitersOf(r.item.id)
      if (waiters.length > 0) doom(waiters, r.item.id, how === "error" ? "failed" : "was cancelled", now)
    }
  }

  const waitersOf = (id: string) => waiting.filter((w) => w.after.includes(id))

  // Never to run: each recorded once as an error naming what it waited for, and so is whatever waits for it.
  const doom = (
    roots: ReadonlyArray<WaitRow>,
    cause: string,
    how: "failed" | "was cancelled" | "did not run",
    now: Date
  ) => {
    const queue: Array<readonly [WaitRow, string, "failed" | "was cancelled" | "did not run"]> = roots.map(
      (w) => [w, cause, how] as const
    )
    const doomed = new Map<string, readonly [WaitRow, string, string]>()
    for (let i = 0; i < queue.length; i++) {
      const [w, c, h] = queue[i]!
      const seen = doomed.get(w.id)
      if (seen === undefined || Number(c) < Number(seen[1])) doomed.set(w.id, [w, c, h])
      if (seen !== undefined) continue
      for (const next of waitersOf(w.id)) queue.push([next, w.id, "did not run"])
    }
    for (const [w, c, h] of [...doomed.values()].sort(([a], [b]) => byId(a, b))) {
      waiting.splice(waiting.indexOf(w), 1)
      log.push({
        id: String(nextLogId++),
        queueItemId: w.id,
        taskType: w.input.taskType,
        payload: normalizePayload(w.input.payload),
        status: "error",
        errorMsg: Flow.notRunMessage(c, h as "failed"),
        startedAt: now,
        finishedAt: now,
        durationMs: 0,
        createdAt: now
      })
    }
  }

  // Its wait is over: into the queue, under its id, with the outputs of what it waited for.
  const release = (w: WaitRow, now: Date) => {
    waiting.splice(waiting.indexOf(w), 1)
    const item = insertRow(w.id, w.input, w.createdAt, now, w.retry)
    if (w.after.length > 0) {
      const inputs: Record<string, unknown> = {}
      w.after.forEach((dep, k) => {
        let output: unknown = null
        for (let i = log.length - 1; i >= 0; i--)
          if (log[i]!.queueItemId === dep && log[i]!.status === "ok") {
            output = log[i]!.output ?? null
            break
          }
        inputs[w.afterKeys?.[k] ?? dep] = output
      })
      inputsOf.set(item.id, inputs)
    }
    wakeAll()
  }

  // A waiting item, as migration 0020's insert triggers take it: what it names is queued or waiting (it waits for
  // it), logged (done, or failed: it will not run), or unknown (refused).
  const insertWaiting = (
    input: EnqueueInput,
    retry: Retry.Policy | null,
    after: ReadonlyArray<string>,
    now: Date,
    keys?: { readonly id: string; readonly afterKeys: ReadonlyArray<string> }
  ): string => {
    let remaining = 0
    let blockedBy: string | undefined
    for (const dep of after) {
      if (rows.some((r) => r.item.id === dep) || waiting.some((w) => w.id === dep)) {
        remaining++
        continue
      }
      const status = lastStatus(dep)
      if (status === undefined)
        throw new InvalidFlowError({
          reason: "unknownItem",
          message: `after names item ${dep}, which is unknown (not queued, not waiting, and no execution of it is logged)`
        })
      if (status !== "ok" && blockedBy === undefined) blockedBy = dep
    }
    const w: WaitRow = {
      id: keys?.id ?? String(nextId++),
      input,
      retry,
      after,
      afterKeys: keys?.afterKeys,
      createdAt: now,
      remaining
    }
    waiting.push(w)
    if (blockedBy !== undefined) doom([w], blockedBy, "failed", now)
    else if (remaining === 0) release(w, now)
    return w.id
  }

  // Every check before anything is written: a refused item (or batch, or flow) leaves the store as it was.
  const checkAfter = (input: EnqueueInput): ReadonlyArray<string> => {
    const after = Flow.normalizeAfter(input.after)
    if (after.length > 0 && normalizeUniqueKey(input.uniqueKey) !== null)
      throw new InvalidFlowError({ reason: "unsupported", message: "enqueue: after cannot be combined with uniqueKey" })
    for (const dep of after)
      if (!rows.some((r) => r.item.id === dep) && !waiting.some((w) => w.id === dep) && lastStatus(dep) === undefined)
        throw new InvalidFlowError({
          reason: "unknownItem",
          message: `after names item ${dep}, which is unknown (not queued, not waiting, and no execution of it is logged)`
        })
    return after
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
    createdAt: result.finishedAt,
    ...(result.error === undefined && result.output !== undefined ? { output: JSON.parse(result.output) } : {})
  })

  // Validated before anything is written: a bad policy refuses the item (and, in a batch, the whole batch).
  const policyOf = (input: EnqueueInput): Effect.Effect<Retry.Policy | null, InvalidRetryError> =>
    input.retry === undefined ? Effect.succeed(null) : Effect.suspend(() => Retry.parse(input.retry!))

  // A unique key already queued inserts nothing and returns that item, as the partial unique index does in Postgres.
  const insert = (input: EnqueueInput, now: Date, retry: Retry.Policy | null): QueueItem => {
    const uniqueKey = normalizeUniqueKey(input.uniqueKey)
    const existing = uniqueKey === null ? undefined : rows.find((r) => r.item.uniqueKey === uniqueKey)
    if (existing !== undefined) return existing.item
    return insertRow(String(nextId++), input, now, now, retry)
  }

  const insertRow = (
    id: string,
    input: EnqueueInput,
    createdAt: Date,
    now: Date,
    retry: Retry.Policy | null
  ): QueueItem => {
    const item = pendingItem(id, input, normalizeUniqueKey(input.uniqueKey), createdAt, now)
    rows.push({
      item,
      seq: nextSeq++,
      inFlight: 0,
      runsDone: 0,
      runsStarted: 0,
      unfinished: 0,
      retry,
      failures: 0,
      group: item.group
    })
    return item
  }

  // `count` executions of a row (its item as it was before them), each with a lease of its own.
  const take = (r: Row, count: number, { leaseUntil, now, owner, repeatAfter }: ClaimOptions): Array<QueueClaim> => {
    const claims: Array<QueueClaim> = []
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
      const inputs = inputsOf.get(r.item.id)
      claims.push({
        item: r.item,
        runsDone: r.runsDone,
        attempt: r.runsStarted,
        leaseId: lease.id,
        token: lease.token,
        ...(inputs === undefined ? {} : { inputs })
      })
    }
    // A forever-repeating item waits for the next interval, behind its peers of equal priority.
    if (r.item.maxRuns === FOREVER) {
      r.item = { ...r.item, runAfter: repeatAfter }
      r.seq = nextSeq++
    }
    return claims
  }

  const busySequentialTypes = () =>
    new Set(rows.filter((r) => r.item.thread === 0 && r.inFlight > 0).map((r) => r.item.taskType))

  const claimPlain = (types: ReadonlySet<string>, limit: number, options: ClaimOptions): Array<QueueClaim> => {
    const { now } = options
    const busySequential = busySequentialTypes()
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
      claims.push(...take(r, count, options))
      room -= count
    }
    return claims
  }

  // The executions claimed under limits (`kairos_limit_slots`), by lease id and token: a slot counts while its lease
  // lives (a lease past its time counts no more); the others are dropped at the type's next limited claim.
  const slots = new Map<string, { readonly taskType: string; readonly group: string | null }>()
  const slotKey = (leaseId: string, token: string) => `${leaseId}:${token}`
  const liveSlots = (taskType: string, now: Date): Array<{ readonly group: string | null }> => {
    const live = new Set(
      leases.filter((l) => l.leaseUntil.getTime() >= now.getTime()).map((l) => slotKey(l.id, l.token))
    )
    const held: Array<{ readonly group: string | null }> = []
    for (const [key, slot] of slots) {
      if (slot.taskType !== taskType) continue
      if (live.has(key)) held.push(slot)
      else slots.delete(key)
    }
    return held
  }
  const slotted = (claims: Array<QueueClaim>, taskType: string, group: string | null, counted: boolean) => {
    if (counted) for (const c of claims) slots.set(slotKey(c.leaseId, c.token), { taskType, group })
    return claims
  }

  // A limited type's claim, as `kairos_claim_limited` (migrations 0021, 0024) makes it: the rate window and the live
  // leases bound what it may take; a concurrency or a rate per group serves the groups in rotation, in key order from
  // after the last served.
  const claimLimited = (limit: Limits.FlowLimit, room: number, options: ClaimOptions): Array<QueueClaim> => {
    const { now } = options
    const type = limit.taskType
    const state = db.limitState.get(type) ?? {
      windowStart: null,
      windowStarts: 0,
      groupCursor: null,
      groupStarts: new Map<string, number>()
    }
    let budget = room
    const grouped = limit.perGroup || limit.ratePerGroup
    let window: number | null = null
    let used = 0
    if (limit.rate !== null) {
      window = Limits.windowStart(limit.rate, now.getTime())
      used = state.windowStart === window ? state.windowStarts : 0
      // A rate per group bounds each group's starts (below), not the type's.
      if (!limit.ratePerGroup) budget = Math.min(budget, limit.rate.limit - used)
    }
    // The groups' starts in this window (a new window starts them from nothing).
    const groupStarts = new Map(limit.rate !== null && state.windowStart === window ? state.groupStarts : [])
    const live = limit.concurrency === null ? [] : liveSlots(type, now)
    if (limit.concurrency !== null && !limit.perGroup) budget = Math.min(budget, limit.concurrency - live.length)
    if (budget <= 0) return []
    let claims: Array<QueueClaim> = []
    let cursor = state.groupCursor
    if (!grouped) claims = slotted(claimPlain(new Set([type]), budget, options), type, null, limit.concurrency !== null)
    else {
      const { concurrency, rate } = limit
      const counted = concurrency !== null
      const heldBy = new Map<string, number>()
      for (const slot of live) if (slot.group !== null) heldBy.set(slot.group, (heldBy.get(slot.group) ?? 0) + 1)
      let seqBusy = busySequentialTypes().has(type)
      const groups = [...new Set(rows.flatMap((r) => (r.item.taskType === type && r.group !== null ? [r.group] : [])))]
      groups.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      const start = state.groupCursor
      const rotation =
        start === null ? groups : [...groups.filter((g) => g > start), ...groups.filter((g) => g <= start)]
      for (const g of rotation) {
        if (claims.length >= budget) break
        cursor = g
        let free = limit.perGroup && concurrency !== null ? concurrency - (heldBy.get(g) ?? 0) : budget - claims.length
        if (rate !== null && limit.ratePerGroup) free = Math.min(free, rate.limit - (groupStarts.get(g) ?? 0))
        if (free <= 0) continue
        const before = claims.length
        const members = rows.filter((r) => r.item.taskType === type && r.group === g).sort(order)
        if (limit.perGroup && concurrency === 1) {
          // Ordered: only the group's head may start; one that runs or waits for its time holds the group.
          const head = members[0]
          if (head === undefined || head.inFlight > 0) continue
          if (head.item.runAfter !== null && head.item.runAfter.getTime() > now.getTime()) continue
          if (head.item.thread === 0 && seqBusy) continue
          if (head.item.thread === 0) seqBusy = true
          claims.push(...slotted(take(head, 1, options), type, g, counted))
        } else {
          const due = members.filter(
            (r) => r.inFlight === 0 && (r.item.runAfter === null || r.item.runAfter.getTime() <= now.getTime())
          )
          let left = Math.min(free, budget - claims.length)
          for (const r of due) {
            if (left <= 0) break
            if (r.item.thread === 0 && seqBusy) continue
            if (r.item.thread === 0) seqBusy = true
            claims.push(...slotted(take(r, 1, options), type, g, counted))
            left--
          }
        }
        if (limit.ratePerGroup && claims.length > before)
          groupStarts.set(g, (groupStarts.get(g) ?? 0) + claims.length - before)
      }
    }
    if (grouped || (limit.rate !== null && claims.length > 0)) {
      db.limitState.set(type, {
        windowStart: limit.rate !== null ? window : state.windowStart,
        windowStarts: limit.rate !== null ? used + claims.length : state.windowStarts,
        groupCursor: grouped ? cursor : state.groupCursor,
        groupStarts: limit.ratePerGroup ? groupStarts : state.groupStarts
      })
    }
    return claims
  }

  // As in Postgres: a type the caller claims as limited obeys its limits as they are now (none left: the plain
  // claim); a type it claims as plain is skipped while it has limits (a caller that has not read them yet must not
  // claim past them).
  const claim = (options: ClaimOptions): ReadonlyArray<QueueClaim> => {
    const types = [...new Set(options.taskTypes)]
    const asked = new Set(options.limited ?? [])
    const limited = types.filter((t) => db.limits.has(t) && asked.has(t)).sort()
    const plain = new Set(types.filter((t) => !db.limits.has(t)))
    let room = Math.max(0, Math.floor(options.limit))
    const claims: Array<QueueClaim> = []
    for (const t of limited) {
      if (room <= 0) break
      const taken = claimLimited(db.limits.get(t)!, room, options)
      claims.push(...taken)
      room -= taken.length
    }
    if (room > 0 && plain.size > 0) claims.push(...claimPlain(plain, room, options))
    return claims
  }

  const store = QueueStore.of({
    enqueueMany: (inputs, now) =>
      Effect.flatMap(Effect.forEach(inputs, policyOf), (policies) =>
        Effect.try({
          try: () => {
            const afters = inputs.map(checkAfter)
            const ids = inputs.map((input, i) =>
              afters[i]!.length > 0
                ? insertWaiting(input, policies[i]!, afters[i]!, now)
                : insert(input, now, policies[i]!).id
            )
            if (ids.length > 0) wakeAll()
            return ids
          },
          catch: (e) => e as InvalidFlowError
        })
      ),
    enqueue: (input, now) =>
      Effect.flatMap(policyOf(input), (retry) =>
        Effect.try({
          try: () => {
            const after = checkAfter(input)
            if (after.length === 0) {
              const item = insert(input, now, retry)
              wakeAll()
              return item
            }
            // Pending outside the queue; no unique key (not allowed with after).
            return pendingItem(insertWaiting(input, retry, after, now), input, null, now)
          },
          catch: (e) => e as InvalidFlowError
        })
      ),
    enqueueFlow: (steps, now) =>
      Effect.gen(function* () {
        const policies = yield* Effect.forEach(steps, policyOf)
        const policyByKey = new Map(steps.map((s, i) => [s.key, policies[i]!]))
        const ordered = yield* Effect.try({ try: () => Flow.order(steps), catch: (e) => e as InvalidFlowError })
        // Ids drawn first, as in Postgres: a step names its peers by id.
        const ids = new Map(ordered.map((s) => [s.key, String(nextId++)]))
        for (const s of ordered)
          insertWaiting(
            s.step,
            policyByKey.get(s.key) ?? null,
            s.after.map((k) => ids.get(k)!),
            now,
            { id: ids.get(s.key)!, afterKeys: s.after }
          )
        return Object.fromEntries(ids)
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
        // Items whose executions keep ending without a result: that run is given up, recorded as an error. Those it
        // ends leave the queue together once all are logged, as in Postgres's one statement.
        const gone: Array<Row> = []
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
          if (r.item.maxRuns === 0) gone.push(r)
        }
        if (gone.length > 0)
          removeRows(
            gone.map((r) => [r, "error"] as const),
            now
          )
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
    pendingCount: () => Effect.sync(() => rows.length + waiting.length),
    // Counting costs nothing here: always exact (what the Postgres store answers, short of its estimate).
    depth: () => Effect.map(store.pendingCount(), (count) => ({ count, exact: true })),
    cancel: (itemId) =>
      Effect.sync(() => {
        const i = rows.findIndex((r) => r.item.id === itemId)
        if (i < 0) {
          // A waiting item: gone unrun, and what waits for it will not run either.
          const w = waiting.find((x) => x.id === itemId)
          if (w === undefined) return Option.none()
          waiting.splice(waiting.indexOf(w), 1)
          const waiters = waitersOf(itemId)
          if (waiters.length > 0) doom(waiters, itemId, "was cancelled", w.createdAt)
          return Option.some("pending" as const)
        }
        const row = rows[i]!
        // Its leases go with it, as ON DELETE CASCADE does: a result still in flight is refused.
        for (let j = leases.length - 1; j >= 0; j--) if (leases[j]!.itemId === itemId) leases.splice(j, 1)
        removeRows([[row, "cancelled"]], row.item.updatedAt)
        return Option.some(row.inFlight > 0 ? ("processing" as const) : ("pending" as const))
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
