/**
 * The in-database queue: `queue_items`, the insert-only `processed_items` log and per-execution leases. The pause
 * switch (`Semaphore`), the live workers (`WorkerRegistry`) and wake-ups (`WakeUps`) are ports of their own.
 */
import type { PruneBatch } from "../domain/Retention.js"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { QueueItem } from "../domain/QueueItem.js"
import type { InvalidFlowError, InvalidRetryError } from "../domain/errors.js"
import type * as Retry from "../domain/Retry.js"
import type { Transact } from "./Transaction.js"

/** Up to how many queued items `QueueStore.depth` counts exactly. */
export const EXACT_DEPTH_UP_TO = 10_000

/** The queue's depth as `QueueStore.depth` reads it. */
export interface QueueDepth {
  /** Items pending or processing: exact when `exact`, else an estimate above `EXACT_DEPTH_UP_TO`. */
  readonly count: number
  readonly exact: boolean
}

/** A QueueStore failure. */
export class QueueStoreError extends Data.TaggedError("QueueStoreError")<{
  readonly reason: "Unavailable" | "Decode" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** What `enqueue` stores; `maxRuns`, `thread` and `priority` are normalised as the contract says. */
export interface EnqueueInput {
  readonly taskType: string
  /** Absent: `""`. `null` stores NULL, as an INSERT that leaves the column out does. */
  readonly payload?: string | null | undefined
  readonly priority?: number | undefined
  readonly maxRuns?: number | undefined
  readonly thread?: number | undefined
  /** The item is not claimed before this time. Absent (or an invalid Date): at once. */
  readonly runAfter?: Date | undefined
  /**
   * While an item with this key is pending or processing, enqueueing another returns that item (its id) and inserts
   * nothing. Absent or empty: no key.
   */
  readonly uniqueKey?: string | undefined
  /**
   * This item's own retry policy; it wins over its task type's. Absent: the task type's (see `recordResults`), and
   * without one the item is attempted once per run.
   */
  readonly retry?: Retry.Input | undefined
  /**
   * The item's group (column `group_key`) under its task type's flow limits (see domain/Limits): a limit per group
   * bounds each group's executions, and 1 per group runs a group's items one at a time, in queue order. Absent or
   * empty: no group.
   */
  readonly group?: string | undefined
  /**
   * Ids of items this one waits for: it is not claimed before each of them finished successfully (one that already
   * did counts as done). Should one fail for good or be cancelled, this item never runs: it is recorded once as an
   * error naming that item, and so is whatever waits for it. An id kairos has no trace of (not queued, not waiting,
   * no execution logged: never enqueued, cancelled before it ran, or its log pruned) refuses the item
   * (`InvalidFlowError`). Not with `uniqueKey`. Its handler reads their outputs as `job.inputs[id]`.
   */
  readonly after?: ReadonlyArray<string> | undefined
}

/**
 * One step of a flow (`enqueueFlow`): an item, named by `key`, that waits for the steps its `after` names (by key).
 * Its handler reads their outputs as `job.inputs[key]`.
 */
export interface FlowStepInput extends Omit<EnqueueInput, "after" | "uniqueKey"> {
  readonly key: string
  readonly after?: ReadonlyArray<string> | undefined
}

/**
 * A finished execution to record, with the retry policy of its task type (`Retry.none` when absent). The item's own
 * policy, when it has one, wins.
 */
export interface RecordInput {
  readonly claim: QueueClaim
  readonly result: ExecutionResult
  readonly retry?: Retry.Policy | undefined
}

/** What `claimBatch` takes. */
export interface ClaimOptions {
  readonly limit: number
  readonly taskTypes: ReadonlyArray<string>
  readonly owner: string
  readonly leaseUntil: Date
  readonly now: Date
  /** A forever-repeating item claimed now may not start again before this (the next poll interval). */
  readonly repeatAfter: Date
  /**
   * The task types among `taskTypes` that have flow limits (see ports/Limits), as the caller last read them: their
   * executions are claimed under the limits as they are now (none left: as plain). A type not named here is claimed
   * plainly only while it has no limits: one the caller does not know to be limited yet is left alone. Absent: none.
   */
  readonly limited?: ReadonlyArray<string> | undefined
}

/** One claimed execution of an item, fenced by its lease token. */
export interface QueueClaim {
  readonly item: QueueItem
  /** Executions of the item finished before this one was claimed. */
  readonly runsDone: number
  /** This execution's number among the item's executions (1 for the first); concurrent ones differ. */
  readonly attempt: number
  readonly leaseId: string
  readonly token: string
  /**
   * For an item that waited for others: their outputs (JSON values), keyed by step key (a flow's) or by id; `null`
   * for one whose handler returned nothing. Absent for every other item.
   */
  readonly inputs?: Readonly<Record<string, unknown>> | undefined
}

/** How one execution ended: `error` set when it failed. */
export interface ExecutionResult {
  readonly startedAt: Date
  readonly finishedAt: Date
  readonly error?: string | undefined
  /** A success's output as JSON text (`Result.encodeOutput`); absent when the handler returned nothing. */
  readonly output?: string | undefined
}

/** How long an execution took, as its log row records it (never negative, whatever the clocks did). */
export const durationMs = (result: ExecutionResult): number =>
  Math.max(0, result.finishedAt.getTime() - result.startedAt.getTime())

/** What `vacuum` takes. */
export interface VacuumRequest {
  /** The instance asking: it holds the schema's vacuum lease while it vacuums. */
  readonly owner: string
  readonly now: Date
  /** A table is vacuumed once its store counts more dead rows than this. */
  readonly deadRows: number
  /** How long the lease is held at most (a vacuum that has not ended by then is taken to have died with its owner). */
  readonly leaseMs: number
  /**
   * How long after a vacuum ends the next may start, whatever the dead rows (the counts lag behind): at least
   * `gapMs`, and at least `gapFactor` times as long as that vacuum took (a long queue's vacuum reads all its indexes:
   * with 4, vacuuming takes at most a fifth of the time, however long the queue).
   */
  readonly gapMs: number
  readonly gapFactor: number
}

/** A table a `vacuum` call vacuumed: the dead rows it had, and how long the vacuum took. */
export interface Vacuumed {
  readonly table: string
  readonly deadRows: number
  readonly ms: number
}

/**
 * What a `vacuum` call did. `Clean`: no table had more dead rows than asked (the store has none: memory); `Busy`:
 * another instance vacuums, or one did less than `gapMs` ago; `Vacuumed`: these tables; `NotPermitted`: this role may
 * not vacuum them (not their owner), `reason` saying so in a sentence.
 */
export type VacuumOutcome =
  | { readonly _tag: "Clean"; readonly deadRows: number }
  | { readonly _tag: "Busy" }
  | { readonly _tag: "Vacuumed"; readonly tables: ReadonlyArray<Vacuumed> }
  | { readonly _tag: "NotPermitted"; readonly reason: string }

/** The queue store. Every method that depends on time takes `now` from the Clock port. */
export class QueueStore extends Context.Tag("kairos/QueueStore")<
  QueueStore,
  {
    /**
     * Adds an item, ready at once or at `input.runAfter`. `createdAt` is only its creation time (ties in priority run
     * oldest first); it does not delay the item. With a `uniqueKey` already queued, returns that item instead.
     */
    readonly enqueue: (
      input: EnqueueInput,
      createdAt: Date
    ) => Effect.Effect<QueueItem, QueueStoreError | InvalidRetryError | InvalidFlowError>
    /**
     * Adds many items in one statement, in order; returns their ids. `createdAt` as in `enqueue`. An input whose
     * `uniqueKey` is already queued, or appears earlier in the same batch (the first wins), inserts nothing and gets
     * the queued item's id.
     */
    readonly enqueueMany: (
      inputs: ReadonlyArray<EnqueueInput>,
      createdAt: Date
    ) => Effect.Effect<ReadonlyArray<string>, QueueStoreError | InvalidRetryError | InvalidFlowError>
    /**
     * Adds a whole flow in one transaction: each step an item waiting for the steps its `after` names. Returns the
     * ids by step key. A cycle, a key used twice, an `after` key no step has, or a bad retry policy refuses the flow
     * and nothing is inserted.
     */
    readonly enqueueFlow: (
      steps: ReadonlyArray<FlowStepInput>,
      createdAt: Date
    ) => Effect.Effect<Readonly<Record<string, string>>, QueueStoreError | InvalidRetryError | InvalidFlowError>
    /**
     * Claims up to `limit` executions of the given task types, highest priority first, then oldest: at most one
     * sequential (`thread = 0`) execution per task type cluster-wide; a concurrent item may run several of its
     * remaining repetitions at once.
     */
    readonly claimBatch: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<QueueClaim>, QueueStoreError>
    /**
     * Extends many executions' leases in one go; returns, in order, whether each still held its lease (false: lost).
     * Per execution, not per lease id: a run-once item's executions all hold their lease on its row, under one id, so
     * an execution that lost it and a later one of the same item are told apart by their tokens.
     */
    readonly renewLeases: (
      claims: ReadonlyArray<QueueClaim>,
      leaseUntil: Date,
      now: Date
    ) => Effect.Effect<ReadonlyArray<boolean>, QueueStoreError>
    /**
     * Records finished executions, each fenced by its own lease token: its `processed_items` row, and the item
     * deleted (runs exhausted) or pending again. A failure with an attempt left under the item's retry policy (see
     * `Retry.settle`) uses up no run: the item waits its backoff (`run_after`), then runs again. One round of
     * statements for the whole batch. Returns, in order, whether each was recorded (false, and nothing written,
     * when its lease was lost).
     */
    readonly recordResults: (
      results: ReadonlyArray<RecordInput>
    ) => Effect.Effect<ReadonlyArray<boolean>, QueueStoreError>
    /**
     * `recordResults`, then `claimBatch` with a fresh look, in one round trip: a sequential execution's result and
     * the claim of its type's next item go together, so a chain of sequential items costs one statement per item.
     */
    readonly recordAndClaim: (
      results: ReadonlyArray<RecordInput>,
      claim: ClaimOptions
    ) => Effect.Effect<
      { readonly recorded: ReadonlyArray<boolean>; readonly claims: ReadonlyArray<QueueClaim> },
      QueueStoreError
    >
    /**
     * A transactional execution (see Transaction): `run` inside one transaction of the store's database, then the
     * record `record` makes of its value (its `processed_items` row, the item deleted or pending again) in that same
     * transaction, fenced by the execution's lease token as `recordResults` is.
     */
    readonly transact: Transact<RecordInput, QueueStoreError>
    /** Takes back executions whose lease expired (and, with `owner`, that owner's own); returns how many. */
    readonly recoverStuck: (now: Date, owner?: string) => Effect.Effect<number, QueueStoreError>
    /**
     * Hands back executions claimed and never started (a runner stopping with work claimed ahead): each lease, fenced
     * by its token, is dropped and its item is claimable again at once, as an owner's own are at `recoverStuck`.
     * Nothing is recorded for them. Returns how many leases were still held.
     */
    readonly releaseLeases: (claims: ReadonlyArray<QueueClaim>, now: Date) => Effect.Effect<number, QueueStoreError>
    /**
     * When the earliest lease held by another owner expires, if any: an idle runner wakes then, so work whose owner
     * died is taken back at once, not a poll later.
     */
    readonly nextLeaseExpiry: (exceptOwner: string) => Effect.Effect<Option.Option<Date>, QueueStoreError>
    /**
     * The earliest `run_after` later than `now` among items of these task types, if any: an idle runner wakes then,
     * so a delayed item starts when it is due, not a poll later.
     */
    readonly nextRunAfter: (
      taskTypes: ReadonlyArray<string>,
      now: Date
    ) => Effect.Effect<Option.Option<Date>, QueueStoreError>
    /** Items pending or processing (waiting for others included), counted exactly: it reads every one of them. */
    readonly pendingCount: () => Effect.Effect<number, QueueStoreError>
    /**
     * The queue's depth as a monitor reads it (the CLI worker's status line, the queue-depth gauge): `pendingCount`
     * where the queue holds at most `EXACT_DEPTH_UP_TO` items, else the database's estimate, never below
     * `EXACT_DEPTH_UP_TO + 1` (`exact: false`), so that a reading costs the same whatever the backlog. Counting a million
     * queued items exactly costs Postgres ~0.3 s of CPU, and every worker reads its depth every few seconds.
     */
    readonly depth: () => Effect.Effect<QueueDepth, QueueStoreError>
    /**
     * Cancels an item: deletes it whether pending or processing, and returns the status it had; none when no item
     * has that id. A running execution of it finishes, but its result is refused (nothing is logged for it).
     */
    readonly cancel: (itemId: string) => Effect.Effect<Option.Option<"pending" | "processing">, QueueStoreError>
    /**
     * Enqueues again the item an execution ran: a new item with that execution's task type and payload (default
     * priority, one run, sequential), created at `createdAt`; none when no execution has that id.
     */
    readonly retryExecution: (
      processedId: string,
      createdAt: Date
    ) => Effect.Effect<Option.Option<QueueItem>, QueueStoreError>
    /**
     * Deletes one batch of the execution log under a retention policy (see domain/Retention), oldest first; returns
     * how many rows went. The only deletion the log allows; a batch with neither an age nor a count deletes nothing.
     */
    readonly pruneProcessed: (batch: PruneBatch) => Effect.Effect<number, QueueStoreError>
    /**
     * Removes the dead rows that executions leave in the queue's tables once there are more than
     * `request.deadRows` (a claim walks past every dead index entry of the items drained since the table's last
     * vacuum), by one instance at a time. A store without dead rows does nothing (`Clean`).
     */
    readonly vacuum: (request: VacuumRequest) => Effect.Effect<VacuumOutcome, QueueStoreError>
  }
>() {}
