/**
 * The JobStore on Postgres (@effect/sql-pg). Claims lock rows with `FOR UPDATE SKIP LOCKED` inside the runner's
 * transaction, so the run row and the advanced `next_run_at` commit together; a unique key on
 * (job_id, scheduled_for, attempt) backs that up. Every write to a running run is fenced by its lease token.
 * Time is always the caller's `now`, never the database's.
 */
import { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer, Option, type ParseResult } from "effect"
import { randomUUID } from "node:crypto"
import type { ScheduledJob } from "../../domain/ScheduledJob.js"
import { type JobDefinition, JobStore, JobStoreError, type Lease, type NewRun } from "../../ports/JobStore.js"
import { decodeJobs, decodeRuns, JOB_COLUMNS, RUN_COLUMNS, type RunRow, toJob, toRun } from "./jobRows.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

/** Maps a database failure to the port's error; a unique violation is a `Conflict`. */
export const toStoreError = (e: SqlError | ParseResult.ParseError): JobStoreError => {
  if (e._tag === "ParseError") {
    return new JobStoreError({ reason: "Decode", message: `unexpected row: ${e.message}`, cause: e })
  }
  const code = (e.cause as { code?: unknown } | undefined)?.code
  const detail = (e.cause as { message?: unknown } | undefined)?.message
  const message = typeof detail === "string" ? detail : e.message
  if (code === "23505") return new JobStoreError({ reason: "Conflict", message, cause: e })
  // Class 08 (connection), 57P (shutdown), or no code at all (the socket went away): unavailable.
  if (code === undefined || (typeof code === "string" && (code.startsWith("08") || code.startsWith("57P")))) {
    return new JobStoreError({ reason: "Unavailable", message, cause: e })
  }
  return new JobStoreError({ reason: "Unknown", message, cause: e })
}

