/**
 * The Postgres schema kairos's tables live in, and its NOTIFY channel.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { Fragment, Identifier } from "@effect/sql/Statement"
import { createHash } from "node:crypto"
import { EXACT_DEPTH_UP_TO } from "../../ports/QueueStore.js"

/** Options every Postgres adapter takes. */
export interface PgOptions {
  /** The schema the tables live in. Default `public`. Lower-case letters, digits and `_`, at most 63 characters. */
  readonly schema?: string | undefined
}

const VALID = /^[a-z_][a-z0-9_]{0,62}$/

/**
 * The schema name, checked: it is used in identifiers (always quoted) and in `regclass` lookups, where an
 * upper-case or dotted name would not round-trip.
 */
export const schemaName = (options: PgOptions = {}): string => {
  const schema = options.schema ?? "public"
  if (!VALID.test(schema)) {
    throw new RangeError(
      `invalid schema name ${JSON.stringify(schema)}: use lower-case letters, digits and _ (at most 63 characters)`
    )
  }
  return schema
}

/** `schema.table`, for `sql(...)` (which quotes each part). */
export const table = (schema: string, name: string): string => `${schema}.${name}`

/** The schema's NOTIFY channel: short, lower-case and unique per schema, so schemas never wake each other. */
export const channel = (schema: string): string => `kairos_${createHash("md5").update(schema).digest("hex")}`

/**
 * A table's rows counted up to `EXACT_DEPTH_UP_TO + 1` (`QueueStore.depth`): an index-only scan of at most that many
 * entries, whatever the table holds.
 */
export const cappedCount = (sql: SqlClient.SqlClient, t: Identifier | Fragment) =>
  sql`(SELECT count(*) FROM (SELECT 1 FROM ${t} LIMIT ${EXACT_DEPTH_UP_TO + 1}) c)`
