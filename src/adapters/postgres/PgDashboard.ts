/**
 * The dashboard's read models: paged, filtered reads of kairos's tables for the web UI (`kairos dashboard`).
 *
 * Every list is bounded: a page is at most `MAX_PAGE` rows, offsets are capped at `MAX_OFFSET` (the execution log
 * pages by id instead, so a deep page costs what the first does), and long text columns are cut in SQL
 * (`TEXT_PREVIEW`) so a 1 MB payload never travels for a table cell. Reads never write.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import type { Fragment } from "@effect/sql/Statement"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { ProcessedStatus } from "../../domain/ProcessedItem.js"
import { QueueStatus } from "../../domain/QueueItem.js"
import { RunStatus } from "../../domain/ScheduledJob.js"
import { isGreen, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import * as PgInspect from "./PgInspect.js"
import {
  handledByLiveWorker,
  type InspectError,
  liveWorker,
  type StoredSchedule,
  storedSchedule,
  toError
} from "./PgInspect.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

/** The most rows one page holds. */
export const MAX_PAGE = 200
/** The deepest offset a LIMIT/OFFSET page may start at (deeper pages are refused by the caller, not scanned). */
export const MAX_OFFSET = 10_000
/** How much of a payload or error message a list row carries; the detail pages read the full text. */
export const TEXT_PREVIEW = 1_000

const from = <S extends Schema.Schema.Any, K extends string>(schema: S, key: K) =>
  Schema.propertySignature(schema).pipe(Schema.fromKey(key))
const Time = Schema.DateFromSelf
const NullTime = Schema.NullOr(Schema.DateFromSelf)

// ---------------------------------------------------------------------------------------------------------------
// Read models

/** Queue items of one task type by status (the read model's, shared with `kairos stats`). */
export type Depth = PgInspect.Depth

const MinuteRow = Schema.Struct({ minute: Time, ok: Schema.Int, error: Schema.Int })
/** Executions recorded in one minute, by outcome. */
export interface Minute extends Schema.Schema.Type<typeof MinuteRow> {}

/** A live worker (the read model's, shared with `kairos workers`). */
export type Worker = PgInspect.WorkerEntry

/** The overview page's figures. */
export interface Overview {
  /** The database's time when read: every relative time and the chart's axis use it. */
  readonly now: Date
  readonly paused: boolean
  readonly depth: ReadonlyArray<Depth>
  /** Minutes of the last hour that recorded executions, oldest first (empty minutes are absent). */
  readonly minutes: ReadonlyArray<Minute>
  readonly workers: ReadonlyArray<Worker>
}

const ItemRow = Schema.Struct({
  id: Schema.String,
  taskType: from(Schema.String, "task_type"),
  payload: Schema.NullOr(Schema.String),
  status: QueueStatus,
  priority: Schema.Int,
  /** Runs left (it counts down as runs finish; -1: for ever). */
  maxRuns: from(Schema.Int, "max_runs"),
  runsDone: from(Schema.Int, "runs_done"),
  /** Failed attempts of the current run, each retried under the item's retry policy. */
  failures: Schema.Int,
  thread: Schema.Int,
  createdAt: from(Time, "created_at"),
  runAfter: from(NullTime, "run_after"),
  uniqueKey: from(Schema.NullOr(Schema.String), "unique_key"),
  handled: Schema.Boolean
})
/** A queue item. In lists its payload is cut to `TEXT_PREVIEW` characters. */
export interface Item extends Schema.Schema.Type<typeof ItemRow> {}

const ExecutionRow = Schema.Struct({
  id: Schema.String,
  queueItemId: from(Schema.String, "queue_item_id"),
  taskType: from(Schema.String, "task_type"),
  payload: Schema.NullOr(Schema.String),
  status: ProcessedStatus,
  errorMsg: from(Schema.String, "error_msg"),
  startedAt: from(Time, "started_at"),
  finishedAt: from(Time, "finished_at"),
  durationMs: from(Schema.Int, "duration_ms")
})
/** An execution (a `processed_items` row). In lists its payload and error are cut to `TEXT_PREVIEW` characters. */
export interface Execution extends Schema.Schema.Type<typeof ExecutionRow> {}

const JobRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  taskType: from(Schema.String, "task_type"),
  payload: Schema.NullOr(Schema.String),
  schedule: Schema.Unknown,
  enabled: Schema.Boolean,
  nextRunAt: from(NullTime, "next_run_at"),
  handled: Schema.Boolean
})

const RunRow = Schema.Struct({
  id: Schema.String,
  jobId: from(Schema.String, "job_id"),
  scheduledFor: from(Time, "scheduled_for"),
  attempt: Schema.Int,
  status: RunStatus,
  startedAt: from(NullTime, "started_at"),
  finishedAt: from(NullTime, "finished_at"),
  error: Schema.NullOr(Schema.String)
})
/** A run of a scheduled job. In lists its error is cut to `TEXT_PREVIEW` characters. */
export interface Run extends Schema.Schema.Type<typeof RunRow> {}

/** A scheduled job with its last runs, newest first. */
export interface Job extends Omit<Schema.Schema.Type<typeof JobRow>, "schedule"> {
  readonly schedule: StoredSchedule
  readonly lastRuns: ReadonlyArray<Run>
}

/** The queue page's filter. Absent fields do not filter. */
export interface QueueFilter {
  readonly taskType?: string | undefined
  readonly status?: QueueStatus | undefined
  readonly priority?: number | undefined
  /** Items whose `run_after` is at or after this (items without one do not match). */
  readonly runAfterFrom?: Date | undefined
  /** Items whose `run_after` is before this (items without one do not match). */
  readonly runAfterTo?: Date | undefined
  readonly offset: number
  readonly limit: number
}

/** The execution log's filter and page. The log is newest first (by `created_at`, then id) and pages by a row's id. */
export interface ProcessedFilter {
  readonly status?: ProcessedStatus | undefined
  readonly taskType?: string | undefined
  /** Recorded (`created_at`) at or after this. */
  readonly from?: Date | undefined
  /** Recorded before this. */
  readonly to?: Date | undefined
  /** Only executions recorded before this one (the next, older page). */
  readonly before?: string | undefined
  /** Only executions recorded after this one (the previous, newer page). */
  readonly after?: string | undefined
  readonly limit: number
}

/** A page of rows, and whether rows lie beyond it in each direction. */
export interface Page<A> {
  readonly rows: ReadonlyArray<A>
  readonly hasMore: boolean
}

/** What `make` builds. Every read fails only with `InspectError`. */
export interface PgDashboard {
  readonly overview: () => Effect.Effect<Overview, InspectError>
  /** Queue items matching the filter, in claim order (priority, then queue order). */
  readonly queue: (filter: QueueFilter) => Effect.Effect<Page<Item>, InspectError>
  /** One item with its full payload (none once it finished and was deleted) and its executions, newest first. */
  readonly item: (
    id: string
  ) => Effect.Effect<
    { readonly item: Option.Option<Item>; readonly executions: ReadonlyArray<Execution> },
    InspectError
  >
  /**
   * Executions matching the filter, newest first. With `after`, the page just newer than that id (still listed
   * newest first); `hasMore` then says whether newer rows exist beyond it.
   */
  readonly processed: (filter: ProcessedFilter) => Effect.Effect<Page<Execution>, InspectError>
  /** Every job by name, each with its last `lastRuns` runs. */
  readonly jobs: (lastRuns: number) => Effect.Effect<ReadonlyArray<Job>, InspectError>
  /** One job by name (or by id) with a page of its runs, newest slot first. */
  readonly job: (
    key: { readonly name: string } | { readonly id: string },
    page: { readonly offset: number; readonly limit: number }
  ) => Effect.Effect<Option.Option<{ readonly job: Job; readonly runs: Page<Run> }>, InspectError>
  /**
   * A short text that changes whenever something a page shows changes (new or finished work, runs, jobs, the switch,
   * the live workers); cheap enough to poll every few seconds.
   */
  readonly signature: () => Effect.Effect<string, InspectError>
  /** The database's time. */
  readonly now: () => Effect.Effect<Date, InspectError>
}

