/**
 * What a handler receives: one execution of a scheduled job's slot or of a queue item.
 */
import * as Schema from "effect/Schema"

/** Where an execution came from: a recurring `scheduled_jobs` row or a `queue_items` row. */
export const JobKind = Schema.Literal("scheduled", "queue")
/** @see JobKind */
export type JobKind = typeof JobKind.Type

/**
 * One execution handed to a handler.
 *
 * `payload` is the stored text as it is (usually JSON); parsing it is the handler's business, and a payload the
 * handler cannot parse is the handler's error.
 */
export class Job extends Schema.Class<Job>("Job")({
  /** The id of the `scheduled_jobs` row or of the `queue_items` row. */
  id: Schema.String,
  /** Whether this is a scheduled job's slot or a queue item. */
  kind: JobKind,
  /** The scheduled job's unique name; for a queue item, its task type. */
  name: Schema.String,
  /** Selects the handler. */
  taskType: Schema.String,
  /** The stored payload text (empty when the row holds NULL). */
  payload: Schema.String,
  /** The slot this execution is for (scheduled jobs) or the time the item was enqueued (queue items). */
  scheduledFor: Schema.DateFromSelf,
  /** 1 for the first attempt at a slot, 2 for its first retry, …; for queue items, the repetition number. */
  attempt: Schema.Int,
  /** Anything else the source knows (run id, priority, thread, …). */
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  /**
   * For a queue item that waited for others (`after`, or a flow's step): what their handlers returned (JSON values),
   * keyed by step key in a flow, by item id otherwise; `null` for one that returned nothing. Empty for everything else.
   */
  inputs: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) }),
  /**
   * A queue item's group (`group` at enqueue, column `group_key`), which its task type's limits per group count;
   * `null` for an item without one and for scheduled jobs.
   */
  group: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null })
}) {}

/**
 * A `Job` of fields the runner already holds valid: what `new Job(fields, { disableValidation: true })` builds (the
 * same prototype and own fields; `inputs` and `group`, the fields with a default, must be given), without the constructor's
 * copy of its input and pass over the schema's fields. One is made per execution, on the runner's hot path.
 */
export const unsafeMakeJob = (
  fields: ConstructorParameters<typeof Job>[0] & { readonly inputs: Job["inputs"]; readonly group: Job["group"] }
): Job => Object.assign(Object.create(Job.prototype) as Job, fields)
