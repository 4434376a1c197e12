/**
 * kairos's migrations, run through @effect/sql's Migrator with its own migrations table in the target schema. Each
 * migration is a file of SQL in `migrations/`, run as written. Never edit a shipped migration: add the next one.
 * `test/fixtures/schema.sql` is the reviewed result.
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import fs from "node:fs"
import { isSqlState } from "./PgConnect.js"
import { channel, type PgOptions, schemaName } from "./PgSchema.js"

/**
 * Migrating failed. The message names the migration (when one failed) and carries the database's own message,
 * SQLSTATE code, detail and hint, e.g. `migration 0002_queue failed: relation "queue_items" already exists
 * (SQLSTATE 42P07)`.
 */
export class MigrationError extends Data.TaggedError("kairos/MigrationError")<{
  /**
   * `Unavailable`: the database could not be reached; `Failed`: it refused a statement; `NotPermitted`: the schema
   * needs migrating and this role may not (a least-privilege role: its owner must run `kairos migrate`).
   */
  readonly reason: "Failed" | "Unavailable" | "NotPermitted"
  readonly message: string
  /** The migration that failed, e.g. `0002_queue`; absent when the failure came before any migration ran. */
  readonly migration?: string | undefined
  readonly cause?: unknown
}> {}

/** What the database said, read off the first error in `cause`'s chain that carries a code (the driver's error). */
const databaseReason = (cause: unknown): { readonly text: string; readonly connection: boolean } | undefined => {
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const e = current as { code?: unknown; message?: unknown; detail?: unknown; hint?: unknown; cause?: unknown }
    if (typeof e.code === "string" && typeof e.message === "string") {
      // Anything but an SQLSTATE (ECONNREFUSED...) is the network's.
      const sqlState = isSqlState(e.code)
      const parts = [sqlState ? `${e.message} (SQLSTATE ${e.code})` : `${e.message} (${e.code})`]
      if (typeof e.detail === "string" && e.detail.length > 0) parts.push(`detail: ${e.detail}`)
      if (typeof e.hint === "string" && e.hint.length > 0) parts.push(`hint: ${e.hint}`)
      return { text: parts.join("; "), connection: !sqlState || e.code.startsWith("08") }
    }
    current = e.cause
  }
  return undefined
}

/** The innermost message of `cause`'s chain, for failures without a database error (a defect in a migration). */
const innermostMessage = (cause: unknown): string => {
  let message = String(cause)
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const m = (current as { message?: unknown }).message
    if (typeof m === "string" && m.length > 0) message = m
    current = (current as { cause?: unknown }).cause
  }
  return message
}

