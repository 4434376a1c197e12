/**
 * The JobStore on Postgres (@effect/sql-pg). Claims lock rows with `FOR UPDATE SKIP LOCKED` inside the runner's
 * transaction, so the run row and the advanced `next_run_at` commit together; a unique key on
 * (job_id, scheduled_for, attempt) backs that up. Every write to a running run is fenced by its lease token.
 * Time is always the caller's `now`, never the database's.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { randomUUID } from "node:crypto"
import type { ScheduledJob } from "../../domain/ScheduledJob.js"
import { type JobDefinition, JobStore, JobStoreError, type RunSlot } from "../../ports/JobStore.js"
import { decodeJobs, decodeRuns, JOB_COLUMNS, RUN_COLUMNS, type RunRow, toJob, toRun } from "./jobRows.js"
import { mapPgErrors, type PgFailure, retryLockConflicts, transactionWith } from "./PgErrors.js"
import { channel, type PgOptions, schemaName, table } from "./PgSchema.js"
import { PgPool } from "./PgPrepared.js"
import * as PgTransaction from "./PgTransaction.js"
import type * as Pg from "pg"

const toStoreError = (f: PgFailure): JobStoreError =>
  new JobStoreError({ reason: f.reason === "Invalid" ? "Unknown" : f.reason, message: f.message, cause: f.cause })
const orStoreError = mapPgErrors(toStoreError, (e): e is JobStoreError => e instanceof JobStoreError)

/** What `make` takes. */
export interface Options extends PgOptions {
  /**
   * The node-postgres pool under the client in context, when kairos built it (`PgKairos.clientLayer` provides it as
   * `PgPool`): transactional executions take their connections from it (see PgTransaction). Without it they reserve
   * them through the client.
   */
  readonly pool?: Pg.Pool | undefined
}

