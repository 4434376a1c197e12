/**
 * Everything on Postgres in one layer: a pooled client, the migrations, the stores and the runner.
 */
import { DatabaseConnectionError, explainConnectFailure } from "../adapters/postgres/PgConnect.js"
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { migrate, type MigrationError } from "../adapters/postgres/migrations.js"
import * as PgClock from "../adapters/postgres/PgClock.js"
import { nameStatements, watchForDirect, PgPool } from "../adapters/postgres/PgPrepared.js"
import { limitedClient, limitsOf } from "../adapters/postgres/PgSession.js"
import * as PgJobStore from "../adapters/postgres/PgJobStore.js"
import * as PgLimits from "../adapters/postgres/PgLimits.js"
import * as PgQueueStore from "../adapters/postgres/PgQueueStore.js"
import * as PgSemaphore from "../adapters/postgres/PgSemaphore.js"
import * as PgSettings from "../adapters/postgres/PgSettings.js"
import * as PgWakeUps from "../adapters/postgres/PgWakeUps.js"
import * as PgWorkerRegistry from "../adapters/postgres/PgWorkerRegistry.js"
import { typeParsers } from "../adapters/postgres/PgTimes.js"
import type { InvalidConfigError } from "../domain/errors.js"
import { validate } from "../domain/SchedulerConfig.js"
import type { JobStore } from "../ports/JobStore.js"
import type { Limits } from "../ports/Limits.js"
import type { QueueStore } from "../ports/QueueStore.js"
import type { Semaphore, SemaphoreError } from "../ports/Semaphore.js"
import type { Settings, SettingsWriter } from "../ports/Settings.js"
import type { WakeUps } from "../ports/WakeUps.js"
import type { WorkerRegistry } from "../ports/WorkerRegistry.js"
import * as Runner from "../runtime/Runner.js"
import * as Pg from "pg"

export interface Options extends Runner.RunnerOptions {
  /**
   * The database: a URL (`postgres://…`), direct or through a transaction pooler (PgBouncer in transaction mode, the
   * pooled endpoints of Supabase, Neon, RDS Proxy): kairos keeps no session state between transactions.
   */
  readonly url: string | Redacted.Redacted
  /**
   * A direct connection to the same database (not through a transaction pooler), for what needs a session of its
   * own: the LISTEN that wakes idle runners at once, and the migrations run at start. Default: `url`. Through a
   * transaction pooler LISTEN delivers nothing: without a direct URL, kairos finds that out at start, says so in
   * one line, and new work waits for the poll (`interval`).
   */
  readonly directUrl?: string | Redacted.Redacted | undefined
  /** The schema of kairos's tables. Default `public`. */
  readonly schema?: string | undefined
  /** Run the migrations when the layer is built (on `directUrl` when given). Default true. */
  readonly migrate?: boolean | undefined
  /**
   * False: a database with no pause switch row yet starts red (paused: nothing starts until `Semaphore.setGreen`),
   * the seed's `NewPersistedSemaphore(store, false)`. A switch already stored is kept either way. Default true.
   */
  readonly startGreen?: boolean | undefined
  /** Most connections of the pool. Default 10. */
  readonly maxConnections?: number | undefined
  /**
   * The statements' `statement_timeout`: a statement running longer is cancelled (a frozen client holds no lock
   * past it). Set with `SET LOCAL` in each transaction kairos's connections begin, and enforced by the client (a
   * cancel request) for a statement outside one, so it holds through a transaction pooler too. Default one minute;
   * 0 turns it off. A `statement_timeout` in the URL's query (milliseconds) wins, and is not sent to the server.
   */
  readonly statementTimeout?: Duration.DurationInput | undefined
  /**
   * The transactions' `idle_in_transaction_session_timeout` (`SET LOCAL` in each): a session idle inside a
   * transaction longer (a process frozen mid-transaction) is ended by the server, releasing its locks. Default 30
   * seconds; 0 turns it off. An `idle_in_transaction_session_timeout` in the URL's query wins.
   */
  readonly idleInTransactionTimeout?: Duration.DurationInput | undefined
  /**
   * Whether the statements run per execution are named prepared statements (parsed and planned once per connection).
   * Default: on each connection that is a session of its own (a direct connection: its backend's pid is the one
   * announced at login), never through a pooler. `true`: on every connection, for a pooler that keeps prepared
   * statements per client (PgBouncer 1.21+ with `max_prepared_statements`). `false`: never.
   */
  readonly namedStatements?: boolean | undefined
}

/**
 * The pooled client kairos runs on: connections under the limits above (see PgSession: no startup parameter, no
 * session state), named `applicationName` (default `kairos`) in `pg_stat_activity`. The node-postgres pool under it
 * is provided too (`PgPool`): the statements run per execution go to it directly (see `PgPrepared`).
 */
export const clientLayer = (
  options: Options & { readonly applicationName?: string | undefined }
): Layer.Layer<
  SqlClient.SqlClient | PgClient.PgClient | PgPool,
  DatabaseConnectionError | SqlError | ConfigError.ConfigError