/** The kairos error in `cause`'s chain, if a named migration put one there (see `named`). */
const failedMigration = (cause: unknown): MigrationError | undefined => {
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    if (current instanceof MigrationError) return current
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** One clear error for anything that went wrong while migrating: which migration, and the database's reason. */
const toMigrationError = (cause: unknown): MigrationError => {
  const named = failedMigration(cause)
  if (named !== undefined) return named
  const reason = databaseReason(cause)
  return new MigrationError({
    reason: reason?.connection === true ? "Unavailable" : "Failed",
    message: `migration failed: ${reason?.text ?? innermostMessage(cause)}`,
    cause
  })
}

/**
 * A migration whose failure says its name: @effect/sql's Migrator turns a failed migration into a defect whose
 * message is only `Migration "2_queue" failed`, with the database's reason two causes down.
 */
const named = <E, R>(name: string, migration: Effect.Effect<void, E, R>): Effect.Effect<void, MigrationError, R> =>
  migration.pipe(
    Effect.catchAllDefect((defect) => Effect.fail(defect)),
    Effect.mapError((error) => {
      const reason = databaseReason(error)
      return new MigrationError({
        reason: reason?.connection === true ? "Unavailable" : "Failed",
        message: `migration ${name} failed: ${reason?.text ?? innermostMessage(error)}`,
        migration: name,
        cause: error
      })
    })
  )

/** Why nothing can be migrated (or run) on a hot standby: it is in recovery, read-only until promoted. */
export const STANDBY =
  "this database is a read-only standby (in recovery): point the URL at the primary (after a failover, the promoted standby)"

/**
 * The shipped migrations, in the order they run: each is the file `migrations/<name>.sql` beside this module, and
 * `migrations/NOTES.md` says why each is as it is. A shipped file never changes (test/adapters/migrationFiles.test.ts
 * pins each one's hash): a change is a new migration, its file added here at the end and its notes there.
 */
export const migrationNames = [
  "0001_scheduled_jobs",
  "0002_queue",
  "0003_pipeline",
  "0004_lean_leases",
  "0005_bad_rows",
  "0006_unfinished_runs",
  "0007_delayed_unique_items",
  "0008_retention",
  "0009_item_retries",
  "0010_claim_by_index",
  "0011_record_and_claim_next",
  "0012_normalize_when_needed",
  "0013_lighter_claims_and_records",
  "0014_row_leases",
  "0015_lighter_row_lease_records",
  "0016_sequential_row_leases",
  "0017_record_successes_first",
  "0018_prune_as_owner",
  "0019_vacuum_the_queue",
  "0020_flows",
  "0021_flow_control",
  "0022_waiting_groups",
  "0023_flow_steps",
  "0024_group_rates",
  "0025_set_based_rotation",
  "0026_short_limited_claim",
  "0027_claim_order_sequence",
  "0028_settle_in_id_order",
  "0029_queue_page_room"
] as const

/** The id of a shipped migration, e.g. `0002_queue`. */
export type MigrationName = (typeof migrationNames)[number]

/** Set by the CLI's bundle (scripts/bundle-cli.mjs) to where the files are from dist/cli.js; unset elsewhere. */
declare const KAIROS_BUNDLED_MIGRATIONS: string | undefined

/**
 * Beside this module wherever it runs: in src (tsx, vitest) and in each build (the build copies the files there:
 * scripts/copy-migrations.mjs).
 */
const directory = new URL(
  typeof KAIROS_BUNDLED_MIGRATIONS === "string" ? KAIROS_BUNDLED_MIGRATIONS : "./migrations/",
  import.meta.url
)

/** Each file's text, read when a migration first needs it: a process whose schema is up to date reads none. */
const files = new Map<MigrationName, string>()
const file = (name: MigrationName): string => {
  let text = files.get(name)
  if (text === undefined) {
    text = fs.readFileSync(new URL(`${name}.sql`, directory), "utf8")
    files.set(name, text)
  }
  return text
}

/**
 * A migration's SQL for a schema. The files name the schema by placeholders, all replaced in one pass (a replaced
 * value is never read again): `{{schema}}` by the schema as a quoted identifier (as `sql(schema)` writes it),
 * `{{schema_text}}`, inside string literals (a sequence's name, a lock key), by the bare name, and `{{channel}}`,
 * inside a string literal, by the schema's NOTIFY channel. The name is checked first (`schemaName`): lower-case
 * letters, digits and `_` only, so it cannot end a literal or an identifier.
 */
export const migrationSql = (name: MigrationName, schema: string): string => {
  const checked = schemaName({ schema })
  const values: Record<string, string> = {
    "{{schema}}": `"${checked.replaceAll('"', '""')}"`,
    "{{schema_text}}": checked.replaceAll("'", "''"),
    "{{channel}}": channel(checked)
  }
  return file(name).replace(/\{\{(?:schema|schema_text|channel)\}\}/g, (placeholder) => values[placeholder]!)
}

/**
 * The migrations of a schema, by id, as @effect/sql's Migrator takes them. Each file runs as one multi-statement
 * query (no parameters: the simple query protocol), inside the Migrator's transaction.
 */
export const migrations = (
  schema: string
): Record<MigrationName, Effect.Effect<void, MigrationError, SqlClient.SqlClient>> => {
  const record = {} as Record<MigrationName, Effect.Effect<void, MigrationError, SqlClient.SqlClient>>
  for (const name of migrationNames) {
    record[name] = named(
      name,
      Effect.flatMap(SqlClient.SqlClient, (sql) => Effect.suspend(() => sql.unsafe(migrationSql(name, schema))))
    )
  }
  return record
}

/** The id of the newest shipped migration (`0017_...` is 17). */
const headId = Number.parseInt(migrationNames[migrationNames.length - 1]!, 10)

/** A migration's full name from its id, e.g. 17 -> `0017_record_successes_first`. */
const nameOf = (id: number): string =>
  migrationNames.find((name) => Number.parseInt(name, 10) === id) ?? String(id).padStart(4, "0")

/** Postgres's SQLSTATE under a failure, if any. */
const sqlStateOf = (cause: unknown): string | undefined => {
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { code?: unknown }).code
    if (isSqlState(code)) return code
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/**
 * Where the schema stands, read without locking or creating anything, so that a role granted only DML (a worker's
 * least-privilege role) finds an up-to-date schema up to date: the newest migration applied (0 when none, or when
 * this role may not read the migrations table: then migrating will say why) and the role asking.
 */
const standing = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.gen(function* () {
    const [row] = yield* sql<{ role: string; present: boolean }>`
      SELECT current_user AS role, to_regclass(${`${schema}.kairos_migrations`}) IS NOT NULL AS present`
    const role = row?.role ?? "this role"
    if (row?.present !== true) return { role, applied: 0 }
    const applied = yield* sql<{ id: number }>`
      SELECT coalesce(max(migration_id), 0)::int AS id FROM ${sql(schema)}.kairos_migrations`.pipe(
      Effect.map((rows) => rows[0]?.id ?? 0),
      Effect.catchAll(() => Effect.succeed(0))
    )
    return { role, applied }
  })

/**
 * The schema's migration lock, held until the enclosing transaction ends. Another process migrating the schema (or
 * one stuck mid-migration) makes this one wait as long as it takes: said once, with who holds it, so that a worker
 * waiting there does not sit silent at start.
 */
const migrationLock = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.gen(function* () {
    const key = `kairos.migrate.${schema}`
    const [taken] = yield* sql<{ taken: boolean }>`SELECT pg_try_advisory_xact_lock(hashtext(${key})) AS taken`
    if (taken?.taken === true) return
    // A one-key advisory lock shows in pg_locks as its bigint's high and low 32 bits. In a savepoint (a nested
    // transaction): should this look fail, the migration's transaction goes on without it.
    const holders = yield* sql<{ pid: number; application: string; seconds: number }>`
      SELECT a.pid, coalesce(nullif(a.application_name, ''), '?') AS application,
        coalesce(round(extract(epoch FROM now() - a.xact_start)), 0)::int AS seconds
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.database = (
          SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = ((hashtext(${key})::bigint >> 32) & 4294967295)::oid
        AND l.objid = (hashtext(${key})::bigint & 4294967295)::oid`.pipe(
      sql.withTransaction,
      Effect.orElseSucceed(() => [])
    )
    const who = holders.map((h) => `pid ${h.pid} (${h.application}), in its transaction for ${h.seconds} s`)
    yield* Effect.logInfo(
      `migrating schema "${schema}": waiting for another session that holds its migration lock${who.length > 0 ? `: ${who.join(", ")}` : ""}`
    )
    yield* sql`SELECT pg_advisory_xact_lock(hashtext(${key}))`
  })

/**
 * Creates or upgrades kairos's tables in the schema. Idempotent, and safe when several processes start at once:
 * @effect/sql's Migrator alone is not (its table check races), so it runs under a per-schema advisory lock held
 * by an enclosing transaction, with `CREATE SCHEMA IF NOT EXISTS` inside it. A schema already at this kairos's
 * newest migration is left alone without either (one read), so workers may run as a role that cannot migrate.
 * Returns the migrations applied now (empty when up to date).
 */
export const migrate = (
  options: PgOptions = {}
): Effect.Effect<ReadonlyArray<readonly [id: number, name: string]>, MigrationError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = yield* SqlClient.SqlClient
    // A standby refuses every write: say so in one line instead of the first statement's "read-only transaction"
    // (before anything else: a worker that finds its schema up to date would otherwise start, and fail every tick).
    const [recovery] = yield* sql<{ readonly standby: boolean }>`SELECT pg_is_in_recovery() AS standby`
    if (recovery?.standby === true)
      return yield* Effect.fail(new MigrationError({ reason: "Failed", message: STANDBY }))
    const { applied, role } = yield* standing(sql, schema)
    if (applied >= headId) return []
    const run = Migrator.make({})({
      loader: Migrator.fromRecord(migrations(schema)),
      table: `${schema}.kairos_migrations`
    })
    return yield* sql
      .withTransaction(
        Effect.gen(function* () {
          // A migration may take longer than the sessions' statement timeout (an index on a big table): not this one.
          yield* sql`SET LOCAL statement_timeout = 0`
          yield* migrationLock(sql, schema)
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
      .pipe(
        Effect.catchAllDefect((defect) => Effect.fail(toMigrationError(defect))),
        Effect.mapError((e: SqlError | Migrator.MigrationError | MigrationError) => {
          const error = toMigrationError(e)
          if (sqlStateOf(error.cause) !== "42501") return error
          const at = applied === 0 ? "has no kairos tables" : `is at ${nameOf(applied)}`
          return new MigrationError({
            reason: "NotPermitted",
            message: `schema "${schema}" ${at} and this kairos needs ${nameOf(headId)}, but role "${role}" may not migrate it: run \`kairos migrate\` as the schema's owner (${error.message})`,
            migration: error.migration,
            cause: error.cause
          })
        })
      )
  }).pipe(
    // A failed migration reaches here as a defect (the Migrator dies with it), other failures as errors.
    Effect.catchAllDefect((defect) => Effect.fail(toMigrationError(defect))),
    Effect.mapError((e: SqlError | Migrator.MigrationError | MigrationError) => toMigrationError(e))
  )
