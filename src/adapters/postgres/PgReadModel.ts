/**
 * The read model of kairos's tables: every read the CLI's listings (`kairos queue`, `processed`, `jobs`, `runs`,
 * `workers`), `kairos stats` and the dashboard make, each query written once here and parameterised by what its
 * callers differ in (a filter, what "newest" means, a page, how much of a long text comes back). Plus `truncate`.
 *
 * Every row is decoded through Schema into a camelCase read model; a stored schedule that does not decode is listed
 * as invalid rather than failing the read. The reads bound nothing beyond what one statement may return: a listing
 * asked for without a `limit` is whole (the CLI's are), and the dashboard passes its own bounds with every read.
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
import { ProcessedItem, ProcessedStatus } from "../../domain/ProcessedItem.js"
import { QueueStatus } from "../../domain/QueueItem.js"
import * as Schedule from "../../domain/Schedule.js"
import { RunStatus } from "../../domain/ScheduledJob.js"
import { isGreen, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import { cappedCount, type PgOptions, schemaName, table } from "./PgSchema.js"

/** Reading kairos's tables failed. `cause` is the `SqlError` (its own `cause` carries Postgres's `code`) or the `ParseError`. */
export class ReadModelError extends Data.TaggedError("ReadModelError")<{
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

const from = <S extends Schema.Schema.Any, K extends string>(schema: S, key: K) =>
  Schema.propertySignature(schema).pipe(Schema.fromKey(key))
const Time = Schema.DateFromSelf
const NullTime = Schema.NullOr(Schema.DateFromSelf)

// The field order is the order of the CLI's JSON keys (it drops the fields it does not print, keeping the rest).
const ItemRow = Schema.Struct({
  id: Schema.String,
  taskType: from(Schema.String, "task_type"),
  /** Cut to the read's `cut` characters when it asked for that. */
  payload: Schema.NullOr(Schema.String),
  status: QueueStatus,
  priority: Schema.Int,
  /** Runs not yet completed (`max_runs`, which counts down as runs finish); `-1` when the item repeats forever. */
  runsLeft: from(Schema.Int, "runs_left"),
  runsDone: from(Schema.Int, "runs_done"),
  thread: Schema.Int,
  createdAt: from(Time, "created_at"),
  /** Not started before this; `null`: at once. */
  runAfter: from(NullTime, "run_after"),
  uniqueKey: from(Schema.NullOr(Schema.String), "unique_key"),
  /** Failed attempts at the current run, each retried (see Retry.settle). */
  failures: Schema.Int,
  /** The item's own retry attempts; `null`: its task type's policy (the worker's), else no retry. */
  retryAttempts: from(Schema.NullOr(Schema.Int), "retry_attempts"),
  /** Some live worker lists the item's task type; when none does, the item stays pending. */
  handled: Schema.Boolean,
  /** The item's group, for its task type's limits per group (migration 0021); `null`: none. */
  groupKey: from(Schema.NullOr(Schema.String), "group_key")
})
/** A queue item (pending or processing). */
export interface Item extends Schema.Schema.Type<typeof ItemRow> {}

const WaitingRow = Schema.Struct({
  id: Schema.String,
  taskType: from(Schema.String, "task_type"),
  /** The ids it waits for (all of them, those already finished too). */
  after: Schema.Array(Schema.String),
  /** How many of them have not finished yet. */
  waitingOn: from(Schema.Int, "waiting_on"),
  createdAt: from(Time, "created_at"),
  /** Its step key, when a flow enqueued it; `null`: none. */
  stepKey: from(Schema.NullOr(Schema.String), "step_key"),
  /** Its group (kept when it is released, migration 0022); `null`: none. */
  groupKey: from(Schema.NullOr(Schema.String), "group_key")
})
/** An item waiting for other items (a row of `queue_waiting`, migration 0020). */
export interface Waiting extends Schema.Schema.Type<typeof WaitingRow> {}

const ExecutionRow = Schema.Struct({
  id: Schema.String,
  queueItemId: from(Schema.String, "queue_item_id"),
  taskType: from(Schema.String, "task_type"),
  /** Cut to the read's `cut` characters when it asked for that. */
  payload: Schema.NullOr(Schema.String),
  status: ProcessedStatus,
  /** Empty when `status` is `ok`; cut like the payload. */
  errorMsg: from(Schema.String, "error_msg"),
  startedAt: from(Time, "started_at"),
  finishedAt: from(Time, "finished_at"),
  durationMs: from(Schema.Int, "duration_ms"),
  createdAt: from(Time, "created_at"),
  /** What the handler returned (a JSON value); `null` when nothing. */
  output: Schema.Unknown
})
const FlowStepRow = Schema.Struct({
  id: Schema.String,
  /** How many links of the flow away from the item asked for (either way): the walk keeps the nearest. */
  distance: Schema.Int,
  taskType: from(Schema.NullOr(Schema.String), "task_type"),
  stepKey: from(Schema.NullOr(Schema.String), "step_key"),
  /**
   * `waiting` (in queue_waiting), `queued` / `running` (in queue_items), else its latest execution's status (`ok`,
   * `error`, or `not run` for an error a failure upstream recorded), `cancelled` (a step that left the queue with
   * nothing logged: cancelled or deleted by hand), or `gone` (nothing of it left in the log: pruned, or an item that
   * no step records and that was cancelled).
   */
  state: Schema.Literal("waiting", "queued", "running", "ok", "error", "not run", "cancelled", "gone"),
  /** What it waits or waited for, by id (kept in `flow_steps` from the moment it was enqueued, migration 0023). */
  after: Schema.Array(Schema.String)
})
/** One step of a flow, as `flow` reads it. */
export interface FlowNode extends Schema.Schema.Type<typeof FlowStepRow> {
  /**
   * Its column when the flow is drawn: 0 the item asked for, below 0 before it, above 0 after it. A step's column is
   * one more than the furthest of those it waited for among the steps read (0 for a step that waited for none).
   */
  readonly depth: number
}

/**
 * The steps' columns: a step lies one after the furthest of those it waited for (the longest path to it among the
 * steps read), counted from the item asked for. (`after` never makes a cycle: an item names only items that exist
 * before it; a step already being placed counts as 0, so even a hand-made cycle ends.)
 */
const flowDepths = (id: string, steps: ReadonlyArray<Schema.Schema.Type<typeof FlowStepRow>>) => {
  const byId = new Map(steps.map((step) => [step.id, step]))
  const levels = new Map<string, number>()
  const levelOf = (stepId: string): number => {
    const known = levels.get(stepId)
    if (known !== undefined) return known
    levels.set(stepId, 0)
    let level = 0
    for (const before of byId.get(stepId)?.after ?? [])
      if (byId.has(before)) level = Math.max(level, levelOf(before) + 1)
    levels.set(stepId, level)
    return level
  }
  const origin = byId.has(id) ? levelOf(id) : 0
  return steps
    .map((step): FlowNode => ({ ...step, depth: levelOf(step.id) - origin }))
    .sort((a, b) => a.depth - b.depth || Number(BigInt(a.id) - BigInt(b.id)))
}

const HoldingRow = Schema.Struct({ taskType: from(Schema.String, "task_type"), running: Schema.Int })
/** How many executions of a task type hold a live lease now: what its concurrency limit counts. */
export interface Holding extends Schema.Schema.Type<typeof HoldingRow> {}

/** One finished execution (a `processed_items` row): the domain's `ProcessedItem`. */
export type Execution = ProcessedItem

const JobRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  taskType: from(Schema.String, "task_type"),
  /** Cut to the read's `cut` characters when it asked for that. */
  payload: Schema.NullOr(Schema.String),
  schedule: Schema.Unknown,
  enabled: Schema.Boolean,
  nextRunAt: from(NullTime, "next_run_at"),
  /** Some live worker lists the job's task type; when none does, the job stays due and nothing runs it. */
  handled: Schema.Boolean
})

