/**
 * What every command shares: the common options (`--database-url`, `--schema`, `--json`, `--verbose`), where
 * the database is (flag, `$DATABASE_URL`, else the development database), a client on it, and how output is printed.
 */
import * as Args from "@effect/cli/Args"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as PgKairos from "../../layers/PgKairos.js"
import * as Admin from "../../runtime/Admin.js"
import * as PgJobStore from "../postgres/PgJobStore.js"
import * as PgQueueStore from "../postgres/PgQueueStore.js"
import * as PgReadModel from "../postgres/PgReadModel.js"
import * as PgSemaphore from "../postgres/PgSemaphore.js"
import { schemaName } from "../postgres/PgSchema.js"
import * as DevDatabase from "../postgres/DevDatabase.js"
import * as EmbeddedPostgres from "../postgres/EmbeddedPostgres.js"
import { checkUrl, CliError, describe, explain } from "./errors.js"
import { escapeControls, terminalSafeJson } from "./format.js"
import * as CliOutput from "./CliOutput.js"

/** Set from `--verbose` (read anywhere on the command line, before parsing): full causes on errors and in logs. */
export const flags = { verbose: false }

export const common = {
  databaseUrl: Options.text("database-url").pipe(
    Options.withPseudoName("URL"),
    Options.withDescription(
      "the database, postgres://user:password@host:port/db (default: $DATABASE_URL, else the development database in the project's .kairos folder, started on first use)"
    ),
    Options.optional
  ),
  schema: Options.text("schema").pipe(
    Options.withPseudoName("NAME"),
    Options.withDescription("the schema of kairos's tables (default: public)"),
    Options.withDefault("public")
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON with snake_case keys instead of text")),
  // Read from the raw arguments by `main` (it also applies to usage errors); declared here to be listed in --help.
  verbose: Options.boolean("verbose").pipe(Options.withDescription("on an error, also print its full cause"))
}

/**
 * `--direct-url`, for the commands that LISTEN (`worker`, `dashboard`): read with `resolveDirectUrl`. Not among the
 * common options: the other commands run single statements, which a pooler passes.
 */
export const directUrlOption = Options.text("direct-url").pipe(
  Options.withPseudoName("URL"),
  Options.withDescription(
    "a direct connection to the database, for what a transaction pooler (PgBouncer, the pooled endpoints of Supabase, Neon, RDS Proxy) cannot carry: the LISTEN that wakes at once, and a worker's migrations (default: $DIRECT_URL, else the database URL)"
  ),
  Options.optional
)

/** The direct URL: `--direct-url`, else `$DIRECT_URL`, else none (the database URL serves). */
export const resolveDirectUrl = (flag: Option.Option<string>): Effect.Effect<string | undefined, CliError> =>
  Effect.gen(function* () {
    const [url, source] = Option.isSome(flag) ? [flag.value, "--direct-url"] : [process.env["DIRECT_URL"], "DIRECT_URL"]
    if (url === undefined || url.length === 0) return undefined
    const bad = checkUrl(url, source)
    return bad === undefined ? url : yield* Effect.fail(bad)
  })

export interface Common {
  readonly databaseUrl: Option.Option<string>
  readonly schema: string
  readonly json: boolean
}

/** Prints the JSON document with --json, the human text otherwise (its values escaped by whoever built it). */
export const output = (c: { readonly json: boolean }, human: string, json: unknown) =>
  Console.log(c.json ? terminalSafeJson(JSON.stringify(json)) : human)

export const resolveUrl = (c: Common): Effect.Effect<string, CliError> =>
  Effect.gen(function* () {
    if (Option.isSome(c.databaseUrl)) {
      const bad = checkUrl(c.databaseUrl.value, "--database-url")
      return bad === undefined ? c.databaseUrl.value : yield* Effect.fail(bad)
    }
    const env = process.env["DATABASE_URL"]
    if (env !== undefined && env.length > 0) {
      const bad = checkUrl(env, "DATABASE_URL")
      return bad === undefined ? env : yield* Effect.fail(bad)
    }
    const dev = yield* ensureDev
    return dev.url
  })

/** The development database, started if needed (saying so on stderr). */
export const ensureDev = Effect.gen(function* () {
  const dev = yield* Effect.tryPromise({
    try: () => DevDatabase.ensure(process.cwd()),
    catch: (e) =>
      new CliError({
        message:
          e instanceof EmbeddedPostgres.EmbeddedPostgresNotInstalled
            ? `no DATABASE_URL and no embedded Postgres: set DATABASE_URL (or --database-url), or ${EmbeddedPostgres.INSTALL_HINT}`
            : `could not start the development database: ${describe(e)}`
      })
  })
  if (dev.started) {
    yield* CliOutput.notice(`started the development database (${dev.dataDir}); \`kairos db stop\` stops it`)
    if (dev.note !== undefined) yield* CliOutput.notice(dev.note)
  }
  return dev
})

export const targetOf = (c: Common) => ({ schema: c.schema, flagUrl: Option.getOrUndefined(c.databaseUrl) })

/** Runs `f` with a client on the resolved database. */
export const withDb = <A, E>(
  c: Common,
  f: (sql: SqlClient.SqlClient, schema: string) => Effect.Effect<A, E, SqlClient.SqlClient | PgClient.PgClient>
): Effect.Effect<A, CliError> =>
  Effect.gen(function* () {
    const schema = yield* Effect.try({
      try: () => schemaName({ schema: c.schema }),
      catch: (e) => new CliError({ message: describe(e) })
    })
    const url = yield* resolveUrl(c)
    // kairos's own client: its first connection fails within 5 s, and a failed login does not hold the process open
    // (see EndingClient). No statement timeout: a command may run as long as it needs (a truncate of a large log).
    const client = PgKairos.clientLayer({
      url: Redacted.make(url),
      maxConnections: 3,
      applicationName: "kairos-cli",
      statementTimeout: 0
    })
    return yield* Effect.flatMap(SqlClient.SqlClient, (sql) => f(sql.withoutTransforms(), schema)).pipe(
      Effect.provide(client),
      Effect.scoped,
      Effect.mapError(explain(targetOf(c), url))
    )
  })

/**
 * "yes", or why nobody will run it: no live worker at all, or live workers none of which lists its task type.
 */
export const handledCell = (handled: boolean, anyLiveWorker: boolean) =>
  handled ? "yes" : anyLiveWorker ? "no (no live worker handles it)" : "no (no live worker)"

/** Runs `f` with the read model of the schema's tables. */
export const withReads = <A, E>(c: Common, f: (reads: PgReadModel.PgReadModel) => Effect.Effect<A, E>) =>
  withDb(c, (_sql, schema) => Effect.flatMap(PgReadModel.make({ schema }), f))

export const count = (what: string) =>
  Args.integer({ name: "N" }).pipe(Args.withDescription(`how many ${what} (default 20)`), Args.withDefault(20))

/** Postgres's `integer` (int4), the type of `priority` and `max_runs`. */
const INT4 = { min: -2_147_483_648, max: 2_147_483_647 } as const

/**
 * An integer flag stored in an `integer` column: a value outside the column's range is one usage line (the flag,
 * the value, the range), before the database sees it.
 */
export const int4Option = (name: string): Options.Options<number> =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n >= INT4.min && n <= INT4.max
        ? Effect.succeed(n)
        : Effect.fail(
            ValidationError.invalidValue(
              HelpDoc.p(`--${name}: ${n} is out of range: a whole number from ${INT4.min} to ${INT4.max}`)
            )
          )
    )
  )

