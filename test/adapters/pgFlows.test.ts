/**
 * The Postgres QueueStore against the flow contract, plus what only the database shows: waiting items written by
 * plain SQL, and a 2,000-step graph run by concurrent claimers in dependency order with its failures cascading.
 * Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import { type FlowStepInput, type QueueClaim, QueueStore } from "../../src/index.js"
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

  it.effect(
    "a 2,000-step graph with fan-out and fan-in runs in dependency order under concurrent claimers; failures cascade",
    () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = "graph_step"
        // Ten layers of 200: each step waits for two of the layer above (fan-in), and each is waited for by two
        // (fan-out); one root fans out to the first layer, one sink waits for the whole last layer.
        const width = 200
        const depth = 10
        const steps: Array<FlowStepInput> = [{ key: "root", taskType: t, thread: 1 }]
        for (let l = 0; l < depth; l++)
          for (let i = 0; i < width; i++)
            steps.push({
              key: `${l}:${i}`,
              taskType: t,
              thread: 1,
              after: l === 0 ? ["root"] : [`${l - 1}:${i}`, `${l - 1}:${(i + 1) % width}`]
            })
        steps.push({ key: "sink", taskType: t, thread: 1, after: Array.from({ length: width }, (_, i) => `9:${i}`) })
        const flow = yield* q.enqueueFlow(steps, T0)
        const keyOf = new Map(Object.entries(flow).map(([key, id]) => [id, key]))
        const afterOf = new Map(steps.map((s) => [s.key, s.after ?? []]))
        // Steps of layer 4 whose index is a multiple of 50 fail for good.
        const fails = (key: string) => /^4:/.test(key) && Number(key.split(":")[1]) % 50 === 0
        const done = new Set<string>()
        const ran: Array<string> = []
        const worker = (owner: string) =>
          Effect.gen(function* () {
            let idle = 0
            while (idle < 20) {
              const claims: ReadonlyArray<QueueClaim> = yield* q.claimBatch(claimOpts([t], owner))
              if (claims.length === 0) {
                idle++
                yield* Effect.sleep("20 millis")
                continue
              }
              idle = 0
              for (const claim of claims) {
                const key = keyOf.get(claim.item.id)!
                // Every step it waits for finished successfully before it was claimed.
                for (const dep of afterOf.get(key)!) expect(done.has(dep)).toBe(true)
                expect(Object.keys(claim.inputs ?? {}).sort()).toEqual([...afterOf.get(key)!].sort())
                ran.push(key)
              }
              // Marked done before the record is sent: a waiter can be claimed (by the other claimer) only once the
              // record committed, which may be before this fiber goes on.
              for (const claim of claims) {
                const key = keyOf.get(claim.item.id)!
                if (!fails(key)) done.add(key)
              }
              // Retried as the runner's results writer retries: two batches settling the same waiters in opposite
              // orders may deadlock, and Postgres then aborts one of them.
              const recorded = yield* q
                .recordResults(
                  claims.map((claim) => {
                    const key = keyOf.get(claim.item.id)!
                    return {
                      claim,
                      result: fails(key)
                        ? { startedAt: T0, finishedAt: T0, error: "boom" }
                        : { startedAt: T0, finishedAt: T0, output: JSON.stringify(key) }
                    }
                  })
                )
                .pipe(Effect.retry({ times: 5 }))
              expect(recorded.every((r) => r)).toBe(true)
            }
          })
        yield* Effect.all([worker("a"), worker("b")], { concurrency: 2 })
        // No step ran twice; the failed steps' descendants never ran.
        expect(new Set(ran).size).toBe(ran.length)
        const doomed = new Set<string>()
        for (const s of steps) if ((s.after ?? []).some((k) => fails(k) || doomed.has(k))) doomed.add(s.key)
        expect(doomed.has("sink")).toBe(true)
        expect(ran.length).toBe(steps.length - doomed.size)
        for (const key of doomed) expect(ran.includes(key)).toBe(false)
        // Every step has exactly one log row: ok, failed, or not run naming what it waited for.
        const sql = (yield* SqlClient.SqlClient).withoutTransforms()
        const schema = yield* TestSchema
        const log = yield* sql<{ id: string; item: string; status: string; error_msg: string }>`
          SELECT id::text AS id, queue_item_id::text AS item, status, error_msg FROM ${sql(`${schema}.processed_items`)}
          WHERE queue_item_id = ANY(${Object.values(flow)}::bigint[])`
        expect(log.length).toBe(steps.length)
        expect(new Set(log.map((r) => r.item)).size).toBe(steps.length)
        // A step's log row comes after those of everything it waited for (it was claimed after they committed).
        const logId = new Map(log.map((r) => [keyOf.get(r.item)!, BigInt(r.id)]))
        for (const s of steps)
          if (!doomed.has(s.key))
            for (const dep of s.after ?? []) expect(logId.get(dep)! < logId.get(s.key)!).toBe(true)
        for (const row of log) {
          const key = keyOf.get(row.item)!
          if (doomed.has(key))
            expect(row.error_msg).toMatch(/^not run: it waited for item \d+, which (failed|did not run)$/)
          else expect(row.status).toBe(fails(key) ? "error" : "ok")
        }
        const [left] = yield* sql<{ n: number }>`
          SELECT ((SELECT count(*) FROM ${sql(`${schema}.queue_waiting`)}) +
            (SELECT count(*) FROM ${sql(`${schema}.queue_items`)} WHERE task_type = ${t}))::int AS n`
        expect(left!.n).toBe(0)
      }),
    { timeout: 120_000 }
  )
})