/** A count from a page request, bounded to what one statement may return. */
const bounded = (n: number, max: number): number => (Number.isFinite(n) ? Math.min(Math.max(0, Math.trunc(n)), max) : 0)

/** Builds the dashboard's reads over the SqlClient in context (its transforms are not used). */
export const make = (options: PgOptions = {}): Effect.Effect<PgDashboard, never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    // The reads the CLI shares (queue depth, live workers, the database's time), written once there.
    const inspect = yield* PgInspect.make(options)
    const items = sql(table(schema, "queue_items"))
    const processed = sql(table(schema, "processed_items"))
    const jobs = sql(table(schema, "scheduled_jobs"))
    const runs = sql(table(schema, "job_runs"))
    const workers = sql(table(schema, "scheduler_workers"))
    const meta = sql(table(schema, "scheduler_meta"))
    const preview = (column: Fragment) => sql`left(${column}, ${TEXT_PREVIEW})`

    const itemColumns = (full: boolean) => sql`
      i.id::text AS id, i.task_type, ${full ? sql`i.payload` : preview(sql`i.payload`)} AS payload, i.status,
      i.priority, i.max_runs, i.runs_done, i.failures, i.thread, i.created_at, i.run_after, i.unique_key,
      ${handledByLiveWorker(sql, schema, sql`i.task_type`)} AS handled`
    const executionColumns = (full: boolean) => sql`
      p.id::text AS id, p.queue_item_id::text AS queue_item_id, p.task_type,
      ${full ? sql`p.payload` : preview(sql`p.payload`)} AS payload, p.status,
      ${full ? sql`p.error_msg` : preview(sql`p.error_msg`)} AS error_msg, p.started_at, p.finished_at, p.duration_ms`
    const runColumns = (errorLength: number) => sql`
      r.id::text AS id, r.job_id::text AS job_id, r.scheduled_for, r.attempt, r.status, r.started_at, r.finished_at,
      left(r.error, ${errorLength}) AS error`

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
    const databaseNow = sql<{ now: Date; semaphore: string | null }>`
      SELECT now() AS now, (SELECT value FROM ${meta} WHERE key = ${SEMAPHORE_KEY}) AS semaphore`

    const queuePage = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<QueueFilter>,
      Result: ItemRow,
      execute: (f) => sql`
        SELECT ${itemColumns(false)} FROM ${items} i
        WHERE ${sql.and([
          ...(f.taskType === undefined ? [] : [sql`i.task_type = ${f.taskType}`]),
          ...(f.status === undefined ? [] : [sql`i.status = ${f.status}`]),
          ...(f.priority === undefined ? [] : [sql`i.priority = ${f.priority}`]),
          ...(f.runAfterFrom === undefined ? [] : [sql`i.run_after >= ${f.runAfterFrom}`]),
          ...(f.runAfterTo === undefined ? [] : [sql`i.run_after < ${f.runAfterTo}`])
        ])}
        ORDER BY i.priority DESC, i.seq, i.id
        LIMIT ${bounded(f.limit, MAX_PAGE) + 1} OFFSET ${bounded(f.offset, MAX_OFFSET)}`
    })
    const oneItem = SqlSchema.findAll({
      Request: Schema.String,
      Result: ItemRow,
      execute: (id) => sql`SELECT ${itemColumns(true)} FROM ${items} i WHERE i.id = ${id}::bigint`
    })
    const itemExecutions = SqlSchema.findAll({
      Request: Schema.String,
      Result: ExecutionRow,
      execute: (id) => sql`
        SELECT ${executionColumns(true)} FROM ${processed} p WHERE p.queue_item_id = ${id}::bigint
        ORDER BY p.id DESC LIMIT ${MAX_PAGE}`
    })
    /** The cursor row's `(created_at, id)`; a cursor whose row was pruned meanwhile starts over from the newest. */
    const cursor = (id: string) =>
      sql`(coalesce((SELECT c.created_at FROM ${processed} c WHERE c.id = ${id}::bigint), 'infinity'), ${id}::bigint)`
    const processedPage = SqlSchema.findAll({
      Request: Schema.Any as Schema.Schema<ProcessedFilter>,
      Result: ExecutionRow,
      // Newest first by when the result was recorded, keyset-paged on (created_at, id): a deep page costs what the
      // first one does, and a time window reads only its own slice of the index (ordering by id alone made the
      // planner walk the whole primary key back to a window weeks ago). A newer page (`after`) is read oldest first
      // from its boundary and put back in order by the caller.
      execute: (f) => sql`
        SELECT ${executionColumns(false)} FROM ${processed} p
        WHERE ${sql.and([
          ...(f.status === undefined ? [] : [sql`p.status = ${f.status}`]),
          ...(f.taskType === undefined ? [] : [sql`p.task_type = ${f.taskType}`]),
          ...(f.from === undefined ? [] : [sql`p.created_at >= ${f.from}`]),
          ...(f.to === undefined ? [] : [sql`p.created_at < ${f.to}`]),
          ...(f.before === undefined ? [] : [sql`(p.created_at, p.id) < ${cursor(f.before)}`]),
          ...(f.after === undefined ? [] : [sql`(p.created_at, p.id) > ${cursor(f.after)}`])
        ])}
        ORDER BY ${f.after === undefined ? sql.literal("p.created_at DESC, p.id DESC") : sql.literal("p.created_at, p.id")}
        LIMIT ${bounded(f.limit, MAX_PAGE) + 1}`
    })
    const allJobs = SqlSchema.findAll({
      Request: Schema.Void,
      Result: JobRow,
      execute: () => sql`
        SELECT j.id::text AS id, j.name, j.task_type, left(j.payload, ${TEXT_PREVIEW}) AS payload, j.schedule,
               j.enabled, j.next_run_at, ${handledByLiveWorker(sql, schema, sql`j.task_type`)} AS handled
        FROM ${jobs} j ORDER BY j.name LIMIT ${MAX_OFFSET}`
    })
    // The last runs of every job: one index scan per job on (job_id, scheduled_for, attempt).
    const lastRunsOfJobs = SqlSchema.findAll({
      Request: Schema.Number,
      Result: RunRow,
      execute: (n) => sql`
        SELECT ${runColumns(TEXT_PREVIEW)} FROM ${jobs} j
        CROSS JOIN LATERAL (
          SELECT * FROM ${runs} r0 WHERE r0.job_id = j.id ORDER BY r0.scheduled_for DESC, r0.attempt DESC LIMIT ${n}
        ) r`
    })
    const oneJob = SqlSchema.findAll({
      Request: Schema.Union(Schema.Struct({ name: Schema.String }), Schema.Struct({ id: Schema.String })),
      Result: JobRow,
      execute: (key) => sql`
        SELECT j.id::text AS id, j.name, j.task_type, j.payload, j.schedule, j.enabled, j.next_run_at,
               ${handledByLiveWorker(sql, schema, sql`j.task_type`)} AS handled
        FROM ${jobs} j WHERE ${"name" in key ? sql`j.name = ${key.name}` : sql`j.id = ${key.id}::bigint`}`
    })
    const jobRuns = SqlSchema.findAll({
      Request: Schema.Struct({ jobId: Schema.String, offset: Schema.Number, limit: Schema.Number }),
      Result: RunRow,
      execute: ({ jobId, limit, offset }) => sql`
        SELECT ${runColumns(20_000)} FROM ${runs} r WHERE r.job_id = ${jobId}::bigint
        ORDER BY r.scheduled_for DESC, r.attempt DESC
        LIMIT ${bounded(limit, MAX_PAGE) + 1} OFFSET ${bounded(offset, MAX_OFFSET)}`
    })
    // Each part is an index lookup or a small table: the newest execution and item, the latest finished run, the
    // jobs' last change, the switch, the number of items and of live workers.
    const signature = sql<{ signature: string }>`
      SELECT concat_ws(':',
        (SELECT max(id) FROM ${processed}), (SELECT max(id) FROM ${items}), (SELECT count(*) FROM ${items}),
        (SELECT count(*) FROM ${items} WHERE status = 'processing'), (SELECT max(id) FROM ${runs}),
        (SELECT max(finished_at) FROM ${runs}), (SELECT max(updated_at) FROM ${jobs}),
        (SELECT value FROM ${meta} WHERE key = ${SEMAPHORE_KEY}),
        (SELECT count(*) FROM ${workers} w WHERE ${liveWorker(sql, "w")})
      ) AS signature`

    const page = <A>(rows: ReadonlyArray<A>, limit: number): Page<A> => {
      const n = bounded(limit, MAX_PAGE)
      return { rows: rows.slice(0, n), hasMore: rows.length > n }
    }
    const withRuns = (row: typeof JobRow.Type, lastRuns: ReadonlyArray<Run>): Job => ({
      ...row,
      schedule: storedSchedule(row.schedule),
      lastRuns
    })

    return {
      overview: () =>
        Effect.gen(function* () {
          const overviewFailed = toError("reading the overview failed")
          const [head] = yield* Effect.mapError(databaseNow, overviewFailed)
          const now = new Date(head?.now ?? Date.now())
          const [d, m, w] = yield* Effect.all([
            inspect.depth(MAX_PAGE),
            Effect.mapError(minutes(now), overviewFailed),
            inspect.workers(MAX_PAGE)
          ])
          return { now, paused: !isGreen(head?.semaphore ?? undefined), depth: d, minutes: m, workers: w }
        }),
      queue: (filter) =>
        queuePage(filter).pipe(
          Effect.map((rows) => page(rows, filter.limit)),
          Effect.mapError(toError("reading queue_items failed"))
        ),
      item: (id) =>
        Effect.all([oneItem(id), itemExecutions(id)]).pipe(
          Effect.map(([item, executions]) => ({ item: Option.fromNullable(item[0]), executions })),
          Effect.mapError(toError("reading the queue item failed"))
        ),
      processed: (filter) =>
        processedPage(filter).pipe(
          Effect.map((rows) => {
            const result = page(rows, filter.limit)
            return filter.after === undefined ? result : { ...result, rows: [...result.rows].reverse() }
          }),
          Effect.mapError(toError("reading processed_items failed"))
        ),
      jobs: (lastRuns) =>
        Effect.all([allJobs(undefined), lastRunsOfJobs(bounded(lastRuns, 50))]).pipe(
          Effect.map(([rows, recent]) => {
            const byJob = new Map<string, Array<Run>>()
            for (const run of recent) byJob.set(run.jobId, [...(byJob.get(run.jobId) ?? []), run])
            return rows.map((row) => withRuns(row, byJob.get(row.id) ?? []))
          }),
          Effect.mapError(toError("reading scheduled_jobs failed"))
        ),
      job: (key, { limit, offset }) =>
        Effect.gen(function* () {
          const [row] = yield* oneJob(key)
          if (row === undefined) return Option.none()
          const rows = yield* jobRuns({ jobId: row.id, offset, limit })
          const runsPage = page(rows, limit)
          return Option.some({ job: withRuns(row, runsPage.rows.slice(0, 5)), runs: runsPage })
        }).pipe(Effect.mapError(toError("reading the job failed"))),
      signature: () =>
        signature.pipe(
          Effect.map((rows) => rows[0]?.signature ?? ""),
          Effect.mapError(toError("reading the dashboard's signature failed"))
        ),
      now: inspect.now
    } satisfies PgDashboard
  })
