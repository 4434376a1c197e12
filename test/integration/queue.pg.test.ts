/**
 * The runner with the Postgres queue in-process (integration: a real Postgres, the real clock).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Either, Layer, Ref } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import { QueueStore, Runner } from "../../src/index.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"

const Live = Runner.layer({ workers: 8, interval: "1 second" }).pipe(
  Layer.provideMerge(Layer.unwrapEffect(Effect.map(TestSchema, (schema) => PgQueueStore.layer({ schema })))),
  Layer.provideMerge(PgStores("queuepg"))
)

const processedCount = (itemId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* TestSchema
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ${sql(`${schema}.processed_items`)} WHERE queue_item_id = ${itemId}::bigint`
    return row!.n
  })

layer(Live, { timeout: "60 seconds", excludeTestServices: true })("the queue on Postgres, in-process", (it) => {
  it.effect("a max_runs 3, thread 1 item runs its three repetitions at the same time, then has three rows", () =>
    Effect.gen(function* () {
      const runner = yield* Runner.Runner
      const queue = yield* QueueStore
      const started = yield* Ref.make(0)
      const allThree = yield* Deferred.make<void>()
      yield* runner.register("fanout", () =>
        Effect.gen(function* () {
          if ((yield* Ref.updateAndGet(started, (n) => n + 1)) === 3) yield* Deferred.succeed(allThree, undefined)
          // Each repetition waits until all three are running: they can only finish if they overlap.
          yield* Deferred.await(allThree)
        })
      )
      yield* runner.start
      const item = yield* queue.enqueue({ taskType: "fanout", payload: "x", maxRuns: 3, thread: 1 }, new Date())
      yield* Deferred.await(allThree).pipe(Effect.timeout("10 seconds"))
      for (let i = 0; i < 100 && (yield* processedCount(item.id)) < 3; i++) yield* Effect.sleep("50 millis")
      expect(yield* processedCount(item.id)).toBe(3)
      yield* Effect.sleep("300 millis")
      expect(yield* processedCount(item.id)).toBe(3)
    })
  )

  it.effect("enqueue inside the caller's transaction commits or rolls back with it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const queue = yield* QueueStore
      const failed = yield* Effect.either(
        sql.withTransaction(
          Effect.gen(function* () {
            yield* queue.enqueue({ taskType: "tx-test", payload: "rolled back" }, new Date())
            return yield* Effect.fail("business rule broken" as const)
          })
        )
      )
      expect(Either.isLeft(failed)).toBe(true)
      yield* sql.withTransaction(queue.enqueue({ taskType: "tx-test", payload: "committed" }, new Date()))
      const rows = yield* sql<{ payload: string }>`
        SELECT payload FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'tx-test'`
      expect(rows).toEqual([{ payload: "committed" }])
    })
  )
})

// A 30 s poll: an item due in between can only start on time if the idle runner wakes for it.
const SlowPoll = Runner.layer({ workers: 2, interval: "30 seconds" }).pipe(
  Layer.provideMerge(Layer.unwrapEffect(Effect.map(TestSchema, (schema) => PgQueueStore.layer({ schema })))),
  Layer.provideMerge(PgStores("queuedelay"))
)

layer(SlowPoll, { timeout: "60 seconds", excludeTestServices: true })("delayed items on Postgres", (it) => {
  it.effect(
    "an idle runner (30 s poll) starts an item delayed by plain SQL within about a second of its run_after",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const runner = yield* Runner.Runner
        const startedAt = yield* Deferred.make<number>()
        yield* runner.register("delayed", () => Deferred.succeed(startedAt, Date.now()))
        yield* runner.start
        yield* Effect.sleep("300 millis")
        const [row] = yield* sql<{ run_after: Date }>`
        INSERT INTO ${sql(`${schema}.queue_items`)} (task_type, payload, run_after)
        VALUES ('delayed', 'x', now() + interval '2 seconds') RETURNING run_after`
        const due = new Date(row!.run_after).getTime()
        const started = yield* Deferred.await(startedAt).pipe(Effect.timeout("10 seconds"))
        // Not before it is due; and well before the next poll (30 s). A wide bound: this is about waking, not speed.
        expect(started).toBeGreaterThanOrEqual(due)
        expect(started - due).toBeLessThan(1_500)
      })
  )
})
