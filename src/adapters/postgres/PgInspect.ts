/**
 * Read models of kairos's tables for people and tools (the `kairos queue`, `processed`, `jobs`, `runs`, `workers` and
 * `stats` commands, and the figures the dashboard shares with them: queue depth, live workers, the database's time),
 * and `truncate`. Each query is written here once; `PgDashboard` adds the dashboard's paged reads on top. Every row is decoded through Schema into a camelCase read model; a stored schedule that
 * does not decode is listed as invalid rather than failing the read.
 *
 * Also the one rule for "is this worker live" (`liveWorker`), which every query about live workers uses.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment } from "@effect/sql/Statement"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { ProcessedItem } from "../../domain/ProcessedItem.js"
import { QueueStatus } from "../../domain/QueueItem.js"
import * as Schedule from "../../domain/Schedule.js"
import { RunStatus } from "../../domain/ScheduledJob.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

/** Reading kairos's tables failed. `cause` is the `SqlError` (its own `cause` carries Postgres's `code`) or the `ParseError`. */
export class InspectError extends Data.TaggedError("InspectError")<{
  /**
   * `NotMigrated`: a table or column is missing (run `kairos migrate`); `Unavailable`: the database refused or could
   * not be reached; `Decode`: a row did not have the expected shape.
   */
  readonly reason: "NotMigrated" | "Unavailable" | "Decode"
  readonly message: string
  readonly cause: SqlError | ParseResult.ParseError
}> {}

// ---------------------------------------------------------------------------------------------------------------
// Liveness

/**
 * The one rule for "this worker is live", as a SQL condition on the `scheduler_workers` row aliased `alias`: its
 * `live_until` (which the worker sets from its own heartbeat interval) lies ahead of `now`, or of the database's
 * `now()` when `now` is not given. Use it wherever live workers matter:
 *
 * ```ts
 * sql`SELECT id FROM ${sql(table(schema, "scheduler_workers"))} w WHERE ${liveWorker(sql, "w")}`
 * ```
 */
export const liveWorker = (sql: SqlClient.SqlClient, alias: string, now?: Date): Fragment =>
  now === undefined ? sql`${sql(alias)}.live_until > now()` : sql`${sql(alias)}.live_until > ${now}`

/**
 * A SQL boolean: some live worker (by `liveWorker`) lists `taskType` (a SQL expression such as `` sql`i.task_type` ``)
 * among its task types.
 */
export const handledByLiveWorker = (
  sql: SqlClient.SqlClient,
  schema: string,
  taskType: Fragment,
  now?: Date
): Fragment =>
  sql`EXISTS (SELECT 1 FROM ${sql(table(schema, "scheduler_workers"))} live_worker
              WHERE ${liveWorker(sql, "live_worker", now)} AND ${taskType} = ANY(live_worker.task_types))`

// ---------------------------------------------------------------------------------------------------------------
// Read models: each a Schema from the selected row (snake_case columns) to readonly camelCase fields.

const QueueRow = Schema.Struct({
  id: Schema.String,
  taskType: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("task_type")),
  status: QueueStatus,
  priority: Schema.Int,
  runsLeft: Schema.propertySignature(Schema.Int).pipe(Schema.fromKey("runs_left")),
  thread: Schema.Int,
  createdAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("created_at")),
  /** Not started before this; `null`: at once. */
  runAfter: Schema.propertySignature(Schema.NullOr(Schema.DateFromSelf)).pipe(Schema.fromKey("run_after")),
  uniqueKey: Schema.propertySignature(Schema.NullOr(Schema.String)).pipe(Schema.fromKey("unique_key")),
  /** Failed attempts at the current run, each retried (see Retry.settle). */
  failures: Schema.Int,
  /** The item's own retry attempts; `null`: its task type's policy (the worker's), else no retry. */
  retryAttempts: Schema.propertySignature(Schema.NullOr(Schema.Int)).pipe(Schema.fromKey("retry_attempts")),
  handled: Schema.Boolean
})

/** A pending or processing queue item, as `kairos queue` lists it. */
export interface QueueEntry extends Schema.Schema.Type<typeof QueueRow> {
  /** Runs not yet completed (`max_runs`, which counts down as runs finish); `-1` when the item repeats forever. */
  readonly runsLeft: number
  /** Some live worker lists the item's task type; when none does, the item stays pending. */
  readonly handled: boolean
}

