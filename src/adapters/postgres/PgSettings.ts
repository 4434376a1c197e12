/**
 * Settings over `scheduler_meta`, read live. `scheduler.paused` is the semaphore row: `red` = paused,
 * `green` = running; every other key is a row of its own.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option } from "effect"
import { SettingKeys, Settings, SettingsError, SettingsWriter } from "../../ports/Settings.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

/** The `scheduler_meta` key of the kill switch. */
export const SEMAPHORE_KEY = "semaphore"

const toError = (e: SqlError): SettingsError =>
  new SettingsError({ reason: "Unavailable", message: `reading settings failed: ${e.message}`, cause: e })

const parseBool = (v: string): Option.Option<boolean> => {
  const s = v.trim().toLowerCase()
  if (["true", "1", "yes", "on", "red"].includes(s)) return Option.some(true)
  if (["false", "0", "no", "off", "green"].includes(s)) return Option.some(false)
  return Option.none()
}

const parseInt = (v: string): Option.Option<number> => {
  const n = Number(v.trim())
  return v.trim() !== "" && Number.isSafeInteger(n) ? Option.some(n) : Option.none()
}

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
    const rowKey = (key: string) => (key === SettingKeys.paused ? SEMAPHORE_KEY : key)
    const read = (key: string) =>
      sql<{ value: string }>`SELECT value FROM ${meta} WHERE key = ${rowKey(key)}`.pipe(
        Effect.map((rows) => Option.fromNullable(rows[0]?.value)),
        Effect.mapError(toError)
      )
    // A malformed value reads as unset: one bad row must not stop every tick.
    const settings = Settings.of({
      getBool: (key) => Effect.map(read(key), Option.flatMap(parseBool)),
      getInt: (key) => Effect.map(read(key), Option.flatMap(parseInt))
    })
    const writer = SettingsWriter.of({
      set: (key, value) => {
        const k = rowKey(key)
        if (value === undefined) {
          return sql`DELETE FROM ${meta} WHERE key = ${k}`.pipe(Effect.asVoid, Effect.mapError(toError))
        }
        const text =
          key === SettingKeys.paused && typeof value === "boolean" ? (value ? "red" : "green") : String(value)
        return sql`INSERT INTO ${meta} (key, value) VALUES (${k}, ${text})
                   ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`.pipe(Effect.asVoid, Effect.mapError(toError))
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
