/**
 * Rows of `scheduled_jobs` and `job_runs` as kairos selects them, decoded through Schema into the domain's shapes.
 * (Internal to the Postgres adapter; its tests read rows the same way.)
 */
import * as Schema from "effect/Schema"
import { JobRun, OverlapPolicy, RunStatus, type ScheduledJob } from "../../domain/ScheduledJob.js"

/** The select list of a `scheduled_jobs` row. */
export const JOB_COLUMNS =
  "id::text AS id, name, task_type, payload, schedule, enabled, next_run_at, missed_slots, overlap, created_at, updated_at"

/** The select list of a `job_runs` row. */
export const RUN_COLUMNS =
  "id::text AS id, job_id::text AS job_id, scheduled_for, attempt, status, started_at, finished_at, " +
  "output::text AS output, error, due_at, owner, lease_until, lease_token"

export const JobRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  task_type: Schema.String,
  payload: Schema.NullOr(Schema.String),
  schedule: Schema.Unknown,
  enabled: Schema.Boolean,
  next_run_at: Schema.NullOr(Schema.DateFromSelf),
  missed_slots: Schema.NullOr(Schema.Literal("latest", "skip")),
  overlap: OverlapPolicy,
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf
})

export const RunRow = Schema.Struct({
  id: Schema.String,
  job_id: Schema.String,
  scheduled_for: Schema.DateFromSelf,
  attempt: Schema.Int,
  status: RunStatus,
  started_at: Schema.NullOr(Schema.DateFromSelf),
  finished_at: Schema.NullOr(Schema.DateFromSelf),
  output: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  due_at: Schema.NullOr(Schema.DateFromSelf),
  owner: Schema.NullOr(Schema.String),
  lease_until: Schema.NullOr(Schema.DateFromSelf),
  lease_token: Schema.NullOr(Schema.String)
})

export const toJob = (r: typeof JobRow.Type): ScheduledJob => ({
  id: r.id,
  name: r.name,
  taskType: r.task_type,
  payload: r.payload ?? "",
  schedule: r.schedule,
  enabled: r.enabled,
  nextRunAt: r.next_run_at,
  missedSlots: r.missed_slots,
  overlap: r.overlap,
  createdAt: r.created_at,
  updatedAt: r.updated_at
})

export const toRun = (r: typeof RunRow.Type): JobRun =>
  JobRun.make({
    id: r.id,
    jobId: r.job_id,
    scheduledFor: r.scheduled_for,
    attempt: r.attempt,
    status: r.status,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
    // jsonb re-renders JSON (`{"n": 1}`); hand back the compact form the handler's output was encoded as.
    output: r.output === null ? null : JSON.stringify(JSON.parse(r.output)),
    error: r.error,
    dueAt: r.due_at,
    owner: r.owner,
    leaseUntil: r.lease_until,
    leaseToken: r.lease_token
  })

export const decodeJobs = Schema.decodeUnknown(Schema.Array(JobRow))
export const decodeRuns = Schema.decodeUnknown(Schema.Array(RunRow))

/** @see RunRow */
export type RunRow = typeof RunRow.Type
