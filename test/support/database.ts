/**
 * Postgres for a test file: a client on the run's database and a schema of the file's own, dropped at the end.
 */
import { SqlClient } from "@effect/sql"
import type { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { inject } from "vitest"
import type { PgPool } from "../../src/adapters/postgres/PgPrepared.js"
import * as PgKairos from "../../src/layers/PgKairos.js"

/** The database URL of this test run (embedded Postgres or `DATABASE_URL`). */
export const databaseUrl = (): string => inject("databaseUrl")

/** The name of the schema this test file works in. */
export class TestSchema extends Context.Tag("kairos/test/TestSchema")<TestSchema, string>() {}

/** A fresh, unique schema name: test files and concurrent runs never share one. */
export const uniqueSchemaName = (label: string): string =>
  `kt_${label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .slice(0, 30)}_${randomBytes(5).toString("hex")}`

/** Runs one statement on the test run's server, on a connection of its own. */
export const onServer = async (text: string): Promise<void> => {
  const client = new pg.Client({ connectionString: databaseUrl() })
  await client.connect()
  try {
    await client.query(text)
  } finally {
    await client.end()
  }
}

/** A database of a test's own on the run's server (see testDatabase). */
export interface TestDatabase {
  readonly name: string
  /** Its URL, connecting as `role` when given (the test servers trust local connections). */
  readonly url: (role?: string) => string
  /** Ends its sessions and drops it. */
  readonly drop: () => Promise<void>
}

/**
 * Creates a database of a test's own on the run's server: for what a schema cannot give (a vacuum's horizon counts
 * only its own database's sessions; an example that uses the `public` schema as on a user's database).
 */
export const testDatabase = async (label: string): Promise<TestDatabase> => {
  const name = uniqueSchemaName(label)
  await onServer(`CREATE DATABASE "${name}"`)
  return {
    name,
    url: (role) => {
      const url = new URL(databaseUrl())
      url.pathname = `/${name}`
      if (role !== undefined) {
        url.username = role
        url.password = ""
      }
      return url.href
    },
    drop: () => onServer(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)
  }
}

/**
 * Drops a schema with everything in it. A worker killed just before may leave a backend finishing a statement that
 * locks the schema's tables in another order than `DROP ... CASCADE` does, and Postgres aborts one side as a
 * deadlock; the other side ends soon (its client is gone), so the drop is tried again.
 */
export const dropSchema = async (query: (text: string) => Promise<unknown>, schema: string): Promise<void> => {
  for (let attempt = 1; ; attempt++) {
    try {
      await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      return
    } catch (error) {
      if (attempt >= 10 || (error as { readonly code?: unknown }).code !== "40P01") throw error
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
}

/** A pooled client on the test run's database, built as kairos builds its own (so with its pool: `PgPool`). */
export const PgTestClient: Layer.Layer<PgClient.PgClient | SqlClient.SqlClient | PgPool, unknown> = Layer.suspend(() =>
  PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 8, applicationName: "kairos-test" })
)

/** Creates a schema of the file's own and drops it (with everything in it) when the layer is released. */
export const TestSchemaLive = (label: string): Layer.Layer<TestSchema, unknown, SqlClient.SqlClient> =>
  Layer.scoped(
    TestSchema,
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const name = uniqueSchemaName(label)
      yield* Effect.acquireRelease(sql`CREATE SCHEMA ${sql(name)}`, () =>
        sql`DROP SCHEMA IF EXISTS ${sql(name)} CASCADE`.pipe(Effect.ignore)
      )
      return name
    })
  )

/** A client plus a schema of the file's own. */
export const PgTest = (
  label: string
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient | PgPool | TestSchema, unknown> =>
  TestSchemaLive(label).pipe(Layer.provideMerge(PgTestClient))