/** The `schedule` column of a job: the JSON value as stored, and whether it decodes to a `Schedule`. */
export type StoredSchedule =
  | { readonly _tag: "Valid"; readonly stored: unknown; readonly schedule: Schedule.Schedule }
  | { readonly _tag: "Invalid"; readonly stored: unknown; readonly reason: string }

const RunRow = Schema.Struct({
  id: Schema.String,
  jobId: from(Schema.String, "job_id"),
  /** The job's name. */
  job: Schema.String,
  scheduledFor: from(Time, "scheduled_for"),
  attempt: Schema.Int,
  status: RunStatus,
  startedAt: from(NullTime, "started_at"),
  finishedAt: from(NullTime, "finished_at"),
  /** Cut to the read's `cut` characters when it asked for that. */
  error: Schema.NullOr(Schema.String)
})
/** A run of a scheduled job, with the job's id and name. */
export interface Run extends Schema.Schema.Type<typeof RunRow> {}

/** A scheduled job, with its last runs when the read asked for them (newest slot first). */
export interface Job extends Omit<Schema.Schema.Type<typeof JobRow>, "schedule"> {
  readonly schedule: StoredSchedule
  readonly lastRuns: ReadonlyArray<Run>
}

const WorkerRow = Schema.Struct({
  id: Schema.String,
  taskTypes: from(Schema.Array(Schema.String), "task_types"),
  startedAt: from(Time, "started_at"),
  heartbeatAt: from(Time, "heartbeat_at"),
  liveUntil: from(Time, "live_until")
})
/** A live worker (by `liveWorker`). */
export interface Worker extends Schema.Schema.Type<typeof WorkerRow> {}

