/**
 * kairos's migrations, run through @effect/sql's Migrator with its own migrations table in the target schema.
 * Never edit a shipped migration: add the next one. `test/fixtures/schema.sql` is the reviewed result.
 */
import { Migrator, SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect } from "effect"
import { type PgOptions, schemaName } from "./PgSchema.js"

/** Migrating failed. */
export class MigrationError extends Data.TaggedError("kairos/MigrationError")<{
  readonly reason: "Failed" | "Unavailable"
  readonly message: string
  readonly cause?: unknown
}> {}

const migration0001 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    yield* sql`
      CREATE TABLE ${s}.scheduled_jobs (
        id          bigserial PRIMARY KEY,
        name        text NOT NULL UNIQUE,
        task_type   text NOT NULL,
        payload     text DEFAULT '',
        schedule    jsonb NOT NULL,
        enabled     boolean NOT NULL DEFAULT true,
        next_run_at timestamptz,
        missed_slots text CHECK (missed_slots IN ('latest', 'skip')),
        overlap     text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow')),
        created_at  timestamptz NOT NULL DEFAULT now(),
        updated_at  timestamptz NOT NULL DEFAULT now()
      )`
    yield* sql`CREATE INDEX scheduled_jobs_due ON ${s}.scheduled_jobs (next_run_at NULLS FIRST, id) WHERE enabled`
    yield* sql`
      CREATE TABLE ${s}.job_runs (
        id            bigserial PRIMARY KEY,
        job_id        bigint NOT NULL REFERENCES ${s}.scheduled_jobs (id) ON DELETE CASCADE,
        scheduled_for timestamptz NOT NULL,
        attempt       int NOT NULL CHECK (attempt >= 1),
        status        text NOT NULL CHECK (status IN ('pending', 'running', 'success', 'failed', 'skipped')),
        started_at    timestamptz,
        finished_at   timestamptz,
        output        jsonb,
        error         text,
        due_at        timestamptz,
        owner         text,
        lease_until   timestamptz,
        lease_token   text,
        UNIQUE (job_id, scheduled_for, attempt)
      )`
    yield* sql`CREATE INDEX job_runs_pending_due ON ${s}.job_runs (due_at, id) WHERE status = 'pending'`
    yield* sql`CREATE INDEX job_runs_running ON ${s}.job_runs (job_id, lease_until) WHERE status = 'running'`
    yield* sql`CREATE INDEX job_runs_running_lease ON ${s}.job_runs (lease_until) WHERE status = 'running'`
    yield* sql`
      CREATE TABLE ${s}.scheduler_meta (
        key   text PRIMARY KEY,
        value text NOT NULL
      )`
  })

/** The migrations of a schema, by id. */
export const migrations = (schema: string) => ({
  "0001_scheduled_jobs": migration0001(schema)
})

/**
 * Creates or upgrades kairos's tables in the schema. Idempotent, and safe when several processes start at once:
 * @effect/sql's Migrator alone is not (its table check races), so it runs under a per-schema advisory lock held
 * by an enclosing transaction, with `CREATE SCHEMA IF NOT EXISTS` inside it.
 * Returns the migrations applied now (empty when up to date).
 */
export const migrate = (
  options: PgOptions = {}
): Effect.Effect<ReadonlyArray<readonly [id: number, name: string]>, MigrationError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = yield* SqlClient.SqlClient
    const run = Migrator.make({})({
      loader: Migrator.fromRecord(migrations(schema)),
      table: `${schema}.kairos_migrations`
    })
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`kairos.migrate.${schema}`}))`
        yield* sql`CREATE SCHEMA IF NOT EXISTS ${sql(schema)}`
        // The Migrator probes its table with a query that fails when it is missing, which would abort this
        // enclosing transaction: create it first, in the Migrator's own shape.
        yield* sql`
          CREATE TABLE IF NOT EXISTS ${sql(schema)}.kairos_migrations (
            migration_id integer PRIMARY KEY,
            created_at timestamptz NOT NULL DEFAULT now(),
            name text NOT NULL
          )`
        return yield* run
      })
    )
  }).pipe(
    Effect.catchAllDefect((cause) =>
      Effect.fail(new MigrationError({ reason: "Failed", message: `migration failed: ${String(cause)}`, cause }))
    ),
    Effect.mapError((e: SqlError | Migrator.MigrationError | MigrationError) =>
      e._tag === "kairos/MigrationError"
        ? e
        : new MigrationError({
            reason: e._tag === "SqlError" ? "Unavailable" : "Failed",
            message: `migration failed: ${e.message}`,
            cause: e
          })
    )
  )
