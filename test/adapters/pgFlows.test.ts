/**
 * The Postgres QueueStore against the flow contract, plus what only the database shows: waiting items written by
 * plain SQL, and an enqueue racing the record of what it waits for. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Option } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgReadModel from "../../src/adapters/postgres/PgReadModel.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import { QueueStore } from "../../src/index.js"
import { suite } from "../contracts/FlowContract.js"
import { TestSchema } from "../support/database.js"
import { blocked, connect, patient, query } from "../support/locks.js"
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

layer(PgQueue("flow_steps"), { timeout: "120 seconds", excludeTestServices: true })(
  "a flow drawn whole for its life (flow_steps, migration 0023)",
  (it) => {
    /** Each step of the flow around `id` as [key, state, after by key, depth], by depth then key. */
    const drawn = (reads: PgReadModel.PgReadModel, id: string, keyOf: ReadonlyMap<string, string>) =>
      Effect.map(reads.flow(id, 300), (nodes) =>
        nodes
          .map(
            (n) => [keyOf.get(n.id) ?? n.id, n.state, n.after.map((a) => keyOf.get(a) ?? a).join(","), n.depth] as const
          )
          .sort((x, y) => x[3] - y[3] || x[0].localeCompare(y[0]))
      )
    const count = (sql: SqlClient.SqlClient, schema: string, ids?: ReadonlyArray<string>) =>
      Effect.map(
        ids === undefined
          ? sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.flow_steps`)}`
          : sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.flow_steps`)}
                               WHERE id = ANY(${ids}::bigint[])`,
        (rows) => rows[0]!.n
      )

    it.effect(
      "every step and edge of a finished flow, each with its state, read from any step; retention removes them with the log",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const sql = (yield* SqlClient.SqlClient).withoutTransforms()
          const schema = yield* TestSchema
          const reads = yield* PgReadModel.make({ schema })
          const t = "drawn"
          // a, then b and c side by side; d after c, e after b and d; g after b (cancelled while it waits), h after g.
          const ids = yield* q.enqueueFlow(
            [
              { key: "a", taskType: t, thread: 1 },
              { key: "b", taskType: t, thread: 1, after: ["a"] },
              { key: "c", taskType: t, thread: 1, after: ["a"] },
              { key: "d", taskType: t, thread: 1, after: ["c"] },
              { key: "e", taskType: t, thread: 1, after: ["b", "d"] },
              { key: "g", taskType: `${t}_g`, thread: 1, after: ["b"] },
              { key: "h", taskType: t, thread: 1, after: ["g"] }
            ],
            T0
          )
          const keyOf = new Map(Object.entries(ids).map(([key, id]) => [id, key]))
          const all = Object.values(ids)
          expect(yield* count(sql, schema, all)).toBe(7)

          const [claimA] = yield* q.claimBatch(claimOpts([t], "w"))
          expect(claimA!.item.id).toBe(ids["a"])
          // a runs: read from a last step, everything is there already, in columns by longest path.
          expect(yield* drawn(reads, ids["h"]!, keyOf)).toEqual([
            ["a", "running", "", -3],
            ["b", "waiting", "a", -2],
            ["c", "waiting", "a", -2],
            ["d", "waiting", "c", -1],
            ["g", "waiting", "b", -1],
            ["e", "waiting", "b,d", 0],
            ["h", "waiting", "g", 0]
          ])
          yield* q.recordResults([{ claim: claimA!, result: { startedAt: T0, finishedAt: T0, output: '"a"' } }])
          // b and c released (their queue_waiting rows gone): still drawn, queued, with what they waited for.
          const released = yield* q.claimBatch(claimOpts([t], "w"))
          expect(released.map((c) => keyOf.get(c.item.id)).sort()).toEqual(["b", "c"])
          const claimB = released.find((c) => c.item.id === ids["b"])!
          const claimC = released.find((c) => c.item.id === ids["c"])!
          yield* q.recordResults([
            { claim: claimC, result: { startedAt: T0, finishedAt: T0, error: "boom" } },
            { claim: claimB, result: { startedAt: T0, finishedAt: T0 } }
          ])
          // g is cancelled while it waits: h is not run; g's task type is not claimed here.
          expect(Option.isSome(yield* q.cancel(ids["g"]!))).toBe(true)
          expect(yield* q.claimBatch(claimOpts([t, `${t}_g`], "w"))).toEqual([])

          // From the failed step: every step and edge of the flow, its state, in columns by longest path.
          expect(yield* drawn(reads, ids["c"]!, keyOf)).toEqual([
            ["a", "ok", "", -1],
            ["b", "ok", "a", 0],
            ["c", "error", "a", 0],
            ["d", "not run", "c", 1],
            ["g", "cancelled", "b", 1],
            ["e", "not run", "b,d", 2],
            ["h", "not run", "g", 2]
          ])
          const [fromA, fromE] = yield* Effect.all([reads.flow(ids["a"]!, 300), reads.flow(ids["e"]!, 300)])
          expect(fromA.map((n) => n.id).sort()).toEqual([...all].sort())
          expect(fromE.map((n) => n.id).sort()).toEqual([...all].sort())
          // Bounded: the nearest first (distance from c: itself, then a and d, then b and e), more said by the count.
          expect((yield* reads.flow(ids["c"]!, 3)).map((n) => keyOf.get(n.id))).toEqual(["a", "c", "d"])
          expect(yield* reads.waitingCount()).toBe(0)

          // Retention by age, its cut between the enqueue (T0) and the log rows (the database's now): no log row goes,
          // and no step either, not even the cancelled one (nothing logged), since h, which waited for it, is kept.
          const cut = new Date(T0.getTime() + 86_400_000)
          expect(yield* q.pruneProcessed({ olderThan: cut, keepLast: undefined, limit: 1000 })).toBe(0)
          expect(yield* count(sql, schema, all)).toBe(7)
          // Keep the newest log row (h's, recorded as not run when g was cancelled): the steps go with their log,
          // but h and what it waited for, transitively, stay (the links h holds): what is kept stays whole.
          const log = yield* sql<{ item: string }>`
            SELECT queue_item_id::text AS item FROM ${sql(`${schema}.processed_items`)} ORDER BY id DESC LIMIT 1`
          expect(log[0]!.item).toBe(ids["h"])
          expect(yield* q.pruneProcessed({ olderThan: undefined, keepLast: 1, limit: 1000 })).toBe(5)
          expect(yield* drawn(reads, ids["h"]!, keyOf)).toEqual([
            ["a", "gone", "", -3],
            ["b", "gone", "a", -2],
            ["g", "cancelled", "b", -1],
            ["h", "not run", "g", 0]
          ])
          // And the rest: nothing of the flow is left.
          yield* q.pruneProcessed({ olderThan: new Date(Date.now() + 3_600_000), keepLast: undefined, limit: 1000 })
          expect(yield* count(sql, schema, all)).toBe(0)
          expect(yield* drawn(reads, ids["c"]!, keyOf)).toEqual([["c", "gone", "", 0]])
        })
    )

    it.effect("a step waiting since before migration 0023 (no flow_steps row) is drawn from queue_waiting", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const sql = (yield* SqlClient.SqlClient).withoutTransforms()
        const schema = yield* TestSchema
        const reads = yield* PgReadModel.make({ schema })
        const first = yield* q.enqueue({ taskType: "before_0023", thread: 1 }, T0)
        const old = yield* q.enqueue({ taskType: "before_0023_waiter", thread: 1, after: [first.id] }, T0)
        const kept = yield* q.enqueue({ taskType: "after_0023_waiter", thread: 1, after: [old.id] }, T0)
        yield* sql`DELETE FROM ${sql(`${schema}.flow_steps`)} WHERE id = ${old.id}::bigint`
        const nodes = yield* reads.flow(first.id, 300)
        expect(nodes.map((n) => [n.id, n.state, n.after, n.depth])).toEqual([
          [first.id, "queued", [], 0],
          [old.id, "waiting", [first.id], 1],
          [kept.id, "waiting", [old.id], 2]
        ])
        yield* Effect.forEach([kept.id, old.id, first.id], (id) => q.cancel(id))
      })
    )

    it.effect("plain items write nothing to flow_steps: enqueue, enqueueMany, SQL, claims and records", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const sql = (yield* SqlClient.SqlClient).withoutTransforms()
        const schema = yield* TestSchema
        const t = "plain_steps"
        const before = yield* count(sql, schema)
        yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        yield* q.enqueueMany(
          [
            { taskType: t, thread: 1 },
            { taskType: t, thread: 1, priority: 3 }
          ],
          T0
        )
        yield* sql`INSERT INTO ${sql(`${schema}.queue_items`)} (task_type, thread) VALUES (${t}, 1)`
        const claims = yield* q.claimBatch(claimOpts([t], "w"))
        expect(claims).toHaveLength(4)
        yield* q.recordResults(claims.map((claim) => ({ claim, result: { startedAt: T0, finishedAt: T0 } })))
        expect(yield* count(sql, schema)).toBe(before)
        // An item that waits is kept: the count above could fail.
        yield* q.enqueue({ taskType: t, after: [claims[0]!.item.id] }, T0)
        expect(yield* count(sql, schema)).toBe(before + 1)
      })
    )
  }
)