> => {
  const given = typeof options.url === "string" ? options.url : Redacted.value(options.url)
  const { url, limits } = limitsOf(given, options)
  // "Failed to connect" names no fix: say what is wrong with the URL, the server or the database.
  const explained = (error: SqlError) => {
    const message = explainConnectFailure(url, error)
    return message === undefined ? error : new DatabaseConnectionError({ message, cause: error })
  }
  return Layer.unwrapScoped(
    Effect.gen(function* () {
      // The pool's connections from the moment each is made (one still logging in too), to destroy those its end
      // leaves open (below).
      const connections = new Set<Pg.Client>()
      const Limited = limitedClient(limits)
      class Client extends Limited {
        constructor(config?: string | Pg.ClientConfig) {
          // A login that gets no answer (a frozen pooler or network) fails after 10 s instead of waiting for good;
          // the client's own option, not the pool's, which would also time out waits for a free connection.
          super(typeof config === "object" ? { connectionTimeoutMillis: 10_000, ...config } : config)
          connections.add(this)
          this.once("end", () => void connections.delete(this))
        }
      }
      const pool = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const pool = new Pg.Pool({
            connectionString: url,
            max: options.maxConnections ?? 10,
            application_name: options.applicationName ?? "kairos",
            types: typeParsers,
            // The limits without session state (PgSession); it also ends a connection whose login failed, so a
            // wrong URL does not hold the process open (see EndingClient).
            Client
          })
          if (options.namedStatements === true) nameStatements(pool)
          else if (options.namedStatements === undefined) watchForDirect(pool)
          // An idle connection that dies (a restarted server) must not crash the process: the next use reconnects.
          pool.on("error", () => {})
          return pool
        }),
        (pool) =>
          Effect.promise(() => pool.end()).pipe(
            Effect.interruptible,
            Effect.timeoutOption("1 second"),
            // A connection still in use after a second waits on a statement that gets no answer (a frozen pooler or
            // network; the stop went on without it): its socket would keep the process alive. Closed, its statement
            // fails, and what waited on it ends.
            Effect.tap((ended) =>
              Effect.sync(() => {
                if (ended._tag === "None") for (const client of connections) client.connection.stream.destroy()
              })
            )
          )
      )
      // Connect once now, so a wrong URL fails the layer with its reason rather than the first statement.
      yield* Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: "5 seconds",
          onTimeout: () =>
            new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        }),
        Effect.mapError(explained)
      )
      return Layer.merge(
        PgClient.layerFromPool({ acquire: Effect.succeed(pool) }).pipe(Layer.mapError(explained)),
        Layer.succeed(PgPool, pool)
      )
    })
  )
}

/**
 * The runner with its Postgres ports (jobs, queue, settings, the pause switch, the worker registry, wake-ups), the
 * client and the settings writer, migrated unless told otherwise; a duration in `options` that is not a positive,
 * finite duration fails it with an `InvalidConfigError`. New queue items and semaphore changes wake the runner
 * through LISTEN/NOTIFY (on `directUrl` when given: see `Options.directUrl`). Time is the database's (`PgClock`):
 * instances whose machine clocks disagree still agree on leases and due slots.
 */
export const layer = (
  options: Options
): Layer.Layer<
  | Runner.Runner
  | JobStore
  | QueueStore
  | Settings
  | SettingsWriter
  | Semaphore
  | WorkerRegistry
  | WakeUps
  | Limits
  | SqlClient.SqlClient
  | PgClient.PgClient,
  MigrationError | SqlError | ConfigError.ConfigError | InvalidConfigError | DatabaseConnectionError | SemaphoreError
> => {
  // A bad duration fails the layer before it connects or migrates anything.
  const valid = validate(options)
  if (Either.isLeft(valid)) return Layer.fail(valid.left)
  const schema = options.schema
  const client = clientLayer(options)
  // On the direct connection when there is one: a session of its own, for as long as migrating takes.
  const migrated =
    options.migrate === false
      ? Layer.empty
      : options.directUrl === undefined
        ? Layer.effectDiscard(migrate({ schema }))
        : Layer.effectDiscard(
            migrate({ schema }).pipe(
              Effect.provide(
                clientLayer({
                  ...options,
                  url: options.directUrl,
                  maxConnections: 1,
                  applicationName: "kairos-migrate"
                })
              )
            )
          )
  const stores = Layer.mergeAll(
    PgJobStore.layer({ schema }),
    PgSettings.layer({ schema }),
    PgQueueStore.layer({ schema }),
    PgSemaphore.layer({ schema, startGreen: options.startGreen }),
    PgWorkerRegistry.layer({ schema }),
    PgWakeUps.layer({ schema, url: options.directUrl }),
    PgLimits.layer({ schema })
  )
  return Runner.layer(options).pipe(
    Layer.provideMerge(stores),
    Layer.provideMerge(migrated),
    Layer.provideMerge(PgClock.layer()),
    Layer.provideMerge(client)
  )
}