/**
 * A count flag (`--concurrency`, `--batch`, …): a whole number of at least `min`. Anything less is one usage line
 * naming the flag, not a worker that silently runs with a default (or, at 0, never starts anything).
 */
export const countOption = (name: string, min: number): Options.Options<number> =>
  Options.integer(name).pipe(
    Options.mapEffect((n) =>
      n >= min && n <= INT4.max
        ? Effect.succeed(n)
        : Effect.fail(
            ValidationError.invalidValue(
              HelpDoc.p(`--${name}: ${n} is out of range: a whole number of at least ${min}`)
            )
          )
    )
  )

/**
 * Runs `f` with the operator's actions on the resolved database, stamped by the database's clock. What an action
 * does not find is one line naming it and the command that lists what there is.
 */
export const withAdmin = <A, E>(
  c: Common,
  f: (admin: Admin.Admin<PgReadModel.ReadModelError>) => Effect.Effect<A, E | Admin.NotFoundError>
): Effect.Effect<A, CliError> =>
  withDb(c, (_sql, schema) =>
    Effect.gen(function* () {
      const reads = yield* PgReadModel.make({ schema })
      const admin = Admin.make({
        jobs: yield* PgJobStore.make({ schema }),
        queue: yield* PgQueueStore.make({ schema }),
        semaphore: yield* PgSemaphore.make({ schema }),
        now: reads.now()
      })
      return yield* f(admin).pipe(
        Effect.catchIf(
          (e): e is Admin.NotFoundError => e instanceof Admin.NotFoundError,
          (e) => Effect.fail(new CliError({ message: notFound(e) }))
        )
      )
    })
  )

/** A `NotFoundError` as the CLI says it: what was not found, and which command lists what there is. */
const notFound = (e: Admin.NotFoundError): string =>
  e.what === "job"
    ? `no job named ${JSON.stringify(escapeControls(e.key))}: \`kairos jobs\` lists them`
    : e.what === "item"
      ? `no queue item ${e.key}: \`kairos queue\` lists the pending and processing ones`
      : `no execution ${e.key}: \`kairos processed\` lists them`
