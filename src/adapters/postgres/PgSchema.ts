/**
 * The Postgres schema kairos's tables live in, and its NOTIFY channel.
 */
import { createHash } from "node:crypto"

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