const ProcessedRow = Schema.Struct({
  id: Schema.String,
  queueItemId: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("queue_item_id")),
  taskType: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("task_type")),
  payload: Schema.NullOr(Schema.String),
  status: ProcessedItem.fields.status,
  errorMsg: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("error_msg")),
  startedAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("started_at")),
  finishedAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("finished_at")),
  durationMs: Schema.propertySignature(Schema.Int).pipe(Schema.fromKey("duration_ms")),
  createdAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("created_at"))
})

/** One finished execution, as `kairos processed` lists it: the domain's `ProcessedItem`. */
export type ProcessedEntry = ProcessedItem

const JobRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  taskType: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("task_type")),
  schedule: Schema.Unknown,
  enabled: Schema.Boolean,
  nextRunAt: Schema.propertySignature(Schema.NullOr(Schema.DateFromSelf)).pipe(Schema.fromKey("next_run_at")),
  handled: Schema.Boolean
})

/** The `schedule` column of a job: the JSON value as stored, and whether it decodes to a `Schedule`. */
export type StoredSchedule =
  | { readonly _tag: "Valid"; readonly stored: unknown; readonly schedule: Schedule.Schedule }
  | { readonly _tag: "Invalid"; readonly stored: unknown; readonly reason: string }

/** A scheduled job, as `kairos jobs` lists it. */
export interface JobEntry extends Omit<Schema.Schema.Type<typeof JobRow>, "schedule"> {
  readonly schedule: StoredSchedule
  /** Some live worker lists the job's task type; when none does, the job stays due and nothing runs it. */
  readonly handled: boolean
}

const RunRow = Schema.Struct({
  id: Schema.String,
  /** The job's name. */
  job: Schema.String,
  scheduledFor: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("scheduled_for")),
  attempt: Schema.Int,
  status: RunStatus,
  startedAt: Schema.propertySignature(Schema.NullOr(Schema.DateFromSelf)).pipe(Schema.fromKey("started_at")),
  finishedAt: Schema.propertySignature(Schema.NullOr(Schema.DateFromSelf)).pipe(Schema.fromKey("finished_at")),
  error: Schema.NullOr(Schema.String)
})

/** A run of a scheduled job, as `kairos runs` lists it (`job` is the job's name). */
export interface RunEntry extends Schema.Schema.Type<typeof RunRow> {}

const WorkerRow = Schema.Struct({
  id: Schema.String,
  taskTypes: Schema.propertySignature(Schema.Array(Schema.String)).pipe(Schema.fromKey("task_types")),
  startedAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("started_at")),
  heartbeatAt: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("heartbeat_at")),
  liveUntil: Schema.propertySignature(Schema.DateFromSelf).pipe(Schema.fromKey("live_until"))
})

/** A live worker (by `liveWorker`), as `kairos workers` lists it. */
export interface WorkerEntry extends Schema.Schema.Type<typeof WorkerRow> {}

const DepthRow = Schema.Struct({
  taskType: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("task_type")),
  pending: Schema.Int,
  processing: Schema.Int
})

/** Queue items of one task type by status. */
export interface Depth extends Schema.Schema.Type<typeof DepthRow> {}

const HourRow = Schema.Struct({
  taskType: Schema.propertySignature(Schema.String).pipe(Schema.fromKey("task_type")),
  ok: Schema.Int,
  error: Schema.Int,
  p50Ms: Schema.propertySignature(Schema.NullOr(Schema.Int)).pipe(Schema.fromKey("p50_ms")),
  maxMs: Schema.propertySignature(Schema.NullOr(Schema.Int)).pipe(Schema.fromKey("max_ms"))
})

/** Executions of one task type recorded in the last hour, by outcome, with their median and longest duration. */
export interface HourFigures extends Schema.Schema.Type<typeof HourRow> {}

const RunCountRow = Schema.Struct({ status: RunStatus, n: Schema.Int })

/** Job runs of one status: pending, running, or finished in the last hour. */
export interface RunCount extends Schema.Schema.Type<typeof RunCountRow> {}

