/**
 * Why a connection to Postgres could not be made, in one line that names the fix: what a user sees from
 * `Kairos.create`, `PgKairos.layer` and the CLI when the URL, the server or the database is wrong.
 */
import * as Data from "effect/Data"
import Pg from "pg"

/** The database could not be reached or logged in to. */
export class DatabaseConnectionError extends Data.TaggedError("DatabaseConnectionError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/** `host:port/database` of a URL, without its password; the URL's own text when it does not parse. */
export const where = (url: string): string => {
  try {
    const u = new URL(url)
    return `${u.hostname || "localhost"}:${u.port || 5432}${u.pathname || "/"}`
  } catch {
    return "the database"
  }
}

/**
 * The first error in the chain `e`, `e.cause`, … that carries a `code` (Postgres's SQLSTATE, or Node's
 * `ECONNREFUSED`...), else the innermost one. Stores' errors wrap an `SqlError`, which wraps the driver's.
 */
export const coded = (e: unknown): { readonly code?: unknown; readonly message?: unknown } | undefined => {
  let current: unknown = e
  let innermost: { readonly message?: unknown } | undefined
  for (let depth = 0; depth < 6 && typeof current === "object" && current !== null; depth++) {
    if (typeof (current as { code?: unknown }).code === "string") return current as { code: string }
    innermost = current as { message?: unknown }
    current = (current as { cause?: unknown }).cause
  }
  return innermost
}

/** Whether `code` is an SQLSTATE: the server (or a pooler in front of it) answered, with an error. */
export const isSqlState = (code: unknown): code is string => typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)

/**
 * Whether an SQLSTATE refuses a connection rather than a statement: connection exceptions (08, which poolers use
 * too), too many connections (53300), a server starting or shutting down (57P0x), a refused login (28).
 */
const refusesConnection = (code: string): boolean =>
  code.startsWith("08") || code.startsWith("28") || code === "53300" || code.startsWith("57P0")

/**
 * One line saying why connecting to `url` failed with `e`, and what to do; undefined when `e` is not about that.
 * When something answered (an SQLSTATE: Postgres, or a pooler in front of it), the line gives its answer and never
 * suggests that nothing runs there.
 */
export const explainConnectFailure = (url: string, e: unknown): string | undefined => {
  if (!/^postgres(?:ql)?:\/\//i.test(url))
    return `"${url.replace(/:[^:@/]*@/, ":***@")}" is not a Postgres URL: write postgres://user:password@host:5432/database`
  const cause = coded(e)
  const code = cause?.code
  const message = typeof cause?.message === "string" ? cause.message : String(e)
  const at = where(url)
  if (code === "ECONNREFUSED")
    return `cannot reach the database at ${at}: connection refused (is Postgres running there? check the URL's host and port)`
  if (code === "ENOTFOUND" || code === "EAI_AGAIN")
    return `cannot reach the database at ${at}: no such host (check the URL's host name)`
  if (code === "ETIMEDOUT")
    return `cannot reach the database at ${at}: the connection timed out (a firewall, or the wrong host?)`
  if (code === "3D000") {
    const name = decodeURIComponent(new URL(url).pathname.slice(1))
    return `the database "${name}" does not exist at ${at}: create it with \`createdb ${name}\` or \`CREATE DATABASE "${name}"\``
  }
  if (code === "28P01" || code === "28000")
    return `cannot log in to ${at}: ${message} (check the user and password in the URL)`
  if (code === "08P01" && /unsupported startup parameter/i.test(message))
    return `${at} refused the connection: ${message} (a connection pooler such as PgBouncer in transaction mode takes no session settings at login: remove it from the URL's query)`
  if (isSqlState(code) && refusesConnection(code)) return `${at} refused the connection: ${message} (SQLSTATE ${code})`
  if (/client password must be a string|SASL/.test(message))
    return `cannot log in to ${at}: the server asks for a password; put it in the URL (postgres://user:password@host/database)`
  if (!isSqlState(code) && /connect|terminat|timeout|ECONNRESET/i.test(message))
    return `cannot reach the database at ${at}: ${message}`
  return undefined
}

/**
 * node-postgres's client, ending its connection when connecting fails after the server answered (a password the URL
 * lacks, a refused login, a missing database). node-postgres leaves that socket open, and the server closes it only
 * at its `authentication_timeout` (a minute by default): until then the process cannot exit, so a CLI command given
 * a password-less URL printed its one line and then hung for a minute. kairos's pool and listener use this class.
 */
export class EndingClient extends Pg.Client {
  override connect(): Promise<Pg.Client>
  override connect(callback: ((err: Error) => void) | ((err: null, c: Pg.Client) => void)): void
  override connect(callback?: ((err: Error) => void) | ((err: null, c: Pg.Client) => void)): Promise<Pg.Client> | void {
    const endQuietly = () => void this.end().catch(() => undefined)
    if (callback === undefined) {
      return super.connect().catch((error: unknown) => {
        endQuietly()
        throw error
      })
    }
    const done = callback as (err: Error | null, c?: Pg.Client) => void
    super.connect(((error: Error | null, client?: Pg.Client) => {
      if (error) endQuietly()
      done(error, client)
    }) as (err: Error) => void)
  }
}
