/**
 * Ad-hoc work waiting in `queue_items`, and the rules that normalise what any writer (API, CLI, SQL) stores.
 */
import * as Schema from "effect/Schema"
import { normalizeGroup, threadFor } from "./Limits.js"

/** `pending` waits to be claimed; `processing` has at least one live execution. */
export const QueueStatus = Schema.Literal("pending", "processing")
/** @see QueueStatus */
export type QueueStatus = typeof QueueStatus.Type

/** `0`: executions of one task type run one at a time, cluster-wide. `1`: they may run side by side. */
export const Thread = Schema.Literal(0, 1)
/** @see Thread */
export type Thread = typeof Thread.Type

/** A row of `queue_items`. */
export const QueueItem = Schema.Struct({
  id: Schema.String,
  taskType: Schema.String,
  /** The stored text as it is; `null` when the row holds NULL (an INSERT that left it out). */
  payload: Schema.NullOr(Schema.String),
  status: QueueStatus,
  /** Higher runs first; equal priorities run in insertion order. */
  priority: Schema.Int,
  /** Runs left: `N` more times, or `-1` forever. */
  maxRuns: Schema.Int,
  thread: Thread,
  /**
   * The item may not start before this (`runAfter` at enqueue delays it); `null`: at once. A forever-repeating item
   * waits a poll interval after each start.
   */
  runAfter: Schema.NullOr(Schema.DateFromSelf),
  /** While this item is queued, enqueueing another with the same key returns this one instead; `null`: no key. */
  uniqueKey: Schema.NullOr(Schema.String),
  /**
   * Its group (`group` at enqueue, column `group_key`), which its task type's limits per group count; `null`: none.
   */
  group: Schema.NullOr(Schema.String),
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
})
/** @see QueueItem */
export interface QueueItem extends Schema.Schema.Type<typeof QueueItem> {}

/** Runs forever. */
export const FOREVER = -1

/**
 * Executions of one item that may end without a result (their worker died, froze or was exited by its own handler,
 * so the lease expired) before kairos gives up on that run: the next rescue records it as an error saying why, and
 * it counts as one of the item's runs. A handler that kills its process cannot make an item run for ever.
 */
export const MAX_UNFINISHED = 5

/** The error recorded for a run given up after `MAX_UNFINISHED` executions that never finished. */
export const gaveUpMessage = (unfinished: number): string =>
  `gave up: ${unfinished} executions never finished (each time the worker died, froze or exited before recording a ` +
  "result, and the lease expired); a handler that exits or blocks its process?"

/** `1` once, `N` N times, `-1` forever; anything else (`0`, below `-1`, not an integer) counts as once. */
export const normalizeMaxRuns = (maxRuns: number | null | undefined): number =>
  typeof maxRuns === "number" && Number.isInteger(maxRuns) && (maxRuns === FOREVER || maxRuns >= 1) ? maxRuns : 1

/** `1` is concurrent; anything else is sequential (`0`). */
export const normalizeThread = (thread: number | null | undefined): Thread => (thread === 1 ? 1 : 0)

/** A payload as `enqueue` stores it: the text given, NULL for `null`, `""` when absent. */
export const normalizePayload = (payload: string | null | undefined): string | null =>
  payload === undefined ? "" : payload

/** A priority as stored: an integer, `0` when absent or not an integer. */
export const normalizePriority = (priority: number | null | undefined): number =>
  typeof priority === "number" && Number.isSafeInteger(priority) ? priority : 0

/** A unique key as stored: the text given, NULL when absent or empty (an empty key would make every keyless-by-mistake enqueue collide). */
export const normalizeUniqueKey = (key: string | null | undefined): string | null =>
  typeof key === "string" && key.length > 0 ? key : null

/** A delay as stored: a valid time, NULL (at once) when absent. */
export const normalizeRunAfter = (runAfter: Date | null | undefined): Date | null =>
  runAfter instanceof Date && Number.isFinite(runAfter.getTime()) ? runAfter : null

/** What an enqueue gives a new item: the fields its returned item shows. */
export interface NewItemInput {
  readonly taskType: string
  readonly payload?: string | null | undefined
  readonly priority?: number | undefined
  readonly maxRuns?: number | undefined
  readonly thread?: number | undefined
  readonly runAfter?: Date | undefined
  readonly group?: string | undefined
}

/**
 * A new item as an enqueue returns it, whichever store wrote it: pending, its fields normalised as stored, and the
 * thread any item of its group gets.
 */
export const pendingItem = (
  id: string,
  input: NewItemInput,
  uniqueKey: string | null,
  createdAt: Date,
  updatedAt: Date = createdAt
): QueueItem => {
  const group = normalizeGroup(input.group)
  return {
    id,
    taskType: input.taskType,
    payload: normalizePayload(input.payload),
    status: "pending",
    priority: normalizePriority(input.priority),
    maxRuns: normalizeMaxRuns(input.maxRuns),
    thread: normalizeThread(threadFor(input.thread, group)),
    runAfter: normalizeRunAfter(input.runAfter),
    uniqueKey,
    group,
    createdAt,
    updatedAt
  }
}
