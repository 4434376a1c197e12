/**
 * Everything on Postgres in one layer: a pooled client, the migrations, the stores and the runner.
 */
import { PgClient } from "@effect/sql-pg"
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import type { ConfigError } from "effect"
import { Either, Layer, Redacted } from "effect"
import { migrate, type MigrationError } from "../adapters/postgres/migrations.js"
import * as PgJobStore from "../adapters/postgres/PgJobStore.js"
import * as PgQueueStore from "../adapters/postgres/PgQueueStore.js"
import * as PgSettings from "../adapters/postgres/PgSettings.js"
import type { InvalidConfigError } from "../domain/errors.js"
import { type SchedulerConfigInput, validate } from "../domain/SchedulerConfig.js"
import type { JobStore } from "../ports/JobStore.js"
import type { QueueStore } from "../ports/QueueStore.js"
import type { Settings, SettingsWriter } from "../ports/Settings.js"
import * as Runner from "../runtime/Runner.js"

export interface Options extends SchedulerConfigInput {
  /** The database: a URL (`postgres://…`). */
  readonly url: string | Redacted.Redacted
  /** The schema of kairos's tables. Default `public`. */
  readonly schema?: string | undefined
  /** Run the migrations when the layer is built. Default true. */
  readonly migrate?: boolean | undefined
  /** Most connections of the pool. Default 10. */
  readonly maxConnections?: number | undefined
}

/**
 * The runner with its Postgres stores (jobs, queue, settings), the client and the settings writer, migrated unless
 * told otherwise; a duration in `options` that is not a positive, finite duration fails it with an
 * `InvalidConfigError`. New queue items and semaphore changes wake the runner through LISTEN/NOTIFY.
 */
export const layer = (
  options: Options
): Layer.Layer<
  Runner.Runner | JobStore | QueueStore | Settings | SettingsWriter | SqlClient.SqlClient | PgClient.PgClient,
  MigrationError | SqlError | ConfigError.ConfigError | InvalidConfigError
> => {
  // A bad duration fails the layer before it connects or migrates anything.
  const valid = validate(options)
  if (Either.isLeft(valid)) return Layer.fail(valid.left)
  const schema = options.schema
  const client = PgClient.layer({
    url: typeof options.url === "string" ? Redacted.make(options.url) : options.url,
    maxConnections: options.maxConnections ?? 10,
    applicationName: "kairos"
  })
  const migrated = options.migrate === false ? Layer.empty : Layer.effectDiscard(migrate({ schema }))
  const stores = Layer.mergeAll(
    PgJobStore.layer({ schema }),
    PgSettings.layer({ schema }),
    PgQueueStore.layer({ schema })
  )
  return Runner.layer(options).pipe(
    Layer.provideMerge(stores),
    Layer.provideMerge(migrated),
    Layer.provideMerge(client)
  )
}
