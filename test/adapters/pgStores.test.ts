/**
 * The Postgres JobStore, Settings and the pause switch shared with the queue against the contract suites, plus what
 * only the database can show: the switch written by plain SQL (integration: a real Postgres).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import { QueueStore, SettingKeys, Settings } from "../../src/index.js"
import { suite } from "../contracts/JobStoreContract.js"
import { suite as pauseSwitchSuite } from "../contracts/PauseSwitchContract.js"
import { suite as settingsSuite } from "../contracts/SettingsContract.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

suite("postgres", PgStores("jobstore"))
settingsSuite("postgres", PgStores("settings"))
pauseSwitchSuite("postgres", PgStores("pause"), { wakes: "eventually" })

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
      const queue = yield* QueueStore
      yield* queue.setSemaphore(true, new Date())
      yield* sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', 'true')`
      expect(yield* queue.getSemaphore()).toBe(false)
      expect(yield* switchRows).toEqual({ semaphore: "red" })
      expect((yield* (yield* Settings).switches).paused).toBe(true)
      // Inserted again (no row of that key exists to conflict with): the switch follows.
      yield* sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', ' FALSE ')`
      expect(yield* queue.getSemaphore()).toBe(true)
      expect(yield* switchRows).toEqual({ semaphore: "green" })
    })
  )

  it.effect("a plain SQL write of a non-boolean scheduler.paused fails with check_violation and changes nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const meta = sql(`${yield* TestSchema}.scheduler_meta`)
      const queue = yield* QueueStore
      yield* queue.setSemaphore(false, new Date())
      const result = yield* Effect.either(sql`INSERT INTO ${meta} (key, value) VALUES ('scheduler.paused', 'later')`)
      expect(Either.isLeft(result) && (result.left.cause as { code?: unknown }).code).toBe("23514")
      expect(yield* switchRows).toEqual({ semaphore: "red" })
      expect(yield* queue.getSemaphore()).toBe(false)
      yield* queue.setSemaphore(true, new Date())
    })
  )

  it.effect("a semaphore row edited by hand reads the same through both ports, in every boolean spelling", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const meta = sql(`${yield* TestSchema}.scheduler_meta`)
      const queue = yield* QueueStore
      const settings = yield* Settings
      yield* queue.setSemaphore(true, new Date())
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
          getBool: yield* settings.getBool(SettingKeys.paused),
          switches: (yield* settings.switches).paused,
          semaphoreGreen: yield* queue.getSemaphore()
        }
        expect(seen).toEqual({ value, getBool: Option.some(isPaused), switches: isPaused, semaphoreGreen: !isPaused })
      }
      yield* queue.setSemaphore(true, new Date())
    })
  )
})
