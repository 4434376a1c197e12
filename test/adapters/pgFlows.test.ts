/**
 * The Postgres QueueStore against the flow contract, plus what only the database shows: waiting items written by
 * plain SQL, and an enqueue racing the record of what it waits for. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import { QueueStore } from "../../src/index.js"
import { suite } from "../contracts/FlowContract.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated, queueInspector } from "../support/pgStores.js"

const PgQueue = (label: string) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(PgQueueStore.layer({ schema }), PgWakeUps.layer({ schema }), queueInspector(schema))
    )
  ).pipe(Layer.provideMerge(PgMigrated(label)))

suite("postgres", PgQueue("flows"))

const T0 = new Date("2026-01-01T00:00:00Z")
const claimOpts = (taskTypes: ReadonlyArray<string>, owner: string, limit = 40) => ({
  limit,
  taskTypes,
  owner,
  leaseUntil: new Date(T0.getTime() + 600_000),
  now: T0,
  repeatAfter: T0
})

layer(PgQueue("flows_sql"), { timeout: "120 seconds", excludeTestServices: true })("flows on Postgres", (it) => {
  it.effect("plain SQL: an INSERT into queue_waiting waits for the ids in its after column", () =>
    Effect.gen(function* () {
      const q = yield* QueueStore
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const schema = yield* TestSchema
      const a = yield* q.enqueue({ taskType: "sql_dep", thread: 1 }, T0)
      const [row] = yield* sql<{ id: string }>`
        INSERT INTO ${sql(`${schema}.queue_waiting`)} (task_type, payload, after)
        VALUES ('sql_waiter', '{"x":1}', ${`{${a.id}}`}::bigint[]) RETURNING id::text AS id`
      expect(yield* q.claimBatch(claimOpts(["sql_waiter"], "w"))).toEqual([])
      const [claimA] = yield* q.claimBatch(claimOpts(["sql_dep"], "w"))
      yield* q.recordResults([{ claim: claimA!, result: { startedAt: T0, finishedAt: T0, output: '"made"' } }])
      const [claimW] = yield* q.claimBatch(claimOpts(["sql_waiter"], "w"))
      expect(claimW!.item).toMatchObject({ id: row!.id, payload: '{"x":1}' })
      expect(claimW!.inputs).toEqual({ [a.id]: "made" })
      // An unknown id: the INSERT fails with the trigger's one clear error.
      const refused = yield* Effect.either(
        sql`INSERT INTO ${sql(`${schema}.queue_waiting`)} (task_type, after) VALUES ('sql_waiter', '{987654321}')`
      )
      expect(Either.isLeft(refused) && String((refused.left.cause as Error).message)).toMatch(
        /after names item 987654321, which is unknown/
      )
    })
  )

  it.effect("an item enqueued after one that finishes at that very moment is released, never left waiting", () =>
    Effect.gen(function* () {
      const q = yield* QueueStore
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      const schema = yield* TestSchema
      for (let round = 0; round < 40; round++) {
        const t = `race_${round}`
        const dep = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        const [claim] = yield* q.claimBatch(claimOpts([t], "w"))
        // The record and the enqueue race on separate connections of the pool.
        const [, waiter] = yield* Effect.all(
          [
            q.recordResults([{ claim: claim!, result: { startedAt: T0, finishedAt: T0, output: `${round}` } }]),
            q.enqueue({ taskType: `${t}_after`, after: [dep.id] }, T0)
          ],
          { concurrency: 2 }
        )
        const [released] = yield* q.claimBatch(claimOpts([`${t}_after`], "w"))
        expect(released?.item.id).toBe(waiter.id)
        expect(released!.inputs).toEqual({ [dep.id]: round })
      }
      const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_waiting`)}`
      expect(left!.n).toBe(0)
    })
  )
})
