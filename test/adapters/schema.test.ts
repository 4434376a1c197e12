/**
 * The migrated schema matches the committed snapshot (test/fixtures/schema.sql): every schema change shows up
 * in review. Run with KAIROS_UPDATE_SNAPSHOT=1 to rewrite the snapshot after adding a migration.
 * Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Fiber, Logger } from "effect"
import fs from "node:fs"
import path from "node:path"
import pg from "pg"
import { migrate, MigrationError } from "../../src/adapters/postgres/migrations.js"
import { databaseUrl, TestSchema } from "../support/database.js"
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

  it.effect("a migration that waits for another session's lock says so once, naming it, then goes on", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const fresh = `${yield* TestSchema}_wait`
      yield* Effect.addFinalizer(() => sql`DROP SCHEMA IF EXISTS ${sql(fresh)} CASCADE`.pipe(Effect.ignore))
      // Another process mid-migration: the schema's lock, held in an open transaction of a connection of its own.
      const holder = new pg.Client({ connectionString: databaseUrl(), application_name: "other-migrator" })
      yield* Effect.acquireRelease(
        Effect.promise(() => holder.connect()),
        () => Effect.promise(() => holder.end())
      )
      const pid = yield* Effect.promise(async () => {
        await holder.query("BEGIN")
        await holder.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`kairos.migrate.${fresh}`])
        return (await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid
      })
      const lines: Array<string> = []
      const capture = Logger.make(({ message }) => void lines.push(String(message)))
      const migrating = yield* migrate({ schema: fresh }).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
        Effect.fork
      )
      for (let i = 0; i < 200 && lines.length === 0; i++) yield* Effect.sleep("50 millis")
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatch(
        new RegExp(
          `^migrating schema "${fresh}": waiting for another session that holds its migration lock: pid ${pid} \\(other-migrator\\), in its transaction for \\d+ s$`
        )
      )
      // Still waiting; once the other session ends its transaction, this one migrates.
      expect(migrating.unsafePoll()).toBeNull()
      yield* Effect.promise(() => holder.query("COMMIT"))
      const applied = yield* Fiber.join(migrating)
      expect(applied.length).toBeGreaterThan(0)
      expect(lines).toHaveLength(1)
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
