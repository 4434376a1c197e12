/**
 * The CLI's errors: one line each, naming the fix. Database failures are read by their code (Postgres's SQLSTATE or
 * Node's `ECONNREFUSED`...) and turned into what to do about them.
 */
import * as Data from "effect/Data"
import { MigrationError } from "../postgres/migrations.js"
import { coded, explainConnectFailure, isSqlState, where } from "../postgres/PgConnect.js"
import * as PgReadModel from "../postgres/PgReadModel.js"

/** A user error: printed as one line, exit code 1, no stack trace. */
export class CliError extends Data.TaggedError("CliError")<{ readonly message: string }> {}

/** What the CLI knows about where the URL came from, for messages that repeat the command. */
export interface Target {
  readonly schema: string
  /** The URL given with `--database-url`, if any (repeated, password hidden, in a suggested command). */
  readonly flagUrl: string | undefined
}

export const describe = (e: unknown): string => {
  const cause = (e as { cause?: unknown }).cause
  const inner = cause instanceof Error ? cause.message : undefined
  const message = e instanceof Error ? e.message : String(e)
  return inner !== undefined && inner !== message && !message.includes(inner) ? `${message}: ${inner}` : message
}

/** `url` with its password shown as `***` (a value that is not a URL has any `:secret@` hidden the same way). */
export const redactUrl = (url: string): string => {
  try {
    const u = new URL(url)
    if (u.password !== "") u.password = "***"
    return u.toString()
  } catch {
    return url.replace(/:[^:@/]*@/, ":***@")
  }
}

/** Why `url` (from `source`) is not a URL node-postgres can use, or undefined when it is one. */
export const checkUrl = (url: string, source: string): CliError | undefined => {
  let protocol: string | undefined
  try {
    protocol = new URL(url).protocol
  } catch {
    protocol = undefined
  }
  if (protocol === "postgres:" || protocol === "postgresql:") return undefined
  return new CliError({
    message: `${source}: ${JSON.stringify(redactUrl(url))} is not a postgres:// URL (e.g. postgres://user:password@localhost:5432/mydb)`
  })
}

/** The command that creates the tables where this one looked for them. */
const migrateCommand = (target: Target): string =>
  [
    "kairos migrate",
    ...(target.schema === "public" ? [] : [`--schema ${target.schema}`]),
    ...(target.flagUrl === undefined ? [] : [`--database-url ${redactUrl(target.flagUrl)}`])
  ].join(" ")

/** Turns a database failure into one line that says what to do. */
export const explain =
  (target: Target, url: string) =>
  (e: unknown): CliError => {
    // Its message already names the migration and carries the database's reason (a code below would mislead:
    // 42P01 during `migrate` does not mean "run kairos migrate").
    if (e instanceof MigrationError && e.reason !== "Unavailable") return new CliError({ message: e.message })
    // The database's own error under `e` (the CLI's errors wrap it).
    const cause = coded((e as { cause?: unknown } | null | undefined)?.cause)
    const code = cause?.code
    const message = typeof cause?.message === "string" ? cause.message : describe(e)
    const at = where(url)
    if (code === "42P01")
      return new CliError({
        message: `kairos's tables are missing in schema "${target.schema}": run \`${migrateCommand(target)}\``
      })
    if (code === "42703")
      return new CliError({
        message: `kairos's tables in schema "${target.schema}" are out of date: run \`${migrateCommand(target)}\``
      })
    if (code === "3D000") {
      const name = decodeURIComponent(at.slice(at.indexOf("/") + 1)) || "postgres"
      return new CliError({
        message: `${message} on ${at.slice(0, at.indexOf("/"))}: create it with \`createdb ${name}\` (or CREATE DATABASE "${name}"), or name another database in the URL`
      })
    }
    if (code === "28P01" || code === "28000") return new CliError({ message: `cannot log in to ${at}: ${message}` })
    // node-postgres asks for a password only when the server does, and fails like this when the URL has none.
    if (/client password must be a string/.test(message))
      return new CliError({
        message: `the server at ${at} asks for a password: put it in the URL (postgres://user:password@host/db)`
      })
    // Something answered (Postgres, or a pooler in front of it): its answer, never "is Postgres running?".
    if (isSqlState(code)) {
      const refused = explainConnectFailure(url, cause)
      if (refused !== undefined) return new CliError({ message: refused })
    }
    const fix = "is Postgres running? set DATABASE_URL or --database-url"
    if (code === "ECONNREFUSED")
      return new CliError({ message: `cannot reach the database at ${at} (connection refused): ${fix}` })
    if (code === "ENOTFOUND" || code === "EAI_AGAIN")
      return new CliError({ message: `cannot reach the database at ${at} (unknown host): check the host in the URL` })
    if (!isSqlState(code) && /connect|ECONNREFUSED|timeout/i.test(message))
      return new CliError({ message: `cannot reach the database at ${at} (${message}): ${fix}` })
    if (e instanceof CliError) return e
    // Its message already names what failed and why.
    if (e instanceof PgReadModel.ReadModelError) return new CliError({ message: e.message })
    return new CliError({ message: describe(e) })
  }