const DepthRow = Schema.Struct({
  taskType: from(Schema.String, "task_type"),
  pending: Schema.Int,
  processing: Schema.Int
})
/** Queue items of one task type by status. */
export interface Depth extends Schema.Schema.Type<typeof DepthRow> {}

const HourRow = Schema.Struct({
  taskType: from(Schema.String, "task_type"),
  ok: Schema.Int,
  error: Schema.Int,
  p50Ms: from(Schema.NullOr(Schema.Int), "p50_ms"),
  maxMs: from(Schema.NullOr(Schema.Int), "max_ms")
})
/** Executions of one task type recorded in the last hour, by outcome, with their median and longest duration. */
export interface HourFigures extends Schema.Schema.Type<typeof HourRow> {}

const MinuteRow = Schema.Struct({ minute: Time, ok: Schema.Int, error: Schema.Int })
/** Executions recorded in one minute, by outcome. */
export interface Minute extends Schema.Schema.Type<typeof MinuteRow> {}

const RunCountRow = Schema.Struct({ status: RunStatus, n: Schema.Int })
/** Job runs of one status: pending, running, or finished in the last hour. */
export interface RunCount extends Schema.Schema.Type<typeof RunCountRow> {}

/** The dashboard's overview: its figures, read at one time. */
export interface Overview {
  /** The database's time when read: every relative time and the chart's axis use it. */
  readonly now: Date
  readonly paused: boolean
  readonly depth: ReadonlyArray<Depth>
  /** Minutes of the last hour that recorded executions, oldest first (empty minutes are absent). */
  readonly minutes: ReadonlyArray<Minute>
  readonly workers: ReadonlyArray<Worker>
}

// ---------------------------------------------------------------------------------------------------------------
// What a read asks for

/** How much of a listing a read returns. */
export interface Window {
  /** At most this many rows (default: all). */
  readonly limit?: number | undefined
  /** Long text columns (payloads, error messages) cut to this many characters (default: whole). */
  readonly cut?: number | undefined
}

/** A page of a listing: a window that starts `offset` rows in. */
export interface Paging extends Window {
  readonly offset?: number | undefined
}

/** Which queue items, in claim order (priority, then queue order). Absent fields do not filter. */
export interface ItemQuery extends Paging {
  readonly id?: string | undefined
  readonly taskType?: string | undefined
  readonly status?: QueueStatus | undefined
  readonly priority?: number | undefined
  /** Items whose `run_after` is at or after this (items without one do not match). */
  readonly runAfterFrom?: Date | undefined
  /** Items whose `run_after` is before this (items without one do not match). */
  readonly runAfterTo?: Date | undefined
}

/**
 * Which executions, newest first. Absent fields do not filter. The log pages by a row's id (`before`, `after`), so a
 * deep page costs what the first one does.
 */
export interface ExecutionQuery extends Window {
  /**
   * What "newest" means. `recorded` (default): by when the result was recorded (`created_at`), then id; the
   * execution log's order, whose index keeps a time window cheap. `id`: by id alone, the order retention counts "the
   * newest N" in (and the one order among one item's executions).
   */
  readonly order?: "recorded" | "id" | undefined
  readonly status?: ProcessedStatus | undefined
  readonly taskType?: string | undefined
  readonly queueItemId?: string | undefined
  /** Recorded (`created_at`) at or after this. */
  readonly from?: Date | undefined
  /** Recorded before this. */
  readonly to?: Date | undefined
  /** Only executions older than this one (the next page). */
  readonly before?: string | undefined
  /** Only executions newer than this one (the previous page, still listed newest first). */
  readonly after?: string | undefined
}

/** Which scheduled jobs, by name. Absent fields do not filter. */
export interface JobQuery extends Window {
  readonly name?: string | undefined
  readonly id?: string | undefined
  /** How many of each job's last runs (newest slot first) come with it, their errors cut like the payload (default none). */
  readonly lastRuns?: number | undefined
}

/** Which job runs, newest first. */
export interface RunQuery extends Paging {
  /**
   * What "newest" means. `id` (default): the newest created (highest id) first, across jobs. `slot`: the latest slot
   * first (`scheduled_for`, then attempt), a job's history.
   */
  readonly order?: "id" | "slot" | undefined
  /** Only this job's runs. */
  readonly jobId?: string | undefined
}

/** A page of rows, and whether rows lie beyond it (always `false` for a read without a `limit`). */
export interface Page<A> {
  readonly rows: ReadonlyArray<A>
  readonly hasMore: boolean
}

