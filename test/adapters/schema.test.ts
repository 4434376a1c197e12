/**
 * The migrated schema matches the committed snapshot (test/fixtures/schema.sql): every schema change shows up
 * in review. Run with KAIROS_UPDATE_SNAPSHOT=1 to rewrite the snapshot after adding a migration.
 * Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import fs from "node:fs"
import path from "node:path"
import { migrate, MigrationError } from "../../src/adapters/postgres/migrations.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"
import { projectRoot } from "../support/process.js"
import { describeSchema } from "../support/schemaSnapshot.js"

const snapshotFile = path.join(projectRoot, "test/fixtures/schema.sql")

layer(PgMigrated("schema"), { timeout: "60 seconds", excludeTestServices: true })("migrations", (it) => {
  it.effect("produce the committed schema snapshot", () =>
    Effect.gen(function* () {
      const schema = yield* TestSchema
      const live = yield* describeSchema(schema)
      if (process.env["KAIROS_UPDATE_SNAPSHOT"] === "1") fs.writeFileSync(snapshotFile, live)
      expect(live).toBe(fs.readFileSync(snapshotFile, "utf8"))
    })
  )

  it.effect("are idempotent: running them again applies nothing and changes nothing", () =>
    Effect.gen(function* () {
      const schema = yield* TestSchema
      const before = yield* describeSchema(schema)
      expect(yield* migrate({ schema })).toEqual([])
      expect(yield* describeSchema(schema)).toBe(before)
    })
  )

  it.effect("are safe when several run at once on a fresh schema", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const fresh = `${yield* TestSchema}_x`
      // Dropped whatever the outcome: a failed assertion must not leave the schema behind.
      yield* Effect.addFinalizer(() => sql`DROP SCHEMA IF EXISTS ${sql(fresh)} CASCADE`.pipe(Effect.ignore))
      const results = yield* Effect.all(
        Array.from({ length: 4 }, () => migrate({ schema: fresh })),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r.length > 0).length).toBe(1)
      expect(yield* describeSchema(fresh)).toBe(fs.readFileSync(snapshotFile, "utf8"))
    }).pipe(Effect.scoped)
  )

  it.effect("a failed migration names itself and carries the database's reason; nothing of the run is kept", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const conflicted = `${yield* TestSchema}_conflict`
      yield* sql`CREATE SCHEMA ${sql(conflicted)}`
      // Another program's table where 0002 creates kairos's queue.
      yield* sql`CREATE TABLE ${sql(conflicted)}.queue_items (x int)`
      const error = yield* Effect.flip(migrate({ schema: conflicted }))
      expect(error).toBeInstanceOf(MigrationError)
      expect(error.message).toBe(`migration 0002_queue failed: relation "queue_items" already exists (SQLSTATE 42P07)`)
      expect(error).toMatchObject({ reason: "Failed", migration: "0002_queue" })
      // The run is one transaction: 0001's tables were rolled back with it.
      const tables = yield* sql<{ name: string }>`
        SELECT table_name AS name FROM information_schema.tables WHERE table_schema = ${conflicted} ORDER BY 1`
      expect(tables.map((t) => t.name)).toEqual(["queue_items"])
      yield* sql`DROP SCHEMA ${sql(conflicted)} CASCADE`
    })
  )

  it.effect("reject a schema name that cannot round-trip", () =>
    Effect.gen(function* () {
      const result = yield* Effect.either(migrate({ schema: "Bad.Name" }))
      expect(Either.isLeft(result) && result.left.message).toContain("invalid schema name")
    })
  )
})