/**
 * Locks, seen from outside on connections of the test's own: an enqueue that waits for items (its trigger locks each
 * of them, in id order) meets result batches and lease renewals, which lock the same rows. Integration: a real
 * Postgres, its one-second deadlock check.
 */
layer(PgQueue("flow_locks"), { timeout: "120 seconds", excludeTestServices: true })(
  "locks between an enqueue that waits and the items it waits for",
  (it) => {
    /**
     * An enqueue (as `run` makes it) that waits for two items meets another transaction that holds the second and
     * then wants the first: the cycle is broken by aborting the enqueue (the other is `patient`).
     */
    const deadlocked = <A, E>(t: string, run: (after: ReadonlyArray<string>) => Effect.Effect<A, E>) =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const schema = yield* TestSchema
        const a = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        const b = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        const other = yield* patient
        const probe = yield* connect
        yield* query(other, "BEGIN")
        yield* query(other, `SELECT 1 FROM ${schema}.queue_items WHERE id = $1 FOR UPDATE`, [b.id])
        // The enqueue locks a, then waits for b.
        const enqueue = yield* Effect.fork(run([a.id, b.id]))
        yield* blocked(probe, schema, "queue_waiting")
        // The other transaction wants a, which the enqueue holds.
        yield* query(other, `SELECT 1 FROM ${schema}.queue_items WHERE id = $1 FOR UPDATE`, [a.id])
        yield* query(other, "ROLLBACK")
        const result = yield* Fiber.join(enqueue)
        const waiting = yield* query(
          probe,
          `SELECT task_type, remaining FROM ${schema}.queue_waiting WHERE task_type LIKE $1`,
          [`${t}%`]
        )
        return { result, waiting: waiting.rows }
      })

    it.scoped("an enqueue chosen as a deadlock's victim is written again, and waits as asked", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const { result, waiting } = yield* deadlocked("victim", (after) =>
          q.enqueue({ taskType: "victim_after", after }, T0)
        )
        expect(waiting).toEqual([{ task_type: "victim_after", remaining: 2 }])
        expect(result.status).toBe("pending")
      })
    )

    it.scoped("inside the caller's transaction too (a savepoint), which then commits what it wrote before", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const { result, waiting } = yield* deadlocked("victim_tx", (after) =>
          sql.withTransaction(
            Effect.gen(function* () {
              const first = yield* q.enqueue({ taskType: "victim_tx_first" }, T0)
              const ids = yield* q.enqueueMany([{ taskType: "victim_tx_after", after }], T0)
              return [first.id, ...ids]
            })
          )
        )
        expect(waiting).toEqual([{ task_type: "victim_tx_after", remaining: 2 }])
        const [first] = yield* q.claimBatch(claimOpts(["victim_tx_first"], "w"))
        expect(first?.item.id).toBe(result[0])
      })
    )
  }
)