/** What `make` builds: one Effect per read, plus `truncate`. */
export interface PgInspect {
  /** Pending and processing queue items, in claim order (priority, then queue order). */
  readonly queue: () => Effect.Effect<ReadonlyArray<QueueEntry>, InspectError>
  /** The last `n` executions, newest (highest id) first. */
  readonly processed: (n: number) => Effect.Effect<ReadonlyArray<ProcessedEntry>, InspectError>
  /** Scheduled jobs by name. A stored schedule that does not decode is listed as `Invalid`, not an error. */
  readonly jobs: () => Effect.Effect<ReadonlyArray<JobEntry>, InspectError>
  /** The last `n` job runs, newest (highest id) first. */
  readonly runs: (n: number) => Effect.Effect<ReadonlyArray<RunEntry>, InspectError>
  /** Live workers by id; at most `limit` of them (default: all). */
  readonly workers: (limit?: number) => Effect.Effect<ReadonlyArray<WorkerEntry>, InspectError>
  /** Queue items by task type and status, by task type; at most `limit` task types (default: all). */
  readonly depth: (limit?: number) => Effect.Effect<ReadonlyArray<Depth>, InspectError>
  /** Executions recorded in the last hour (by the database's clock), by task type. */
  readonly lastHour: () => Effect.Effect<ReadonlyArray<HourFigures>, InspectError>
  /** Job runs pending, running, or finished in the last hour, counted by status. */
  readonly runCounts: () => Effect.Effect<ReadonlyArray<RunCount>, InspectError>
  /** The database's time: what an operator's change is stamped with, and what "the last hour" is counted from. */
  readonly now: () => Effect.Effect<Date, InspectError>
  /**
   * Empties `queue_items` (with their leases, so results of executions in flight are refused), `processed_items`
   * and `job_runs`. Jobs, settings and workers stay.
   */
  readonly truncate: () => Effect.Effect<void, InspectError>
}

// ---------------------------------------------------------------------------------------------------------------

/** A stored `schedule` column as read: decoded, or invalid with the reason (never a failure). */
export const storedSchedule = (stored: unknown): StoredSchedule =>
  Either.match(Schedule.decode(stored), {
    onLeft: (e) => ({ _tag: "Invalid", stored, reason: e.message.replace(/^invalid stored schedule: /, "") }),
    onRight: (schedule) => ({ _tag: "Valid", stored, schedule })
  })