/** What `make` builds: one Effect per read, plus `truncate`. Every read fails only with `ReadModelError`. */
export interface PgReadModel {
  /** Queue items matching the query, in claim order (priority, then queue order). */
  readonly items: (query: ItemQuery) => Effect.Effect<Page<Item>, ReadModelError>
  /** Executions matching the query, newest first (see `ExecutionQuery.order`). */
  readonly executions: (query: ExecutionQuery) => Effect.Effect<Page<Execution>, ReadModelError>
  /** Scheduled jobs matching the query, by name. A stored schedule that does not decode is `Invalid`, not an error. */
  readonly jobs: (query: JobQuery) => Effect.Effect<ReadonlyArray<Job>, ReadModelError>
  /** Job runs matching the query, newest first (see `RunQuery.order`). */
  readonly runs: (query: RunQuery) => Effect.Effect<Page<Run>, ReadModelError>
  /** Live workers by id; at most `limit` of them (default: all). */
  readonly workers: (limit?: number) => Effect.Effect<ReadonlyArray<Worker>, ReadModelError>
  /** Queue items by task type and status, by task type; at most `limit` task types (default: all). */
  readonly depth: (limit?: number) => Effect.Effect<ReadonlyArray<Depth>, ReadModelError>
  /** Executions recorded in the last hour (by the database's clock), by task type. */
  readonly lastHour: () => Effect.Effect<ReadonlyArray<HourFigures>, ReadModelError>
  /** Job runs pending, running, or finished in the last hour, counted by status. */
  readonly runCounts: () => Effect.Effect<ReadonlyArray<RunCount>, ReadModelError>
  /** The pause switch, queue depth, executions per minute of the last hour and live workers (`limit` rows each). */
  readonly overview: (limit?: number) => Effect.Effect<Overview, ReadModelError>
  /**
   * A short text that changes whenever something a listing shows changes (new or finished work, runs, jobs, the
   * switch, the live workers); cheap enough to poll every few seconds.
   */
  readonly signature: () => Effect.Effect<string, ReadModelError>
  /** The database's time: what an operator's change is stamped with, and what "the last hour" is counted from. */
  readonly now: () => Effect.Effect<Date, ReadModelError>
  /**
   * Empties `queue_items` (with their leases, so results of executions in flight are refused), `queue_waiting`,
   * `flow_steps`, `processed_items` and `job_runs`, and answers with those tables' names, in that order. Jobs,
   * limits, settings and workers stay.
   */
  readonly truncate: () => Effect.Effect<ReadonlyArray<string>, ReadModelError>
  /** Items waiting for other items, oldest first: in `queue_items` only once their wait is over. */
  readonly waiting: (limit?: number) => Effect.Effect<ReadonlyArray<Waiting>, ReadModelError>
  /** How many items wait for others (all of `waiting`, counted). */
  readonly waitingCount: () => Effect.Effect<number, ReadModelError>
  /**
   * The flow around an item: the steps linked to it by `after` either way (what it waited for, what waited for it,
   * their other links: the whole flow), each with its state and what it waited for, for the flow's life. At most
   * `limit` steps, the nearest (by links) kept, ordered by column. Flows enqueued before migration 0023 show only
   * what `queue_waiting` still holds.
   */
  readonly flow: (id: string, limit: number) => Effect.Effect<ReadonlyArray<FlowNode>, ReadModelError>
  /** How many executions of each of `taskTypes` hold a live lease now (types with none are left out). */
  readonly holding: (taskTypes: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Holding>, ReadModelError>
}

// ---------------------------------------------------------------------------------------------------------------

/** A stored `schedule` column as read: decoded, or invalid with the reason (never a failure). */
const storedSchedule = (stored: unknown): StoredSchedule =>
  Either.match(Schedule.decode(stored), {
    onLeft: (e) => ({ _tag: "Invalid", stored, reason: e.message.replace(/^invalid stored schedule: /, "") }),
    onRight: (schedule) => ({ _tag: "Valid", stored, schedule })
  })

/** Postgres's error code (`42P01`, `ECONNREFUSED`, ...) under an `SqlError`, if any. */
const codeOf = (e: SqlError): string | undefined => {
  const code = (e.cause as { readonly code?: unknown } | null | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/** Maps a failed read to a `ReadModelError` whose message starts with `what`. */
const toError =
  (what: string) =>
  (e: SqlError | ParseResult.ParseError): ReadModelError => {
    if (e._tag === "ParseError")
      return new ReadModelError({ reason: "Decode", message: `${what}: unexpected row: ${e.message}`, cause: e })
    const code = codeOf(e)
    const detail = (e.cause as { readonly message?: unknown } | null | undefined)?.message
    return new ReadModelError({
      // undefined_table, undefined_column: the schema is missing or older than this kairos.
      reason: code === "42P01" || code === "42703" ? "NotMigrated" : "Unavailable",
      message: `${what}: ${typeof detail === "string" && detail !== "" ? detail : e.message}`,
      cause: e
    })
  }

/** A count (a limit, an offset, a length) as SQL takes it: whole, not negative, within Postgres's int range. */
const countOf = (n: number): number => (Number.isNaN(n) ? 0 : Math.min(Math.max(0, Math.trunc(n)), 2_147_483_647))

/** The rows of a read with `limit` (which fetched one more row, to tell whether more lie beyond), as a page. */
const pageOf = <A>(rows: ReadonlyArray<A>, limit: number | undefined): Page<A> => {
  if (limit === undefined) return { rows, hasMore: false }
  const n = countOf(limit)
  return { rows: rows.slice(0, n), hasMore: rows.length > n }
}

/** Builds the reads over the SqlClient in context (its transforms are not used). */
export const make = (options: PgOptions = {}): Effect.Effect<PgReadModel, never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const items = sql(table(schema, "queue_items"))
    const leases = sql(table(schema, "queue_leases"))
    const processed = sql(table(schema, "processed_items"))
    const waitingTable = sql(table(schema, "queue_waiting"))
    const steps = sql(table(schema, "flow_steps"))
    const jobs = sql(table(schema, "scheduled_jobs"))
    const runs = sql(table(schema, "job_runs"))
    const workers = sql(table(schema, "scheduler_workers"))
    const meta = sql(table(schema, "scheduler_meta"))

    /** A text column, cut to `cut` characters when given. */
    const text = (column: Fragment, cut: number | undefined) =>
      cut === undefined ? column : sql`left(${column}, ${countOf(cut)})`
    /** LIMIT one more row than asked (to tell whether more lie beyond), or none (NULL) when no limit was asked. */
    const limitPlusOne = (limit: number | undefined) => (limit === undefined ? null : countOf(limit) + 1)

    const itemsPage = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<ItemQuery>,
      Result: ItemRow,
      execute: (q) => sql`
        SELECT i.id::text AS id, i.task_type, ${text(sql`i.payload`, q.cut)} AS payload, i.status, i.priority,
               CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(i.max_runs, 0) END AS runs_left, i.runs_done,
               i.thread, i.created_at, i.run_after,
               -- A released item's key only says it has inputs (migration 0020): not the user's.
               CASE WHEN i.unique_key LIKE 'kairos:after:%' THEN NULL ELSE i.unique_key END AS unique_key,
               i.failures, i.retry_attempts,
               ${handledByLiveWorker(sql, schema, sql`i.task_type`)} AS handled, i.group_key
        FROM ${items} i
        WHERE ${sql.and([
          ...(q.id === undefined ? [] : [sql`i.id = ${q.id}::bigint`]),
          ...(q.taskType === undefined ? [] : [sql`i.task_type = ${q.taskType}`]),
          ...(q.status === undefined ? [] : [sql`i.status = ${q.status}`]),
          ...(q.priority === undefined ? [] : [sql`i.priority = ${q.priority}`]),
          ...(q.runAfterFrom === undefined ? [] : [sql`i.run_after >= ${q.runAfterFrom}`]),
          ...(q.runAfterTo === undefined ? [] : [sql`i.run_after < ${q.runAfterTo}`])
        ])}
        ORDER BY i.priority DESC, i.seq, i.id
        LIMIT ${limitPlusOne(q.limit)} OFFSET ${countOf(q.offset ?? 0)}`
    })

