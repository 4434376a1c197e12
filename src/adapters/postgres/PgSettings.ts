/**
 * Settings over `scheduler_meta`, read live. The pause switch is the `semaphore` row, written through the Semaphore
 * port (PgSemaphore) only: the writer refuses `scheduler.paused` (plain SQL may still write that row: a trigger stores
 * it as the semaphore). `switches.paused` reads the row as `Semaphore.isGreen` does. Every change of the table wakes
 * the runners (a NOTIFY trigger).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { isGreen, parseBool, parseInt, SEMAPHORE_KEY, settingText } from "../../domain/SettingValues.js"
import { pauseSwitchRefused, SettingKeys, Settings, SettingsError, SettingsWriter } from "../../ports/Settings.js"
import { mapPgErrors } from "./PgErrors.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

const orSettingsError = mapPgErrors(
  (f) =>
    new SettingsError({
      reason: f.reason === "Invalid" ? "Invalid" : f.reason === "Unavailable" ? "Unavailable" : "Unknown",
      message: f.reason === "Invalid" ? f.message : `settings: ${f.message}`,
      cause: f.cause
    })
)

/** Builds Settings and its writer over the SqlClient in context. */
export const make = (
  options: PgOptions = {}
): Effect.Effect<
  { readonly settings: Settings["Type"]; readonly writer: SettingsWriter["Type"] },
  never,
  SqlClient.SqlClient
> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const meta = sql(table(schema, "scheduler_meta"))
    // A malformed value reads as unset: one bad row must not stop every tick.
    const settings = Settings.of({
      switches: sql<{ key: string; value: string }>`
        SELECT key, value FROM ${meta}
        WHERE key IN (${SEMAPHORE_KEY}, ${SettingKeys.enabled}, ${SettingKeys.intervalSeconds})`.pipe(
        Effect.map((rows) => {
          const value = (key: string) => Option.fromNullable(rows.find((r) => r.key === key)?.value)
          return {
            paused: !isGreen(Option.getOrUndefined(value(SEMAPHORE_KEY))),
            enabled: Option.flatMap(value(SettingKeys.enabled), parseBool),
            intervalSeconds: Option.flatMap(value(SettingKeys.intervalSeconds), parseInt).pipe(
              Option.filter((n) => n > 0)
            )
          }
        }),
        orSettingsError
      )
    })
    const writer = SettingsWriter.of({
      set: (key, value) => {
        if (key === SettingKeys.paused || key === SEMAPHORE_KEY) return Effect.fail(pauseSwitchRefused())
        if (value === undefined) {
          return sql`DELETE FROM ${meta} WHERE key = ${key}`.pipe(Effect.asVoid, orSettingsError)
        }
        return sql`INSERT INTO ${meta} (key, value) VALUES (${key}, ${settingText(value)})
                   ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`.pipe(Effect.asVoid, orSettingsError)
      }
    })
    return { settings, writer }
  })

/** Settings and its writer on Postgres, as a layer over a SqlClient. */
export const layer = (options: PgOptions = {}): Layer.Layer<Settings | SettingsWriter, never, SqlClient.SqlClient> =>
  Layer.effectContext(
    Effect.map(make(options), ({ settings, writer }) =>
      Context.make(Settings, settings).pipe(Context.add(SettingsWriter, writer))
    )
  )