/** Postgres's error code (`42P01`, `ECONNREFUSED`, ...) under an `SqlError`, if any. */
const codeOf = (e: SqlError): string | undefined => {
  const code = (e.cause as { readonly code?: unknown } | null | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/** Maps a failed read to an `InspectError` whose message starts with `what`; shared by every read model module. */
export const toError =
  (what: string) =>
  (e: SqlError | ParseResult.ParseError): InspectError => {
    if (e._tag === "ParseError")
      return new InspectError({ reason: "Decode", message: `${what}: unexpected row: ${e.message}`, cause: e })
    const code = codeOf(e)
    const detail = (e.cause as { readonly message?: unknown } | null | undefined)?.message
    return new InspectError({
      // undefined_table, undefined_column: the schema is missing or older than this kairos.
      reason: code === "42P01" || code === "42703" ? "NotMigrated" : "Unavailable",
      message: `${what}: ${typeof detail === "string" && detail !== "" ? detail : e.message}`,
      cause: e
    })
  }

/** A LIMIT from a count typed by a person: whole, not negative, within Postgres's int range. */
const limitOf = (n: number): number => (Number.isNaN(n) ? 0 : Math.min(Math.max(0, Math.trunc(n)), 2_147_483_647))

/** Builds the inspection reads over the SqlClient in context (its transforms are not used). */
export const make = (options: PgOptions = {}): Effect.Effect<PgInspect, never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const items = sql(table(schema, "queue_items"))
    const leases = sql(table(schema, "queue_leases"))
    const processed = sql(table(schema, "processed_items"))
    const jobs = sql(table(schema, "scheduled_jobs"))
    const runs = sql(table(schema, "job_runs"))
    const workers = sql(table(schema, "scheduler_workers"))

    const queue = SqlSchema.findAll({
      Request: Schema.Void,
      Result: QueueRow,
      execute: () => sql`
        SELECT i.id::text AS id, i.task_type, i.status, i.priority,
               CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(i.max_runs, 0) END AS runs_left,
               i.thread, i.created_at, i.run_after, i.unique_key, i.failures, i.retry_attempts,
               ${handledByLiveWorker(sql, schema, sql`i.task_type`)} AS handled
        FROM ${items} i ORDER BY i.priority DESC, i.seq, i.id`
    })

    const recentProcessed = SqlSchema.findAll({
      Request: Schema.Number,
      Result: ProcessedRow,
      // Ordered by the bigint column (`p.id`), not by the text alias `id`, which would sort "9" after "10".
      execute: (limit) => sql`
        SELECT p.id::text AS id, p.queue_item_id::text AS queue_item_id, p.task_type, p.payload,
               p.status, coalesce(p.error_msg, '') AS error_msg, p.started_at, p.finished_at, p.duration_ms, p.created_at
        FROM ${processed} p ORDER BY p.id DESC LIMIT ${limit}`
    })

    const scheduledJobs = SqlSchema.findAll({
      Request: Schema.Void,
      Result: JobRow,
      execute: () => sql`
        SELECT j.id::text AS id, j.name, j.task_type, j.schedule, j.enabled, j.next_run_at,
               ${handledByLiveWorker(sql, schema, sql`j.task_type`)} AS handled
        FROM ${jobs} j ORDER BY j.name`
    })

    const recentRuns = SqlSchema.findAll({
      Request: Schema.Number,
      Result: RunRow,
      execute: (limit) => sql`
        SELECT r.id::text AS id, j.name AS job, r.scheduled_for, r.attempt, r.status, r.started_at, r.finished_at,
               r.error
        FROM ${runs} r JOIN ${jobs} j ON j.id = r.job_id
        ORDER BY r.id DESC LIMIT ${limit}`
    })

    const liveWorkers = SqlSchema.findAll({
      Request: Schema.Number,
      Result: WorkerRow,
      // A NULL written into task_types by hand names no task type.
      execute: (limit) => sql`
        SELECT w.id, array_remove(w.task_types, NULL) AS task_types, w.started_at, w.heartbeat_at, w.live_until
        FROM ${workers} w WHERE ${liveWorker(sql, "w")} ORDER BY w.id LIMIT ${limit}`
    })

    const depth = SqlSchema.findAll({
      Request: Schema.Number,
      Result: DepthRow,
      execute: (limit) => sql`
        SELECT task_type, count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'processing')::int AS processing
        FROM ${items} GROUP BY task_type ORDER BY task_type LIMIT ${limit}`
    })

    const lastHour = SqlSchema.findAll({
      Request: Schema.Void,
      Result: HourRow,
      execute: () => sql`
        SELECT task_type, count(*) FILTER (WHERE status = 'ok')::int AS ok, count(*) FILTER (WHERE status = 'error')::int AS error,
               (percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::int AS p50_ms, max(duration_ms)::int AS max_ms
        FROM ${processed} WHERE created_at > clock_timestamp() - interval '1 hour'
        GROUP BY task_type ORDER BY task_type`
    })

    const runCounts = SqlSchema.findAll({
      Request: Schema.Void,
      Result: RunCountRow,
      execute: () => sql`
        SELECT status, count(*)::int AS n FROM ${runs}
        WHERE status IN ('pending', 'running') OR finished_at > clock_timestamp() - interval '1 hour'
        GROUP BY status ORDER BY status`
    })

    return {
      queue: () => queue(undefined).pipe(Effect.mapError(toError("reading queue_items failed"))),
      processed: (n) => recentProcessed(limitOf(n)).pipe(Effect.mapError(toError("reading processed_items failed"))),
      jobs: () =>
        scheduledJobs(undefined).pipe(
          Effect.map((rows) => rows.map(({ schedule, ...row }) => ({ ...row, schedule: storedSchedule(schedule) }))),
          Effect.mapError(toError("reading scheduled_jobs failed"))
        ),
      runs: (n) => recentRuns(limitOf(n)).pipe(Effect.mapError(toError("reading job_runs failed"))),
      workers: (limit) =>
        liveWorkers(limitOf(limit ?? Infinity)).pipe(Effect.mapError(toError("reading scheduler_workers failed"))),
      depth: (limit) => depth(limitOf(limit ?? Infinity)).pipe(Effect.mapError(toError("reading queue_items failed"))),
      lastHour: () => lastHour(undefined).pipe(Effect.mapError(toError("reading processed_items failed"))),
      runCounts: () => runCounts(undefined).pipe(Effect.mapError(toError("reading job_runs failed"))),
      now: () =>
        sql<{ now: Date }>`SELECT clock_timestamp() AS now`.pipe(
          Effect.map((rows) => new Date(rows[0]?.now ?? Date.now())),
          Effect.mapError(toError("reading the database's time failed"))
        ),
      truncate: () =>
        sql`TRUNCATE ${items}, ${leases}, ${processed}, ${runs}`.pipe(
          Effect.asVoid,
          Effect.mapError(toError("truncating failed"))
        )
    } satisfies PgInspect
  })