    /** The cursor row's `(created_at, id)`; a cursor whose row was pruned meanwhile starts over from the newest. */
    const recordedAt = (id: string) =>
      sql`(coalesce((SELECT c.created_at FROM ${processed} c WHERE c.id = ${id}::bigint), 'infinity'), ${id}::bigint)`
    const executionsPage = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<ExecutionQuery>,
      Result: ExecutionRow,
      // By `recorded`, keyset-paged on (created_at, id): a time window reads only its own slice of the index
      // (ordering by id alone made the planner walk the whole primary key back to a window weeks ago). By `id`, on the
      // primary key. A newer page (`after`) is read oldest first from its boundary and put back in order below.
      // Ordered by the bigint column (`p.id`), never by the text alias `id`, which would sort "9" after "10".
      execute: (q) => {
        const byId = q.order === "id"
        const key = byId ? sql`p.id` : sql`(p.created_at, p.id)`
        const cursor = (id: string) => (byId ? sql`${id}::bigint` : recordedAt(id))
        const newer = q.after !== undefined
        const order = byId
          ? newer
            ? "p.id"
            : "p.id DESC"
          : newer
            ? "p.created_at, p.id"
            : "p.created_at DESC, p.id DESC"
        return sql`
          SELECT p.id::text AS id, p.queue_item_id::text AS queue_item_id, p.task_type,
                 ${text(sql`p.payload`, q.cut)} AS payload, p.status, ${text(sql`p.error_msg`, q.cut)} AS error_msg,
                 p.started_at, p.finished_at, p.duration_ms, p.created_at, p.output
          FROM ${processed} p
          WHERE ${sql.and([
            ...(q.status === undefined ? [] : [sql`p.status = ${q.status}`]),
            ...(q.taskType === undefined ? [] : [sql`p.task_type = ${q.taskType}`]),
            ...(q.queueItemId === undefined ? [] : [sql`p.queue_item_id = ${q.queueItemId}::bigint`]),
            ...(q.from === undefined ? [] : [sql`p.created_at >= ${q.from}`]),
            ...(q.to === undefined ? [] : [sql`p.created_at < ${q.to}`]),
            ...(q.before === undefined ? [] : [sql`${key} < ${cursor(q.before)}`]),
            ...(q.after === undefined ? [] : [sql`${key} > ${cursor(q.after)}`])
          ])}
          ORDER BY ${sql.literal(order)}
          LIMIT ${limitPlusOne(q.limit)}`
      }
    })

    const jobFilter = (q: JobQuery) =>
      sql.and([
        ...(q.name === undefined ? [] : [sql`j.name = ${q.name}`]),
        ...(q.id === undefined ? [] : [sql`j.id = ${q.id}::bigint`])
      ])
    const jobRows = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<JobQuery>,
      Result: JobRow,
      execute: (q) => sql`
        SELECT j.id::text AS id, j.name, j.task_type, ${text(sql`j.payload`, q.cut)} AS payload, j.schedule, j.enabled,
               j.next_run_at, ${handledByLiveWorker(sql, schema, sql`j.task_type`)} AS handled
        FROM ${jobs} j WHERE ${jobFilter(q)} ORDER BY j.name LIMIT ${q.limit === undefined ? null : countOf(q.limit)}`
    })

    const runColumns = (cut: number | undefined) => sql`
      r.id::text AS id, r.job_id::text AS job_id, j.name AS job, r.scheduled_for, r.attempt, r.status, r.started_at,
      r.finished_at, ${text(sql`r.error`, cut)} AS error`
    const runsPage = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<RunQuery>,
      Result: RunRow,
      execute: (q) => sql`
        SELECT ${runColumns(q.cut)} FROM ${runs} r JOIN ${jobs} j ON j.id = r.job_id
        WHERE ${sql.and(q.jobId === undefined ? [] : [sql`r.job_id = ${q.jobId}::bigint`])}
        ORDER BY ${sql.literal(q.order === "slot" ? "r.scheduled_for DESC, r.attempt DESC" : "r.id DESC")}
        LIMIT ${limitPlusOne(q.limit)} OFFSET ${countOf(q.offset ?? 0)}`
    })
    // The last runs of each job the query names: one index scan per job on (job_id, scheduled_for, attempt).
    const lastRunsOfJobs = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<JobQuery & { readonly lastRuns: number }>,
      Result: RunRow,
      execute: (q) => sql`
        SELECT ${runColumns(q.cut)} FROM ${jobs} j
        CROSS JOIN LATERAL (
          SELECT * FROM ${runs} r0 WHERE r0.job_id = j.id
          ORDER BY r0.scheduled_for DESC, r0.attempt DESC LIMIT ${countOf(q.lastRuns)}
        ) r
        WHERE ${jobFilter(q)}`
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

    // By `created_at` (when the result was recorded, i.e. about when it finished): that column is indexed.
    const minutes = SqlSchema.findAll({
      Request: Time,
      Result: MinuteRow,
      execute: (now) => sql`
        SELECT date_trunc('minute', created_at) AS minute,
               count(*) FILTER (WHERE status = 'ok')::int AS ok, count(*) FILTER (WHERE status = 'error')::int AS error
        FROM ${processed} WHERE created_at > ${now}::timestamptz - interval '1 hour'
        GROUP BY 1 ORDER BY 1`
    })

    const runCounts = SqlSchema.findAll({
      Request: Schema.Void,
      Result: RunCountRow,
      execute: () => sql`
        SELECT status, count(*)::int AS n FROM ${runs}
        WHERE status IN ('pending', 'running') OR finished_at > clock_timestamp() - interval '1 hour'
        GROUP BY status ORDER BY status`
    })

    const nowAndSwitch = sql<{ now: Date; semaphore: string | null }>`
      SELECT now() AS now, (SELECT value FROM ${meta} WHERE key = ${SEMAPHORE_KEY}) AS semaphore`

    // Each part is an index lookup or a small table: the newest execution and item, the latest finished run, the
    // jobs' last change, the switch, the number of items and of live workers; the items waiting for others (a count:
    // one arriving, released, doomed or cancelled changes it) and the limits (their number and last change). The
    // queue's tables are counted up to EXACT_DEPTH_UP_TO + 1 rows (`cappedCount`), and the executions running by their
    // leases (the leased rows' partial index, and queue_leases), not by a status no index covers: the poll costs the
    // same whatever the backlog (an item cancelled from a longer queue then changes nothing here; the other parts
    // change all the time).
    const signature = sql<{ signature: string }>`
      SELECT concat_ws(':',
        (SELECT max(id) FROM ${processed}), (SELECT max(id) FROM ${items}), ${cappedCount(sql, items)},
        (SELECT count(*) FROM ${items} WHERE lease_token IS NOT NULL), (SELECT count(*) FROM ${leases}),
        (SELECT max(id) FROM ${runs}),
        (SELECT max(finished_at) FROM ${runs}), (SELECT max(updated_at) FROM ${jobs}),
        (SELECT value FROM ${meta} WHERE key = ${SEMAPHORE_KEY}),
        (SELECT count(*) FROM ${workers} w WHERE ${liveWorker(sql, "w")}),
        ${cappedCount(sql, waitingTable)},
        (SELECT count(*) || '/' || max(updated_at) FROM ${sql(table(schema, "queue_limits"))})
      ) AS signature`

    const readWorkers = (limit?: number) =>
      liveWorkers(countOf(limit ?? Infinity)).pipe(Effect.mapError(toError("reading scheduler_workers failed")))
    const readDepth = (limit?: number) =>
      depth(countOf(limit ?? Infinity)).pipe(Effect.mapError(toError("reading queue_items failed")))

    const waitingRows = SqlSchema.findAll({
      Request: Schema.UndefinedOr(Schema.Number),
      Result: WaitingRow,
      execute: (limit) => sql`
        SELECT id::text AS id, task_type, after::text[] AS after, remaining AS waiting_on, created_at, step_key,
               group_key
        FROM ${waitingTable} ORDER BY id LIMIT ${limit === undefined ? null : countOf(limit)}`
    })

    // A breadth-first walk over the links either way, one row per distance: the ids it has not seen yet among the
    // links of the last ring (through flow_steps, and queue_waiting for items waiting since before 0023), at most
    // as many as the bound leaves, lowest ids first. Each ring is index lookups of the ring's ids (the primary keys,
    // the GIN indexes on after), so a bounded walk reads about as much as it returns, however large the flow.
    const flowRows = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<{ readonly id: string; readonly limit: number }>,
      Result: FlowStepRow,
      execute: (q) => sql`
        WITH RECURSIVE walk(ring, seen, distance) AS (
          SELECT ARRAY[${q.id}::bigint], ARRAY[${q.id}::bigint], 0
          UNION ALL
          SELECT next.ids, w.seen || next.ids, w.distance + 1
          FROM walk w CROSS JOIN LATERAL (
            SELECT array_agg(found.x ORDER BY found.x) AS ids FROM (
              SELECT link.x FROM (
                SELECT unnest(s.after) AS x FROM ${steps} s WHERE s.id = ANY(w.ring)
                UNION SELECT unnest(q.after) FROM ${waitingTable} q WHERE q.id = ANY(w.ring)
                UNION SELECT s.id FROM ${steps} s WHERE s.after && w.ring
                UNION SELECT q.id FROM ${waitingTable} q WHERE q.after && w.ring
              ) link
              WHERE link.x <> ALL(w.seen)
              ORDER BY link.x LIMIT greatest(${countOf(q.limit)} - cardinality(w.seen), 0)
            ) found
          ) next
          WHERE next.ids IS NOT NULL AND cardinality(w.seen) < ${countOf(q.limit)}
        ), near AS (
          SELECT r.id, w.distance FROM walk w, unnest(w.ring) AS r(id)
          ORDER BY w.distance, r.id LIMIT ${countOf(q.limit)}
        )
        SELECT n.id::text AS id, n.distance, coalesce(w.task_type, i.task_type, s.task_type, p.task_type) AS task_type,
          coalesce(w.step_key, s.step_key) AS step_key,
          CASE WHEN w.id IS NOT NULL THEN 'waiting'
               WHEN i.status = 'processing' THEN 'running'
               WHEN i.id IS NOT NULL THEN 'queued'
               WHEN s.cancelled_at IS NOT NULL THEN 'cancelled'
               WHEN p.status = 'ok' THEN 'ok'
               WHEN p.status = 'error' AND p.error_msg LIKE 'not run: %' THEN 'not run'
               WHEN p.status = 'error' THEN 'error'
               ELSE 'gone' END AS state,
          coalesce(w.after, s.after, '{}')::text[] AS after
        FROM near n
        LEFT JOIN ${waitingTable} w ON w.id = n.id
        LEFT JOIN ${steps} s ON s.id = n.id
        LEFT JOIN ${items} i ON i.id = n.id
        LEFT JOIN LATERAL (
          SELECT p.status, p.task_type, left(p.error_msg, 20) AS error_msg FROM ${processed} p
          WHERE p.queue_item_id = n.id ORDER BY p.id DESC LIMIT 1
        ) p ON true
        ORDER BY n.distance, n.id`
    })

    const holdingRows = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: HoldingRow,
      // Executions holding a live lease now: a lease on the row (runs once) or a lease row (repeats).
      execute: (types) => sql`
        SELECT x.task_type, count(*)::int AS running FROM (
          SELECT i.task_type FROM ${items} i
          WHERE i.lease_token IS NOT NULL AND i.lease_until >= now()
          UNION ALL
          SELECT i.task_type FROM ${leases} q
          JOIN ${items} i ON i.id = q.item_id WHERE q.lease_until >= now()
        ) x WHERE x.task_type = ANY(${types}::text[]) GROUP BY x.task_type ORDER BY x.task_type`
    })

    return {
      waiting: (limit) => waitingRows(limit).pipe(Effect.mapError(toError("reading queue_waiting failed"))),
      waitingCount: () =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM ${waitingTable}`.pipe(
          Effect.map((rows) => rows[0]?.n ?? 0),
          Effect.mapError(toError("reading queue_waiting failed"))
        ),
      flow: (id, limit) =>
        flowRows({ id, limit }).pipe(
          Effect.map((rows) => flowDepths(id, rows)),
          Effect.mapError(toError("reading the flow failed"))
        ),
      holding: (taskTypes) =>
        taskTypes.length === 0
          ? Effect.succeed([])
          : holdingRows(taskTypes).pipe(Effect.mapError(toError("reading queue_items failed"))),
      items: (query) =>
        itemsPage(query).pipe(
          Effect.map((rows) => pageOf(rows, query.limit)),
          Effect.mapError(toError("reading queue_items failed"))
        ),
      executions: (query) =>
        executionsPage(query).pipe(
          Effect.map((rows) => {
            const page = pageOf(rows, query.limit)
            return query.after === undefined ? page : { ...page, rows: [...page.rows].reverse() }
          }),
          Effect.mapError(toError("reading processed_items failed"))
        ),
      jobs: (query) =>
        Effect.all([
          jobRows(query),
          query.lastRuns === undefined || query.lastRuns <= 0
            ? Effect.succeed([])
            : lastRunsOfJobs({ ...query, lastRuns: query.lastRuns })
        ]).pipe(
          Effect.map(([rows, recent]) => {
            const byJob = new Map<string, Array<Run>>()
            for (const run of recent) byJob.set(run.jobId, [...(byJob.get(run.jobId) ?? []), run])
            return rows.map(({ schedule, ...row }) => ({
              ...row,
              schedule: storedSchedule(schedule),
              lastRuns: byJob.get(row.id) ?? []
            }))
          }),
          Effect.mapError(toError("reading scheduled_jobs failed"))
        ),
      runs: (query) =>
        runsPage(query).pipe(
          Effect.map((rows) => pageOf(rows, query.limit)),
          Effect.mapError(toError("reading job_runs failed"))
        ),
      workers: readWorkers,
      depth: readDepth,
      lastHour: () => lastHour(undefined).pipe(Effect.mapError(toError("reading processed_items failed"))),
      runCounts: () => runCounts(undefined).pipe(Effect.mapError(toError("reading job_runs failed"))),
      overview: (limit) =>
        Effect.gen(function* () {
          const overviewFailed = toError("reading the overview failed")
          const [head] = yield* Effect.mapError(nowAndSwitch, overviewFailed)
          const now = new Date(head?.now ?? Date.now())
          const [d, m, w] = yield* Effect.all([
            readDepth(limit),
            Effect.mapError(minutes(now), overviewFailed),
            readWorkers(limit)
          ])
          return { now, paused: !isGreen(head?.semaphore ?? undefined), depth: d, minutes: m, workers: w }
        }),
      signature: () =>
        signature.pipe(
          Effect.map((rows) => rows[0]?.signature ?? ""),
          Effect.mapError(toError("reading the signature of the tables failed"))
        ),
      now: () =>
        sql<{ now: Date }>`SELECT clock_timestamp() AS now`.pipe(
          Effect.map((rows) => new Date(rows[0]?.now ?? Date.now())),
          Effect.mapError(toError("reading the database's time failed"))
        ),
      truncate: () =>
        sql`TRUNCATE ${items}, ${leases}, ${waitingTable}, ${steps}, ${processed}, ${runs}`.pipe(
          Effect.as(["queue_items", "queue_leases", "queue_waiting", "flow_steps", "processed_items", "job_runs"]),
          Effect.mapError(toError("truncating failed"))
        )
    } satisfies PgReadModel
  })