/** Builds the Postgres JobStore over the SqlClient in context (and `options.pool`, when given). */
export const make = (options: Options = {}): Effect.Effect<JobStore["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    // Our own column names, whatever name transforms the user's client applies.
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const jobs = sql(table(schema, "scheduled_jobs"))
    const runs = sql(table(schema, "job_runs"))
    const jobCols = sql.literal(JOB_COLUMNS)
    const runCols = sql.literal(RUN_COLUMNS)
    const runColsOfR = sql.literal(
      RUN_COLUMNS.split(", ")
        .map((c) => `r.${c}`)
        .join(", ")
    )
    // Jobs (of these) whose previous run is still going: a running run with a live lease. Read in a statement of its
    // own, after the claim's row locks are taken: its snapshot then sees every run committed before those locks
    // were granted (an EXISTS inside the locking statement would see only its older snapshot, and two claimers could
    // both miss the other's run).
    const runningJobs = (jobIds: ReadonlyArray<string>, now: Date) =>
      jobIds.length === 0
        ? Effect.succeed(new Set<string>())
        : Effect.map(
            sql<{ job_id: string }>`SELECT DISTINCT job_id::text AS job_id FROM ${runs}
              WHERE job_id = ANY(${jobIds}::bigint[]) AND status = 'running' AND lease_until >= ${now}`,
            (rows) => new Set(rows.map((r) => r.job_id))
          )
    const transaction = transactionWith(sql.withTransaction, toStoreError)
    // Every runner on the schema listens on this channel (the queue's wake-ups): an operator's change is seen at
    // once, not a poll later.
    const wakeRunners = sql`SELECT pg_notify(${channel(schema)}, 'jobs')`

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

    const insertRun = (columns: ReturnType<typeof sql.insert>) =>
      sql`INSERT INTO ${runs} ${columns} RETURNING ${runCols}`.pipe(
        Effect.flatMap(decodeRuns),
        Effect.map((rows) => toRun(rows[0]!))
      )
    const slotValues = (slot: RunSlot) => ({
      job_id: slot.jobId,
      scheduled_for: slot.scheduledFor,
      attempt: slot.attempt
    })

    const startRuns: JobStore["Type"]["startRuns"] = (slots, { leaseUntil, now, owner }) => {
      if (slots.length === 0) return Effect.succeed([])
      const tokens = slots.map(() => randomUUID())
      return sql`
          INSERT INTO ${runs} (job_id, scheduled_for, attempt, status, started_at, owner, lease_until, lease_token)
          SELECT x.job_id, x.scheduled_for, x.attempt, 'running', ${now}, ${owner}, ${leaseUntil}, x.token
          FROM unnest(
            ${slots.map((s) => s.jobId)}::bigint[], ${slots.map((s) => s.scheduledFor.toISOString())}::timestamptz[],
            ${slots.map((s) => s.attempt)}::int[], ${tokens}::text[]
          ) WITH ORDINALITY AS x(job_id, scheduled_for, attempt, token, n)
          ORDER BY x.n
          RETURNING ${runCols}`.pipe(
        Effect.flatMap(decodeRuns),
        Effect.map((rows) =>
          rows.map((r) => {
            const run = toRun(r)
            return { run, lease: { runId: run.id, token: run.leaseToken ?? "" } }
          })
        ),
        orStoreError
      )
    }

    const advanceJobs: JobStore["Type"]["advanceJobs"] = (moves, now) =>
      moves.length === 0
        ? Effect.void
        : sql`UPDATE ${jobs} j SET next_run_at = x.next_run_at, updated_at = ${now}
              FROM unnest(${moves.map((m) => m.jobId)}::bigint[], ${moves.map((m) => m.nextRunAt.toISOString())}::timestamptz[])
                AS x(id, next_run_at)
              WHERE j.id = x.id`.pipe(Effect.asVoid, orStoreError)

    const store: JobStore["Type"] = JobStore.of({
      transaction,

      listDue: (now, limit, taskTypes) =>
        Effect.gen(function* () {
          const raw = yield* sql`
            SELECT ${jobCols} FROM ${jobs} j
            WHERE enabled AND task_type = ANY(${taskTypes}::text[]) AND (next_run_at IS NULL OR next_run_at <= ${now})
            ORDER BY next_run_at NULLS FIRST, id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE OF j SKIP LOCKED`
          const rows = yield* decodeJobs(raw)
          const running = yield* runningJobs(
            rows.map((r) => r.id),
            now
          )
          return rows.map((row) => ({ job: toJob(row), previousRunning: running.has(row.id) }))
        }).pipe(orStoreError),

      // The job row is locked with the retry, as a slot's claim locks it: a retry and a slot of one job are never
      // started by two claimers at once. A retry of a job that must not overlap waits while another run of it goes.
      listDueRetries: (now, limit, taskTypes) =>
        Effect.gen(function* () {
          const rows = yield* sql`SELECT ${runColsOfR} FROM ${runs} r JOIN ${jobs} j ON j.id = r.job_id
            WHERE r.status = 'pending' AND r.due_at <= ${now} AND j.enabled AND j.task_type = ANY(${taskTypes}::text[])
            ORDER BY r.due_at, r.id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE OF r, j SKIP LOCKED`.pipe(Effect.flatMap(decodeRuns), Effect.flatMap(withJobs))
          const running = yield* runningJobs([...new Set(rows.map((r) => r.job.id))], now)
          return rows.filter((r) => !(r.job.overlap === "skip" && running.has(r.job.id)))
        }).pipe(orStoreError),

      listExpired: (now, limit, disowned) =>
        sql`SELECT ${runCols} FROM ${runs}
            WHERE status = 'running' AND (lease_until < ${now}${
              disowned === undefined
                ? sql``
                : sql` OR (owner = ${disowned.owner} AND id <> ALL(${disowned.holds}::bigint[]))`
            })
            ORDER BY lease_until, id
            LIMIT ${Math.max(0, limit)}
            FOR UPDATE SKIP LOCKED`.pipe(Effect.flatMap(decodeRuns), Effect.flatMap(withJobs), orStoreError),

      // One insert path for running runs: a single start is a batch of one.
      startRuns,

      startRetry: (runId, { leaseUntil, now, owner }) => {
        const token = randomUUID()
        return sql`UPDATE ${runs}
            SET status = 'running', started_at = ${now}, owner = ${owner}, lease_until = ${leaseUntil},
                lease_token = ${token}, due_at = NULL
            WHERE id = ${runId}::bigint AND status = 'pending'
            RETURNING id`.pipe(
          Effect.map((rows) => (rows.length > 0 ? Option.some({ runId, token }) : Option.none())),
          orStoreError
        )
      },

      // ON CONFLICT DO NOTHING: a failed statement would abort the claim's whole transaction.
      recordSkipped: (slot, reason, now) =>
        sql`INSERT INTO ${runs} ${sql.insert({ ...slotValues(slot), status: "skipped", started_at: now, finished_at: now, error: reason })}
            ON CONFLICT (job_id, scheduled_for, attempt) DO NOTHING`.pipe(Effect.asVoid, orStoreError),

      recordFailed: (slot, error, now) =>
        sql`INSERT INTO ${runs} ${sql.insert({ ...slotValues(slot), status: "failed", started_at: now, finished_at: now, error })}
            ON CONFLICT (job_id, scheduled_for, attempt) DO NOTHING`.pipe(Effect.asVoid, orStoreError),

      scheduleRetry: (slot, dueAt) =>
        insertRun(sql.insert({ ...slotValues(slot), status: "pending", due_at: dueAt })).pipe(orStoreError),

      renewLeases: (leases, leaseUntil) =>
        leases.length === 0
          ? Effect.succeed([])
          : sql<{ id: string }>`
              UPDATE ${runs} r SET lease_until = ${leaseUntil}
              FROM unnest(${leases.map((l) => l.runId)}::bigint[], ${leases.map((l) => l.token)}::text[]) AS x(id, token)
              WHERE r.id = x.id AND r.status = 'running' AND r.lease_token = x.token
              RETURNING r.id::text AS id`.pipe(
              Effect.map((rows) => rows.map((r) => r.id)),
              orStoreError
            ),

      // One transaction, two fenced statements for the whole batch, then one insert for the retries.
      completeRuns: (completions) => {
        if (completions.length === 0) return Effect.succeed([])
        const col = <A>(f: (c: (typeof completions)[number]) => A) => completions.map(f)
        return transaction(
          Effect.gen(function* () {
            const done = yield* sql<{ id: string }>`
              UPDATE ${runs} r SET
                status = x.status, started_at = coalesce(x.started_at, r.started_at), finished_at = x.finished_at,
                lease_until = NULL,
                output = CASE WHEN x.status = 'success' THEN x.output::jsonb ELSE r.output END,
                error = CASE WHEN x.status = 'failed' THEN x.error ELSE r.error END
              FROM unnest(
                ${col((c) => c.lease.runId)}::bigint[], ${col((c) => c.lease.token)}::text[],
                ${col((c) => (c.outcome._tag === "Succeeded" ? "success" : "failed"))}::text[],
                ${col((c) => c.now.toISOString())}::timestamptz[],
                ${col((c) => c.startedAt?.toISOString() ?? null)}::timestamptz[],
                ${col((c) => (c.outcome._tag === "Succeeded" ? c.outcome.output : null))}::text[],
                ${col((c) => (c.outcome._tag === "Failed" ? c.outcome.error : null))}::text[]
              ) AS x(id, token, status, finished_at, started_at, output, error)
              WHERE r.id = x.id AND r.status = 'running' AND r.lease_token = x.token
              RETURNING r.id::text AS id`
            const recorded = new Set(done.map((r) => r.id))
            const retries = completions.flatMap((c) =>
              recorded.has(c.lease.runId) && c.outcome._tag === "Failed" && c.outcome.retryAt !== undefined
                ? [
                    {
                      ...slotValues({ ...c.slot, attempt: c.slot.attempt + 1 }),
                      status: "pending",
                      due_at: c.outcome.retryAt
                    }
                  ]
                : []
            )
            if (retries.length > 0) yield* sql`INSERT INTO ${runs} ${sql.insert(retries)}`
            return completions.map((c) => recorded.has(c.lease.runId))
          })
        )
      },

      // started_at cleared too: a pending run has not started (startRetry writes it again).
      // A transactional execution's completion (see PgTransaction): the same fenced statements, on its transaction.
      transact: (run, record, transactOptions) =>
        PgTransaction.transact(
          { pool: options.pool, sql },
          run,
          (value) => {
            const completion = record(value)
            return completion === undefined
              ? undefined
              : Effect.map(store.completeRuns([completion]), ([held]) => held === true)
          },
          transactOptions,
          toStoreError
        ),

      handBackRuns: (leases, now) =>
        leases.length === 0
          ? Effect.succeed(0)
          : sql<{ id: string }>`
              UPDATE ${runs} r SET status = 'pending', due_at = ${now}, started_at = NULL, owner = NULL,
                lease_until = NULL, lease_token = NULL
              FROM unnest(${leases.map((l) => l.runId)}::bigint[], ${leases.map((l) => l.token)}::text[]) AS x(id, token)
              WHERE r.id = x.id AND r.status = 'running' AND r.lease_token = x.token
              RETURNING r.id::text AS id`.pipe(
              Effect.tap((rows) => (rows.length > 0 ? wakeRunners : Effect.void)),
              Effect.map((rows) => rows.length),
              orStoreError
            ),

      markFailed: (lease, error, now) =>
        sql`UPDATE ${runs} SET status = 'failed', finished_at = ${now}, error = ${error}, lease_until = NULL
            WHERE id = ${lease.runId}::bigint AND status = 'running' AND lease_token = ${lease.token}
            RETURNING id`.pipe(
          Effect.map((rows) => rows.length > 0),
          orStoreError
        ),

      advanceJobs,

      setJobEnabled: (name, enabled, now) =>
        sql`UPDATE ${jobs} SET enabled = ${enabled}, updated_at = ${now} WHERE name = ${name} RETURNING ${jobCols}`.pipe(
          Effect.flatMap(decodeJobs),
          Effect.tap(() => wakeRunners),
          Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toJob)),
          orStoreError
        ),

      runJobNow: (name, now) =>
        sql`INSERT INTO ${runs} (job_id, scheduled_for, attempt, status, due_at)
            SELECT id, ${now}, 1, 'pending', ${now} FROM ${jobs} WHERE name = ${name}
            RETURNING ${runCols}`.pipe(
          Effect.flatMap(decodeRuns),
          Effect.tap(() => wakeRunners),
          Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), toRun)),
          orStoreError
        ),

      pruneRuns: ({ keepLast, limit, olderThan }) =>
        olderThan === undefined && keepLast === undefined
          ? Effect.succeed(0)
          : sql<{ n: number }>`SELECT ${sql(schema)}.kairos_prune_runs(
              ${olderThan ?? null}::timestamptz, ${keepLast ?? null}::bigint, ${limit}::int) AS n`.pipe(
              Effect.map((rows) => rows[0]?.n ?? 0),
              orStoreError
            ),

      disableJob: (jobId, now) =>
        sql`UPDATE ${jobs} SET enabled = false, updated_at = ${now} WHERE id = ${jobId}::bigint`.pipe(
          Effect.asVoid,
          orStoreError
        ),

      nextWakeAt: (now, taskTypes) =>
        sql<{ at: Date | null }>`SELECT LEAST(
              (SELECT coalesce(next_run_at, ${now}) FROM ${jobs}
               WHERE enabled AND task_type = ANY(${taskTypes}::text[]) ORDER BY next_run_at NULLS FIRST LIMIT 1),
              (SELECT r.due_at FROM ${runs} r JOIN ${jobs} j ON j.id = r.job_id
               WHERE r.status = 'pending' AND j.enabled AND j.task_type = ANY(${taskTypes}::text[])
                 AND NOT (j.overlap = 'skip' AND EXISTS (
                   SELECT 1 FROM ${runs} x WHERE x.job_id = j.id AND x.status = 'running' AND x.lease_until >= ${now}))
               ORDER BY r.due_at LIMIT 1),
              -- A running run's lease expiry: if its owner died, the run is taken back then.
              (SELECT min(r.lease_until) FROM ${runs} r JOIN ${jobs} j ON j.id = r.job_id
               WHERE r.status = 'running' AND j.task_type = ANY(${taskTypes}::text[]))
            ) AS at`.pipe(
          Effect.map((rows) => Option.fromNullable(rows[0]?.at ?? null).pipe(Option.map((d) => new Date(d)))),
          orStoreError
        ),

      // The rows are locked in name order first, the order upsertJobs locks them in, so the two cannot deadlock.
      disableJobsExcept: (names, now) =>
        sql`UPDATE ${jobs} SET enabled = false, updated_at = ${now}
            WHERE id IN (
              SELECT id FROM ${jobs} WHERE enabled AND NOT (name = ANY(${names}::text[])) ORDER BY name FOR UPDATE
            )
            RETURNING id`.pipe(
          Effect.map((rows) => rows.length),
          retryLockConflicts,
          orStoreError
        ),

      upsertJobs: (definitions: ReadonlyArray<JobDefinition>, now) => {
        // One row per name (the last definition wins): ON CONFLICT cannot touch a row twice in one statement.
        const byName = [...new Map(definitions.map((d) => [d.name, d])).values()]
        if (byName.length === 0) return Effect.succeed([])
        const col = <A>(f: (d: JobDefinition) => A) => byName.map(f)
        // Columns as arrays: a fixed number of parameters however many jobs (Postgres allows 65,535 per statement).
        return sql`INSERT INTO ${jobs} AS j
              (name, task_type, payload, schedule, enabled, next_run_at, missed_slots, overlap, created_at, updated_at)
            SELECT x.name, x.task_type, x.payload, x.schedule::jsonb, true, x.next_run_at, x.missed_slots, x.overlap,
                   ${now}, ${now}
            FROM unnest(
              ${col((d) => d.name)}::text[], ${col((d) => d.taskType)}::text[], ${col((d) => d.payload)}::text[],
              ${col((d) => JSON.stringify(d.schedule))}::text[], ${col((d) => d.nextRunAt.toISOString())}::timestamptz[],
              ${col((d) => d.missedSlots)}::text[], ${col((d) => d.overlap)}::text[]
            ) AS x(name, task_type, payload, schedule, next_run_at, missed_slots, overlap)
            -- Rows are inserted, and existing ones locked, in this order: concurrent upserts of the same jobs (in
            -- whatever order each caller lists them) wait for each other instead of deadlocking.
            ORDER BY x.name
            ON CONFLICT (name) DO UPDATE SET
              task_type = EXCLUDED.task_type,
              payload = EXCLUDED.payload,
              missed_slots = EXCLUDED.missed_slots,
              overlap = EXCLUDED.overlap,
              updated_at = EXCLUDED.updated_at,
              -- enabled is left alone: a job an operator disabled stays disabled whatever the code says.
              -- Every expression here reads the row as it was: a new schedule gets a new slot.
              next_run_at = CASE WHEN j.schedule IS DISTINCT FROM EXCLUDED.schedule OR j.next_run_at IS NULL
                                 THEN EXCLUDED.next_run_at ELSE j.next_run_at END,
              schedule = EXCLUDED.schedule
            RETURNING ${jobCols}`.pipe(
          retryLockConflicts,
          Effect.flatMap(decodeJobs),
          Effect.map((rows) => rows.map(toJob)),
          orStoreError
        )
      }
    })
    return store
  })

/**
 * The Postgres JobStore as a layer over kairos's own client (`PgKairos.clientLayer`: its pool is `PgPool`, which
 * serves transactional executions — see `Options.pool`).
 */
export const layer = (options: PgOptions = {}): Layer.Layer<JobStore, never, SqlClient.SqlClient | PgPool> =>
  Layer.effect(
    JobStore,
    Effect.flatMap(PgPool, (pool) => make({ ...options, pool }))
  )

/**
 * The Postgres JobStore as a layer over any SqlClient (e.g. `PgClient.layer({ url })`): a transactional execution
 * then runs in a transaction of that client (see `Options.pool`).
 */
export const layerOverClient = (options: PgOptions = {}): Layer.Layer<JobStore, never, SqlClient.SqlClient> =>
  Layer.effect(JobStore, make(options))
