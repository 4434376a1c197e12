/**
 * One finished execution of a queue item, as recorded (insert-only) in `processed_items`.
 */
import * as Schema from "effect/Schema"

/** `ok` when the handler succeeded, `error` otherwise. */
export const ProcessedStatus = Schema.Literal("ok", "error")
/** @see ProcessedStatus */
export type ProcessedStatus = typeof ProcessedStatus.Type

/** A row of `processed_items`. */
export const ProcessedItem = Schema.Struct({
  id: Schema.String,
  queueItemId: Schema.String,
  taskType: Schema.String,
  /** The item's payload as it was claimed: `null` when the item held NULL. */
  payload: Schema.NullOr(Schema.String),
  status: ProcessedStatus,
  /** Empty when `status` is `ok`. */
  errorMsg: Schema.String,
  startedAt: Schema.DateFromSelf,
  finishedAt: Schema.DateFromSelf,
  durationMs: Schema.Int,
  createdAt: Schema.DateFromSelf,
  /** What a successful execution's handler returned, as a JSON value; absent or `null` when it returned nothing. */
  output: Schema.optional(Schema.Unknown)
})
/** @see ProcessedItem */
export interface ProcessedItem extends Schema.Schema.Type<typeof ProcessedItem> {}
