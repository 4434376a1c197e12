/**
 * What a least-privilege role needs to run kairos in a schema it does not own: workers, the CLI's read and control
 * commands and the dashboard. Granted by the schema's owner (`kairos grant <role>`), once, and kept for what later
 * migrations create (default privileges of the owner in the schema).
 *
 * Not granted: anything that changes the schema (the role owns nothing), DELETE or UPDATE on the log (it is
 * insert-only; retention prunes through functions that run as the owner, 0018), TRUNCATE (`kairos truncate` is the
 * owner's), and anything outside the schema.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { type PgOptions, schemaName } from "./PgSchema.js"

export class GrantError extends Data.TaggedError("kairos/GrantError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/** A role name as Postgres prints it unquoted: what `kairos grant` accepts (quoted in every statement anyway). */
const ROLE = /^[a-z_][a-z0-9_$]{0,62}$/

/** The statements, in order, that grant `role` what it needs in `schema` (both already checked). */
export const grantStatements = (schema: string, role: string): ReadonlyArray<string> => {
  const s = `"${schema}"`
  const r = `"${role}"`
  const dml = "SELECT, INSERT, UPDATE, DELETE"
  return [
    `GRANT USAGE ON SCHEMA ${s} TO ${r}`,
    `GRANT ${dml} ON ALL TABLES IN SCHEMA ${s} TO ${r}`,
    // The log is insert-only, and where the schema stands is the owner's to write.
    `REVOKE UPDATE, DELETE ON ${s}.processed_items FROM ${r}`,
    `REVOKE INSERT, UPDATE, DELETE ON ${s}.kairos_migrations FROM ${r}`,
    `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${s} TO ${r}`,
    `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${s} TO ${r}`,
    // What a later `kairos migrate` by the same owner creates.
    `ALTER DEFAULT PRIVILEGES IN SCHEMA ${s} GRANT ${dml} ON TABLES TO ${r}`,
    `ALTER DEFAULT PRIVILEGES IN SCHEMA ${s} GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO ${r}`,
    `ALTER DEFAULT PRIVILEGES IN SCHEMA ${s} GRANT EXECUTE ON FUNCTIONS TO ${r}`
  ]
}

/**
 * Grants `role` what it needs in the schema, in one transaction; idempotent. Run as the schema's owner, after
 * `migrate` (the tables must exist).
 */
export const grant = (role: string, options: PgOptions = {}): Effect.Effect<void, GrantError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    if (!ROLE.test(role))
      return yield* new GrantError({
        message: `invalid role name ${JSON.stringify(role)}: use lower-case letters, digits, _ and $ (at most 63 characters)`
      })
    const schema = schemaName(options)
    const sql = yield* SqlClient.SqlClient
    yield* sql
      .withTransaction(
        Effect.forEach(grantStatements(schema, role), (statement) => sql.unsafe(statement), { discard: true })
      )
      .pipe(
        Effect.mapError(
          (e: SqlError) =>
            new GrantError({
              message: `granting role "${role}" in schema "${schema}" failed: ${reasonOf(e)}`,
              cause: e
            })
        )
      )
  })

const reasonOf = (e: SqlError): string => {
  const cause = e.cause as { readonly message?: unknown } | null | undefined
  return typeof cause?.message === "string" && cause.message.length > 0 ? cause.message : e.message
}
