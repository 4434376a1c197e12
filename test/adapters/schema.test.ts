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
import { migrate } from "../../src/adapters/postgres/migrations.js"
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
      const results = yield* Effect.all(
        Array.from({ length: 4 }, () => migrate({ schema: fresh })),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r.length > 0).length).toBe(1)
      expect(yield* describeSchema(fresh)).toBe(fs.readFileSync(snapshotFile, "utf8"))
      yield* sql`DROP SCHEMA ${sql(fresh)} CASCADE`
    })
  )

  it.effect("reject a schema name that cannot round-trip", () =>
    Effect.gen(function* () {
      const result = yield* Effect.either(migrate({ schema: "Bad.Name" }))
      expect(Either.isLeft(result) && result.left.message).toContain("invalid schema name")
    })
  )
})