/** Builds the Postgres JobStore over the SqlClient in context. */
export const make = (options: PgOptions = {}): Effect.Effect<JobStore["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    // Our own column names, whatever name transforms the user's client applies.
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const jobs = sql(table(schema, "scheduled_jobs"))
    const runs = sql(table(schema, "job_runs"))
    const jobCols = sql.literal(JOB_COLUMNS)
    const runCols = sql.literal(RUN_COLUMNS)

    const jobsById = (ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.succeed(new Map<string, ScheduledJob>())
        : sql`SELECT ${jobCols} FROM ${jobs} WHERE id = ANY(${ids}::bigint[])`.pipe(
            Effect.flatMap(decodeJobs),
            Effect.map((rows) => new Map(rows.map((r) => [r.id, toJob(r)])))
          )

    const withJobs = (rows: ReadonlyArray<RunRow>) =>
      Effect.map(jobsById([...new Set(rows.map((r) => r.job_id))]), (byId) =>
        rows.flatMap((r) => {
          const job = byId.get(r.job_id)
          return job === undefined ? [] : [{ run: toRun(r), job }]
        })
      )

    /** Updates a running run if its lease token still holds; true when it did. */
    const fenced = (lease: Lease, set: ReturnType<typeof sql.literal> | ReturnType<typeof sql>) =>
      sql`UPDATE ${runs} SET ${set}
          WHERE id = ${lease.runId}::bigint AND status = 'running' AND lease_token = ${lease.token}
          RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    return JobStore.of({
      transaction: (self) =>
        sql.withTransaction(self).pipe(
          Effect.catchIf(
            (e): e is SqlError => e instanceof SqlError,
            (e) => Effect.fail(toStoreError(e))
          )
        ),

      listDue: (now, limit) =>
        sql`SELECT ${jobCols} FROM ${jobs}
            WHERE enabled AND (next_run_at IS NULL OR next_run_at <= ${now})
            ORDER BY next_run_at NULLS FIRST, id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE SKIP LOCKED`.pipe(
          Effect.flatMap(decodeJobs),
          Effect.map((rows) => rows.map(toJob)),
          Effect.mapError(toStoreError)
        ),

      listDueRetries: (now, limit) =>
        sql`SELECT ${runCols} FROM ${runs}
            WHERE status = 'pending' AND due_at <= ${now}
            ORDER BY due_at, id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE SKIP LOCKED`.pipe(
          Effect.flatMap(decodeRuns),
          Effect.flatMap(withJobs),
          Effect.mapError(toStoreError)
        ),

      listExpired: (now, limit) =>
        sql`SELECT ${runCols} FROM ${runs}
            WHERE status = 'running' AND lease_until < ${now}
            ORDER BY lease_until, id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE SKIP LOCKED`.pipe(
          Effect.flatMap(decodeRuns),
          Effect.flatMap(withJobs),
          Effect.mapError(toStoreError)
        ),

      createRun: (run: NewRun) => {
        const running = run.status === "running"
        const final = run.status === "success" || run.status === "failed" || run.status === "skipped"
        return sql`INSERT INTO ${runs}
              (job_id, scheduled_for, attempt, status, started_at, finished_at, error, due_at, owner, lease_until, lease_token)
            VALUES (
              ${run.jobId}::bigint, ${run.scheduledFor}, ${run.attempt}, ${run.status},
              ${running || final ? run.now : null}, ${final ? run.now : null}, ${run.error ?? null},
              ${run.status === "pending" ? (run.dueAt ?? run.now) : null},
              ${running ? (run.owner ?? null) : null}, ${running ? (run.leaseUntil ?? null) : null},
              ${running ? randomUUID() : null})
            RETURNING ${runCols}`.pipe(
          Effect.flatMap(decodeRuns),
          Effect.map((rows) => toRun(rows[0]!)),
          Effect.mapError(toStoreError)
        )
      },

      markRunning: (runId, { leaseUntil, now, owner }) => {
        const token = randomUUID()
        return sql`UPDATE ${runs}
            SET status = 'running', started_at = ${now}, owner = ${owner}, lease_until = ${leaseUntil},
                lease_token = ${token}, due_at = NULL
            WHERE id = ${runId}::bigint AND status = 'pending'
            RETURNING id`.pipe(
          Effect.map((rows) => (rows.length > 0 ? Option.some({ runId, token }) : Option.none())),
          Effect.mapError(toStoreError)
        )
      },

      renewLease: (lease, leaseUntil) =>
        fenced(lease, sql`lease_until = ${leaseUntil}`).pipe(Effect.mapError(toStoreError)),

      markSuccess: (lease, output, now) =>
        fenced(
          lease,
          sql`status = 'success', finished_at = ${now}, output = ${output}::jsonb, lease_until = NULL`
        ).pipe(Effect.mapError(toStoreError)),

      markFailed: (lease, error, now) =>
        fenced(lease, sql`status = 'failed', finished_at = ${now}, error = ${error}, lease_until = NULL`).pipe(
          Effect.mapError(toStoreError)
        ),

      updateNextRun: (jobId, nextRunAt, now) =>
        sql`UPDATE ${jobs} SET next_run_at = ${nextRunAt}, updated_at = ${now} WHERE id = ${jobId}::bigint`.pipe(
          Effect.asVoid,
          Effect.mapError(toStoreError)
        ),

      disableJob: (jobId, now) =>
        sql`UPDATE ${jobs} SET enabled = false, updated_at = ${now} WHERE id = ${jobId}::bigint`.pipe(
          Effect.asVoid,
          Effect.mapError(toStoreError)
        ),

      hasLiveRun: (jobId, now) =>
        sql<{ live: boolean }>`SELECT EXISTS (
              SELECT 1 FROM ${runs} WHERE job_id = ${jobId}::bigint AND status = 'running' AND lease_until >= ${now}
            ) AS live`.pipe(
          Effect.map((rows) => rows[0]?.live === true),
          Effect.mapError(toStoreError)
        ),

      nextWakeAt: (now) =>
        sql<{ at: Date | null }>`SELECT LEAST(
              (SELECT coalesce(next_run_at, ${now}) FROM ${jobs} WHERE enabled ORDER BY next_run_at NULLS FIRST LIMIT 1),
              (SELECT due_at FROM ${runs} WHERE status = 'pending' ORDER BY due_at LIMIT 1)
            ) AS at`.pipe(
          Effect.map((rows) => Option.fromNullable(rows[0]?.at ?? null).pipe(Option.map((d) => new Date(d)))),
          Effect.mapError(toStoreError)
        ),

      disableJobsExcept: (names, now) =>
        sql`UPDATE ${jobs} SET enabled = false, updated_at = ${now}
            WHERE enabled AND NOT (name = ANY(${names}::text[]))
            RETURNING id`.pipe(
          Effect.map((rows) => rows.length),
          Effect.mapError(toStoreError)
        ),

      upsertJobs: (definitions: ReadonlyArray<JobDefinition>, now) => {
        // One row per name (the last definition wins): ON CONFLICT cannot touch a row twice in one statement.
        const byName = [...new Map(definitions.map((d) => [d.name, d])).values()]
        if (byName.length === 0) return Effect.succeed([])
        const values = byName.map(
          (d) => sql`(${d.name}, ${d.taskType}, ${d.payload}, ${JSON.stringify(d.schedule)}::jsonb, true,
                      ${d.nextRunAt}, ${d.missedSlots}, ${d.overlap}, ${now}, ${now})`
        )
        return sql`INSERT INTO ${jobs} AS j
              (name, task_type, payload, schedule, enabled, next_run_at, missed_slots, overlap, created_at, updated_at)
            VALUES ${sql.csv(values)}
            ON CONFLICT (name) DO UPDATE SET
              task_type = EXCLUDED.task_type,
              payload = EXCLUDED.payload,
              missed_slots = EXCLUDED.missed_slots,
              overlap = EXCLUDED.overlap,
              updated_at = EXCLUDED.updated_at,
              enabled = true,
              -- Every expression here reads the row as it was: a new schedule (or a job coming back) gets a new slot.
              next_run_at = CASE WHEN j.schedule IS DISTINCT FROM EXCLUDED.schedule OR NOT j.enabled OR j.next_run_at IS NULL
                                 THEN EXCLUDED.next_run_at ELSE j.next_run_at END,
              schedule = EXCLUDED.schedule
            RETURNING ${jobCols}`.pipe(
          Effect.flatMap(decodeJobs),
          Effect.map((rows) => rows.map(toJob)),
          Effect.mapError(toStoreError)
        )
      }
    })
  })

/** The Postgres JobStore as a layer over a SqlClient (e.g. `PgClient.layer({ url })`). */
export const layer = (options: PgOptions = {}): Layer.Layer<JobStore, never, SqlClient.SqlClient> =>
  Layer.effect(JobStore, make(options))
