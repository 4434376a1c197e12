/**
 * The Postgres QueueStore against the contract suite, plus what only the database can show: the insert-only
 * log, normalisation of rows inserted by plain SQL. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import { QueueStore } from "../../src/index.js"
import { suite } from "../contracts/QueueStoreContract.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"

const PgQueue = (label: string) =>
  Layer.unwrapEffect(Effect.map(TestSchema, (schema) => PgQueueStore.layer({ schema }))).pipe(
    Layer.provideMerge(PgMigrated(label))
  )

suite("postgres", PgQueue("queue"))

layer(PgQueue("queuesql"), { timeout: "60 seconds", excludeTestServices: true })("queue tables", (it) => {
  it.effect("rows inserted by plain SQL are normalised like the API's", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      yield* sql`INSERT INTO ${sql(`${schema}.queue_items`)} (task_type, payload, priority, max_runs, thread, status)
                 VALUES ('a', NULL, NULL, 0, 5, 'processing'), ('b', '{"x":"ü\\"''"}', 3, -7, NULL, 'pending')`
      const rows = yield* sql<{
        task_type: string
        payload: string | null
        priority: number
        max_runs: number
        thread: number
        status: string
      }>`
        SELECT task_type, payload, priority, max_runs, thread, status FROM ${sql(`${schema}.queue_items`)} ORDER BY id`
      expect(rows).toEqual([
        { task_type: "a", payload: null, priority: 0, max_runs: 1, thread: 0, status: "pending" },
        { task_type: "b", payload: `{"x":"ü\\"'"}`, priority: 3, max_runs: 1, thread: 0, status: "pending" }
      ])
    })
  )

  it.effect("processed_items refuses UPDATE and DELETE, even for a superuser; TRUNCATE works", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      yield* q.enqueue({ taskType: "log", payload: "x" }, new Date())
      const [c] = yield* q.claimBatch({
        limit: 1,
        taskTypes: ["log"],
        owner: "w",
        leaseUntil: new Date(Date.now() + 60_000),
        now: new Date(),
        repeatAfter: new Date(Date.now() + 1_000)
      })
      expect(
        yield* q.recordResults([{ claim: c!, result: { startedAt: new Date(), finishedAt: new Date() } }])
      ).toEqual([true])
      const table = sql(`${schema}.processed_items`)
      const update = yield* Effect.either(sql`UPDATE ${table} SET status = 'error'`)
      expect(Either.isLeft(update) && String((update.left.cause as Error).message)).toContain("insert-only")
      const del = yield* Effect.either(sql`DELETE FROM ${table}`)
      expect(Either.isLeft(del) && String((del.left.cause as Error).message)).toContain("insert-only")
      const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}`
      expect(count!.n).toBe(1)
      yield* sql`TRUNCATE ${table}`
      const [after] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${table}`
      expect(after!.n).toBe(0)
    })
  )
})
