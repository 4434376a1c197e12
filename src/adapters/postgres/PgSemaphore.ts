/**
 * The pause switch on Postgres: the `semaphore` row of `scheduler_meta` (`green` / `red`). The table's NOTIFY trigger
 * wakes every runner on a write. PgSettings reads the same row for the runner's `switches.paused`, through the same
 * `isGreen`.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { GREEN, isGreen, RED, SEMAPHORE_KEY } from "../../domain/SettingValues.js"
import { Semaphore, SemaphoreError, type SemaphoreOptions } from "../../ports/Semaphore.js"
import { mapPgErrors } from "./PgErrors.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

const orSemaphoreError = mapPgErrors(
  (f) =>
    new SemaphoreError({
      reason: f.reason === "Unavailable" ? "Unavailable" : "Unknown",
      message: `semaphore: ${f.message}`,
      cause: f.cause
    })
)

/** The switch over the SqlClient in context. */
export const make = (options: PgOptions = {}): Effect.Effect<Semaphore["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const meta = sql(table(schema, "scheduler_meta"))
    const write = (value: string) =>
      sql`INSERT INTO ${meta} (key, value) VALUES (${SEMAPHORE_KEY}, ${value})
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`.pipe(Effect.asVoid, orSemaphoreError)
    return Semaphore.of({
      isGreen: sql<{ value: string }>`SELECT value FROM ${meta} WHERE key = ${SEMAPHORE_KEY}`.pipe(
        Effect.map((rows) => isGreen(rows[0]?.value)),
        orSemaphoreError
      ),
      setGreen: write(GREEN),
      setRed: write(RED)
    })
  })

/** Writes `red` when the database has no switch row yet; leaves one that exists (`startGreen: false`). */
export const startRed = (options: PgOptions = {}): Effect.Effect<void, SemaphoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const meta = sql(table(schemaName(options), "scheduler_meta"))
    yield* sql`INSERT INTO ${meta} (key, value) VALUES (${SEMAPHORE_KEY}, ${RED}) ON CONFLICT (key) DO NOTHING`
  }).pipe(orSemaphoreError)

/** What `layer` takes. */
export interface Options extends PgOptions, SemaphoreOptions {}

/** The switch as a layer over a SqlClient; with `startGreen: false`, a database without a switch row starts red. */
export const layer = (options: Options = {}): Layer.Layer<Semaphore, SemaphoreError, SqlClient.SqlClient> =>
  Layer.effect(
    Semaphore,
    options.startGreen === false ? Effect.zipRight(startRed(options), make(options)) : make(options)
  )
