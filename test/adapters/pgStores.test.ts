/**
 * The Postgres JobStore, Settings, Semaphore and WorkerRegistry against the contract suites, plus what only the
 * database can show: the switch written by plain SQL (integration: a real Postgres).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as PgSemaphore from "../../src/adapters/postgres/PgSemaphore.js"
import { Semaphore, Settings } from "../../src/index.js"
import { suite } from "../contracts/JobStoreContract.js"
import { suite as semaphoreSuite } from "../contracts/SemaphoreContract.js"
import { suite as settingsSuite } from "../contracts/SettingsContract.js"
import { suite as workerRegistrySuite } from "../contracts/WorkerRegistryContract.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

suite("postgres", PgStores("jobstore"))
settingsSuite("postgres", PgStores("settings"))
semaphoreSuite("postgres", PgStores("pause"), {
  wakes: "eventually",
  deleteRow: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`DELETE FROM ${sql(`${yield* TestSchema}.scheduler_meta`)} WHERE key = 'semaphore'`
  }),
  startOver: (options) =>
    Effect.flatMap(TestSchema, (schema) =>
      options.startGreen === false
        ? Effect.zipRight(PgSemaphore.startRed({ schema }), PgSemaphore.make({ schema }))
        : PgSemaphore.make({ schema })
    )
})
workerRegistrySuite("postgres", PgStores("workers"))

layer(PgStores("pausesql"), { timeout: "60 seconds", excludeTestServices: true })("the pause switch in SQL", (it) => {
  /** The rows of the switch as stored: key → value. */
  const switchRows = Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const meta = sql(`${yield* TestSchema}.scheduler_meta`)
    const rows = yield* sql<{ key: string; value: string }>`
      SELECT key, value FROM ${meta} WHERE key IN ('scheduler.paused', 'semaphore') ORDER BY key`
    return Object.fromEntries(rows.map((r) => [r.key, r.value]))
  })

  it.effect("a plain SQL INSERT of scheduler.paused pauses, stored as the semaphore row only", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const meta = sql(`${yield* TestSchema}.scheduler_meta`)
      const semaphore = yield* Semaphore
      yield* semaphore.setGreen
      yield* sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', 'true')`
      expect(yield* semaphore.isGreen).toBe(false)
      expect(yield* switchRows).toEqual({ semaphore: "red" })
      expect((yield* (yield* Settings).switches).paused).toBe(true)
      // Inserted again (no row of that key exists to conflict with): the switch follows.
      yield* sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', ' FALSE ')`
      expect(yield* semaphore.isGreen).toBe(true)
      expect(yield* switchRows).toEqual({ semaphore: "green" })
    })
  )

  it.effect("a plain SQL write of a non-boolean scheduler.paused fails with check_violation and changes nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const meta = sql(`${yield* TestSchema}.scheduler_meta`)
      const semaphore = yield* Semaphore
      yield* semaphore.setRed
      const result = yield* Effect.either(sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', 'later')`)
      expect(Either.isLeft(result) && (result.left.cause as { code?: unknown }).code).toBe("23514")
      expect(yield* switchRows).toEqual({ semaphore: "red" })
      expect(yield* semaphore.isGreen).toBe(false)
      yield* semaphore.setGreen
    })
  )

  it.effect(
    "a semaphore row edited by hand reads the same through the Semaphore and the switches, in every boolean spelling",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const meta = sql(`${yield* TestSchema}.scheduler_meta`)
        const semaphore = yield* Semaphore
        const settings = yield* Settings
        yield* semaphore.setGreen
        for (const [value, isPaused] of [
          ["red", true],
          [" RED ", true],
          ["true", true],
          ["1", true],
          ["on", true],
          ["green", false],
          ["false", false],
          ["off", false]
        ] as const) {
          yield* sql`UPDATE ${meta} SET value = ${value} WHERE key = 'semaphore'`
          const seen = {
            value,
            switches: (yield* settings.switches).paused,
            semaphoreGreen: yield* semaphore.isGreen
          }
          expect(seen).toEqual({ value, switches: isPaused, semaphoreGreen: !isPaused })
        }
        yield* semaphore.setGreen
      })
  )
})
