/**
 * The Postgres QueueStore against the contract suite, plus what only the database can show: the insert-only
 * log, normalisation of rows inserted by plain SQL. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Either, Fiber, Layer, Option, Redacted } from "effect"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { EXACT_DEPTH_UP_TO, type QueueClaim, QueueStore } from "../../src/index.js"
import { suite } from "../contracts/QueueStoreContract.js"
import { databaseUrl, TestSchema, TestSchemaLive } from "../support/database.js"
import { blocked, connect, patient, query } from "../support/locks.js"
import { PgMigrated, queueInspector } from "../support/pgStores.js"

const PgQueue = (label: string) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(PgQueueStore.layer({ schema }), PgWakeUps.layer({ schema }), queueInspector(schema))
    )
  ).pipe(Layer.provideMerge(PgMigrated(label)))

/** What a claim of up to five executions of one type takes: at `at`, leased for `leaseMs`. */
const claimOptions = (taskType: string, at: Date, owner = "w", leaseMs = 60_000) => ({
  limit: 5,
  taskTypes: [taskType],
  owner,
  leaseUntil: new Date(at.getTime() + leaseMs),
  now: at,
  repeatAfter: at
})

/**
 * How many sequential scans of the test schema's queue `work` made, run in one transaction: the session's counter may
 * include its earlier, unflushed statements, hence a difference within one transaction.
 */
const queueSeqScansDuring = <E, R>(work: Effect.Effect<void, E, R>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* TestSchema
    const seqScans = Effect.map(
      sql<{ n: number }>`SELECT seq_scan::int AS n FROM pg_stat_xact_user_tables
        WHERE relid = ${`${schema}.queue_items`}::regclass`,
      (rows) => rows[0]!.n
    )
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        const before = yield* seqScans
        yield* work
        return (yield* seqScans) - before
      })
    )
  })

/**
 * One item of `taskType` claimed as an instance not yet upgraded past 0013 claims it: `kairos_claim` with six
 * arguments, every execution holding a lease row; leased for a minute from `at`.
 */
const claimAs0013 = (taskType: string, at: Date) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const schema = yield* TestSchema
    return yield* sql<{ lease_id: string; token: string }>`
      SELECT lease_id::text AS lease_id, token FROM ${sql(`${schema}.kairos_claim`)}(
        ARRAY[${taskType}]::text[], 1, 'old', ${at}::timestamptz, ${new Date(at.getTime() + 60_000)}::timestamptz,
        ${at}::timestamptz)`
  })

suite("postgres", PgQueue("queue"))

// The same contract over a client kairos did not build (a user's own PgClient layer): no pool of kairos's in
// context, so the statements PgPrepared sends to the pool directly go through @effect/sql instead.
const PgQueueOverOwnClient = Layer.unwrapEffect(
  Effect.map(TestSchema, (schema) =>
    Layer.mergeAll(PgQueueStore.layerOverClient({ schema }), PgWakeUps.layer({ schema }), queueInspector(schema))
  )
).pipe(
  Layer.provideMerge(Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema })))),
  Layer.provideMerge(TestSchemaLive("queueown")),
  Layer.provideMerge(
    Layer.suspend(() =>
      PgClient.layer({ url: Redacted.make(databaseUrl()), maxConnections: 4, applicationName: "kairos-test" })
    )
  )
)

suite("postgres over a client of the user's own", PgQueueOverOwnClient)

layer(PgQueue("queuesql"), { timeout: "60 seconds", excludeTestServices: true })("queue tables", (it) => {
  it.effect(
    "a claim and its record read queue_items through its indexes only, whatever the backlog (no sequential scan)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const items = sql(`${schema}.queue_items`)
        yield* sql`INSERT INTO ${items} (task_type, payload, thread) SELECT 'backlog', '{}', 1 FROM generate_series(1, 40000)`
        yield* sql`INSERT INTO ${items} (task_type, payload, thread)
          SELECT 'backlog-seq', '{}', 0 FROM generate_series(1, 20000)`
        yield* sql`ANALYZE ${items}`
        // The sequential scans of the queue around the store's claims and records.
        const scans = yield* queueSeqScansDuring(
          Effect.gen(function* () {
            const queue = yield* QueueStore
            const at = new Date()
            const request = {
              owner: "scan-test",
              now: at,
              leaseUntil: new Date(at.getTime() + 60_000),
              repeatAfter: at
            }
            for (const limit of [20, 500]) {
              const claims = yield* queue.claimBatch({ ...request, limit, taskTypes: ["backlog"] })
              expect(claims.length).toBe(limit)
              const recorded = yield* queue.recordResults(
                claims.map((claim, i) => ({
                  claim,
                  result: { startedAt: at, finishedAt: at, error: i % 2 === 0 ? undefined : "failed" }
                }))
              )
              expect(recorded.every((r) => r)).toBe(true)
            }
            // A chain of sequential items, one success recorded with the claim of the next, step by step.
            const [first] = yield* queue.claimBatch({ ...request, limit: 1, taskTypes: ["backlog-seq"] })
            let claim = first!
            for (let i = 0; i < 3; i++) {
              const step = yield* queue.recordAndClaim([{ claim, result: { startedAt: at, finishedAt: at } }], {
                ...request,
                limit: 1,
                taskTypes: ["backlog-seq"]
              })
              expect(step.recorded).toEqual([true])
              expect(step.claims.map((c) => c.item.thread)).toEqual([0])
              claim = step.claims[0]!
            }
          })
        )
        expect(scans).toBe(0)
        // Nothing left for the tests after this one: the backlog, and the log of its records (TRUNCATE is allowed).
        yield* sql`DELETE FROM ${items} WHERE task_type IN ('backlog', 'backlog-seq')`
        yield* sql`DELETE FROM ${sql(`${schema}.queue_leases`)} WHERE owner = 'scan-test'`
        yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
      })
  )

  it.effect(
    "a small claim from a small queue, and its record, find their rows through the indexes (no sequential scan, 0016)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const items = sql(`${schema}.queue_items`)
        // A queue of a thousand or so rows: small enough that the claim's generic plan used to hash a scan of all of
        // it to find the one row it claimed.
        yield* sql`INSERT INTO ${items} (task_type, payload, thread)
        SELECT 'small-' || (g % 400), '{}', g % 2 FROM generate_series(1, 1200) g`
        yield* sql`ANALYZE ${items}`
        const scans = yield* queueSeqScansDuring(
          Effect.gen(function* () {
            const queue = yield* QueueStore
            const at = new Date()
            const request = {
              owner: "small-test",
              now: at,
              leaseUntil: new Date(at.getTime() + 60_000),
              repeatAfter: at
            }
            for (const t of [1, 2, 3, 4]) {
              const claims = yield* queue.claimBatch({ ...request, limit: 20, taskTypes: [`small-${t}`] })
              // Three rows of each type, all sequential or all concurrent: one claimable at a time, or all three.
              expect(claims.map((c) => c.item.thread)).toEqual(t % 2 === 0 ? [0] : [1, 1, 1])
              const recorded = yield* queue.recordResults(
                claims.map((claim) => ({ claim, result: { startedAt: at, finishedAt: at } }))
              )
              expect(recorded.every((r) => r)).toBe(true)
            }
          })
        )
        expect(scans).toBe(0)
      }).pipe(
        Effect.ensuring(
          Effect.flatMap(Effect.all([SqlClient.SqlClient, TestSchema]), ([sql, schema]) =>
            Effect.ignore(sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type LIKE 'small-%'`)
          )
        )
      )
  )

  it.effect("a chain's step whose item was changed by SQL to run again is recorded as a repetition, not deleted", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const queue = yield* QueueStore
      const items = sql(`${schema}.queue_items`)
      const at = new Date()
      const request = { owner: "w1", now: at, leaseUntil: new Date(at.getTime() + 60_000), repeatAfter: at }
      const item = yield* queue.enqueue({ taskType: "raised", payload: "r" }, at)
      const [claim] = yield* queue.claimBatch({ ...request, limit: 1, taskTypes: ["raised"] })
      yield* sql`UPDATE ${items} SET max_runs = 2 WHERE id = ${item.id}::bigint`
      const step = yield* queue.recordAndClaim([{ claim: claim!, result: { startedAt: at, finishedAt: at } }], {
        ...request,
        limit: 1,
        taskTypes: ["raised"]
      })
      // Its last run is still to come: recorded, kept, and, free again, the type's next item.
      expect(step.recorded).toEqual([true])
      expect(step.claims.map((c) => [c.item.id, c.runsDone, c.attempt])).toEqual([[item.id, 1, 2]])
      const log = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${sql(`${schema}.processed_items`)} WHERE queue_item_id = ${item.id}::bigint`
      expect(log[0]!.n).toBe(1)
      const last = yield* queue.recordAndClaim(
        [{ claim: step.claims[0]!, result: { startedAt: at, finishedAt: at } }],
        {
          ...request,
          limit: 1,
          taskTypes: ["raised"]
        }
      )
      expect(last).toEqual({ recorded: [true], claims: [] })
      expect(yield* sql`SELECT 1 FROM ${items} WHERE id = ${item.id}::bigint`).toEqual([])
      yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
    })
  )

  it.effect("a batch of successes is recorded alike whichever of the record's two statements records it (0017)", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const queue = yield* QueueStore
      const items = sql(`${schema}.queue_items`)
      const processed = sql(`${schema}.processed_items`)
      const at = new Date()
      const logged = (ids: ReadonlyArray<string>) =>
        Effect.map(
          sql<{ id: string; payload: string; status: string }>`
            SELECT queue_item_id::text AS id, payload, status FROM ${processed}
            WHERE queue_item_id = ANY(${ids}::bigint[]) ORDER BY queue_item_id`,
          (rows) => rows.map((r) => [r.id, r.payload, r.status])
        )
      const ok = (claim: QueueClaim) => ({ claim, result: { startedAt: at, finishedAt: at } })
      // Successes only, every item at its last run: the short statement records them all.
      const plain = yield* Effect.forEach(["p1", "p2", "p3"], (payload) =>
        queue.enqueue({ taskType: "short", payload, thread: 1 }, at)
      )
      const first = yield* queue.claimBatch(claimOptions("short", at))
      expect(first.every((c) => c.leaseId.startsWith("-"))).toBe(true)
      expect(yield* queue.recordResults(first.map(ok))).toEqual([true, true, true])
      expect(yield* logged(plain.map((i) => i.id))).toEqual(plain.map((i) => [i.id, i.payload, "ok"]))
      expect(yield* sql`SELECT 1 FROM ${items} WHERE task_type = 'short'`).toEqual([])
      // Successes again, but one item was raised by SQL to run twice while it ran and another one cancelled: the
      // short statement records the third, the general one keeps the raised item, and the cancelled one's lease is
      // lost. Each result is answered for, in order, and logged once.
      const [raised, cancelled, last] = yield* Effect.forEach(["r", "c", "l"], (payload) =>
        queue.enqueue({ taskType: "short", payload, thread: 1 }, at)
      )
      const second = yield* queue.claimBatch(claimOptions("short", at))
      expect(second.map((c) => c.item.id)).toEqual([raised!.id, cancelled!.id, last!.id])
      yield* sql`UPDATE ${items} SET max_runs = 2 WHERE id = ${raised!.id}::bigint`
      expect(yield* queue.cancel(cancelled!.id)).toEqual(Option.some("processing"))
      expect(yield* queue.recordResults(second.map(ok))).toEqual([true, false, true])
      expect(yield* logged([raised!.id, cancelled!.id, last!.id])).toEqual([
        [raised!.id, "r", "ok"],
        [last!.id, "l", "ok"]
      ])
      const kept = yield* sql<{ runs_done: number; max_runs: number; lease_token: string | null }>`
        SELECT runs_done, max_runs, lease_token FROM ${items} WHERE task_type = 'short'`
      expect(kept).toEqual([{ runs_done: 1, max_runs: 1, lease_token: null }])
      yield* sql`DELETE FROM ${items} WHERE task_type = 'short'`
    })
  )

  it.effect(
    "a run-once sequential item's execution holds its lease on the item row (0016): a chain's steps write no lease row",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const queue = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        const leaseRows = Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_leases`)} l
            JOIN ${items} i ON i.id = l.item_id WHERE i.task_type = 'seqrow'`,
          (rows) => rows[0]!.n
        )
        const at = new Date("2026-06-04T12:00:00Z")
        const request = { owner: "w", now: at, leaseUntil: new Date(at.getTime() + 60_000), repeatAfter: at }
        const chain = { ...request, limit: 1, taskTypes: ["seqrow"] }
        const ok = { startedAt: at, finishedAt: at }
        const [a, b, c, d] = yield* queue.enqueueMany(
          ["a", "b", "c", "d"].map((payload) => ({ taskType: "seqrow", payload })),
          at
        )
        const [first] = yield* queue.claimBatch(chain)
        expect([first!.item.id, first!.leaseId]).toEqual([a, `-${a}`])
        // A forged token records nothing, and the type, still busy, gives nothing to claim.
        expect(yield* queue.recordAndClaim([{ claim: { ...first!, token: "forged" }, result: ok }], chain)).toEqual({
          recorded: [false],
          claims: []
        })
        const step = yield* queue.recordAndClaim([{ claim: first!, result: ok }], chain)
        expect(step.recorded).toEqual([true])
        expect(step.claims.map((x) => [x.item.id, x.leaseId])).toEqual([[b, `-${b}`]])
        expect(yield* leaseRows).toBe(0)
        expect(yield* sql`SELECT lease_owner, status, in_flight FROM ${items} WHERE id = ${b}::bigint`).toEqual([
          { lease_owner: "w", status: "processing", in_flight: 1 }
        ])
        // Its lease taken back (expired), the late result is refused and claims nothing: the item runs again.
        expect(yield* queue.recoverStuck(new Date(at.getTime() + 61_000))).toBe(1)
        const late = yield* queue.recordAndClaim([{ claim: step.claims[0]!, result: ok }], chain)
        expect(late.recorded).toEqual([false])
        expect(late.claims.map((x) => [x.item.id, x.attempt])).toEqual([[b, 2]])
        // Changed by SQL to run forever while it runs: recorded as a run, kept (not deleted), its row lease cleared.
        yield* sql`UPDATE ${items} SET max_runs = -1 WHERE id = ${b}::bigint`
        const kept = yield* queue.recordAndClaim([{ claim: late.claims[0]!, result: ok }], chain)
        expect(kept.recorded).toEqual([true])
        expect(
          yield* sql`SELECT max_runs, runs_done, status, in_flight, lease_token FROM ${items} WHERE id = ${b}::bigint`
        ).toEqual([{ max_runs: -1, runs_done: 1, status: "processing", in_flight: 1, lease_token: null }])
        // Claimed again at once, b being first in the queue: now a repeating item, its execution holds a lease row.
        expect(kept.claims.map((x) => [x.item.id, Number(x.leaseId) > 0])).toEqual([[b, true]])
        yield* sql`DELETE FROM ${items} WHERE id = ${b}::bigint`
        yield* sql`DELETE FROM ${sql(`${schema}.queue_leases`)} WHERE item_id = ${b}::bigint`
        // A lease row from an instance not yet upgraded (0013's claim) is recorded by the same step.
        const [old] = yield* claimAs0013("seqrow", at)
        expect(Number(old!.lease_id)).toBeGreaterThan(0)
        const fromOld = yield* queue.recordAndClaim(
          [
            {
              claim: { ...first!, item: { ...first!.item, id: c! }, leaseId: old!.lease_id, token: old!.token },
              result: ok
            }
          ],
          chain
        )
        expect(fromOld.recorded).toEqual([true])
        expect(fromOld.claims.map((x) => [x.item.id, x.leaseId])).toEqual([[d, `-${d}`]])
        const done = yield* queue.recordAndClaim([{ claim: fromOld.claims[0]!, result: ok }], chain)
        expect(done).toEqual({ recorded: [true], claims: [] })
        expect(yield* sql`SELECT 1 FROM ${items} WHERE task_type = 'seqrow'`).toEqual([])
        const log = yield* sql<{ payload: string }>`
          SELECT payload FROM ${sql(`${schema}.processed_items`)} WHERE task_type = 'seqrow' ORDER BY id`
        expect(log.map((r) => r.payload)).toEqual(["a", "b", "c", "d"])
        yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
      }).pipe(
        Effect.ensuring(
          Effect.flatMap(Effect.all([SqlClient.SqlClient, TestSchema]), ([sql, schema]) =>
            Effect.ignore(sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'seqrow'`)
          )
        )
      )
  )

  it.effect("a batch of results of both lease kinds is recorded with the claim of what it frees (0016)", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const queue = yield* QueueStore
      const items = sql(`${schema}.queue_items`)
      const at = new Date("2026-06-06T12:00:00Z")
      const request = { owner: "w", now: at, leaseUntil: new Date(at.getTime() + 60_000), repeatAfter: at }
      const types = ["mixed-a", "mixed-b", "mixed-c"]
      const ids = yield* queue.enqueueMany(
        types.flatMap((taskType) => [1, 2].map((n) => ({ taskType, payload: `${taskType}-${n}` }))),
        at
      )
      // Two types' first items claimed with row leases, the third's through 0013's claim (a lease row).
      const onRows = yield* queue.claimBatch({ ...request, limit: 2, taskTypes: ["mixed-a", "mixed-b"] })
      expect(onRows.map((c) => c.leaseId)).toEqual([`-${ids[0]}`, `-${ids[2]}`])
      const [old] = yield* claimAs0013("mixed-c", at)
      const inRow = {
        ...onRows[0]!,
        item: { ...onRows[0]!.item, id: ids[4]!, taskType: "mixed-c" },
        ...{ leaseId: old!.lease_id, token: old!.token }
      }
      const ok = { startedAt: at, finishedAt: at }
      const step = yield* queue.recordAndClaim(
        [...onRows, inRow].map((claim) => ({ claim, result: ok })),
        { ...request, limit: 3, taskTypes: types }
      )
      expect(step.recorded).toEqual([true, true, true])
      expect(step.claims.map((c) => [c.item.taskType, c.item.id, c.leaseId])).toEqual(
        [1, 3, 5].map((i) => [types[(i - 1) / 2], ids[i], `-${ids[i]}`])
      )
      expect(
        yield* sql`SELECT 1 FROM ${sql(`${schema}.queue_leases`)} l JOIN ${items} i ON i.id = l.item_id
        WHERE i.task_type LIKE 'mixed-%'`
      ).toEqual([])
      const log = yield* sql<{ payload: string }>`
        SELECT payload FROM ${sql(`${schema}.processed_items`)} WHERE task_type LIKE 'mixed-%' ORDER BY payload`
      expect(log.map((r) => r.payload)).toEqual(["mixed-a-1", "mixed-b-1", "mixed-c-1"])
      yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
    }).pipe(
      Effect.ensuring(
        Effect.flatMap(Effect.all([SqlClient.SqlClient, TestSchema]), ([sql, schema]) =>
          Effect.ignore(sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type LIKE 'mixed-%'`)
        )
      )
    )
  )

  it.effect("a chain's claim takes what kairos_claim takes for one type and a limit of one, in any queue state", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const items = sql(`${schema}.queue_items`)
      const at = new Date("2026-06-01T12:00:00Z")
      const args = [at, new Date(at.getTime() + 60_000), new Date(at.getTime() + 5_000)] as const
      // A random queue of one type: run-once, repeating and concurrent items, some running, some delayed.
      let seed = 7
      const rand = (n: number) => {
        seed = (seed * 1103515245 + 12345) % 2147483648
        return Math.floor(seed / 65536) % n
      }
      class Rollback {
        constructor(readonly rows: ReadonlyArray<unknown>) {}
      }
      const inRollback = <A>(query: Effect.Effect<ReadonlyArray<A>, unknown>) =>
        sql
          .withTransaction(Effect.flatMap(query, (rows) => Effect.fail(new Rollback(rows))))
          .pipe(Effect.catchAll((e) => (e instanceof Rollback ? Effect.succeed(e.rows) : Effect.fail(e))))
      let claimed = 0
      let onRows = 0
      for (let trial = 0; trial < 80; trial++) {
        const t = `diff-${trial}`
        let sequentialRunning = false
        for (let i = 0, n = 1 + rand(6); i < n; i++) {
          const thread = rand(2)
          const maxRuns = [1, 1, 2, -1][rand(4)]!
          const runAfter = [null, null, new Date(at.getTime() - 1000), new Date(at.getTime() + 1000)][rand(4)]
          const [row] = yield* sql<{ id: string }>`
            INSERT INTO ${items} (task_type, payload, thread, max_runs, priority, run_after)
            VALUES (${t}, ${String(i)}, ${thread}, ${maxRuns}, ${rand(3)}, ${runAfter})
            RETURNING id::text AS id`
          const running = rand(3) === 0 && (thread === 1 || !sequentialRunning)
          if (running) {
            if (thread === 0) sequentialRunning = true
            yield* sql`UPDATE ${items} SET status = 'processing', in_flight = 1, runs_started = 1
              WHERE id = ${row!.id}::bigint`
          }
        }
        const general = yield* inRollback(
          sql<{ id: string; attempt: number }>`SELECT id::text AS id, attempt FROM ${sql(`${schema}.kairos_claim`)}(
            ARRAY[${t}]::text[], 1, 'w', ${args[0]}, ${args[1]}, ${args[2]})`
        )
        const chain = yield* inRollback(
          sql<{ id: string; attempt: number }>`SELECT id::text AS id, attempt
            FROM ${sql(`${schema}.kairos_record_and_claim_next`)}(0, 'none', ${at}, ${at}, 0, ${t}, 'w', ${args[0]},
              ${args[1]}, ${args[2]}) WHERE recorded IS NULL`
        )
        expect({ trial, chain }).toEqual({ trial, chain: general })
        // And with leases on item rows (0016's overload against 0014's claim, as 0016 left it): the same item, with
        // the same kind of lease.
        const generalOnRows = (yield* inRollback(
          sql<{ id: string; attempt: number; on_row: boolean }>`
            SELECT id::text AS id, attempt, lease_id < 0 AS on_row FROM ${sql(`${schema}.kairos_claim`)}(
              ARRAY[${t}]::text[], 1, 'w', ${args[0]}, ${args[1]}, ${args[2]}, true)`
        )) as ReadonlyArray<{ id: string; on_row: boolean }>
        const chainOnRows = yield* inRollback(
          sql<{ id: string; attempt: number; on_row: boolean }>`
            SELECT id::text AS id, attempt, lease_id < 0 AS on_row
            FROM ${sql(`${schema}.kairos_record_and_claim_next`)}(0, 'none', ${at}, ${at}, 0, ${t}, 'w', ${args[0]},
              ${args[1]}, ${args[2]}, true) WHERE recorded IS NULL`
        )
        expect({ trial, chainOnRows }).toEqual({ trial, chainOnRows: generalOnRows })
        expect(generalOnRows.map((r) => r.id)).toEqual(general.map((r) => (r as { id: string }).id))
        onRows += generalOnRows.filter((r) => r.on_row).length
        claimed += general.length
      }
      // The states were varied enough to claim in some trials and not in others, on rows and not.
      expect(claimed).toBeGreaterThan(20)
      expect(claimed).toBeLessThan(80)
      expect(onRows).toBeGreaterThan(5)
      expect(onRows).toBeLessThan(claimed)
    }).pipe(
      Effect.ensuring(
        Effect.flatMap(Effect.all([SqlClient.SqlClient, TestSchema]), ([sql, schema]) =>
          Effect.ignore(sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type LIKE 'diff-%'`)
        )
      )
    )
  )

  it.effect(
    "repeating items claimed together take their next places in claim order, whatever join is planned (0027)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const items = sql(`${schema}.queue_items`)
        const at = new Date("2026-06-02T12:00:00Z")
        const leaseUntil = new Date(at.getTime() + 60_000)
        const repeatAfter = new Date(at.getTime() + 5_000)
        // The planner picks the UPDATE's join by the statistics of the moment; each is forced here in turn (the
        // session's cached plans dropped before and after, so that the functions are planned again).
        const joins = {
          "nested loop": [],
          merge: ["enable_nestloop", "enable_hashjoin"],
          hash: ["enable_nestloop", "enable_mergejoin"]
        } satisfies Record<string, ReadonlyArray<string>>
        for (const [join, off] of Object.entries(joins)) {
          for (const fn of ["kairos_claim", "kairos_claim_items"] as const) {
            const t = `reseq-${fn}-${join.replace(" ", "-")}`
            const [a, b, c] = yield* sql<{ id: string }>`INSERT INTO ${items} (task_type, payload, thread, max_runs)
            VALUES (${t}, 'a', 1, -1), (${t}, 'b', 1, -1), (${t}, 'c', 1, -1) RETURNING id::text AS id`
            // The queue's order (c, b, a), the ids' (a, b, c) and the rows' places in the table (c, a, b: an UPDATE
            // writes a row anew at the end) all differ, whichever a join reads the rows by.
            yield* sql`UPDATE ${items} SET seq = seq + 3000 WHERE id = ${a!.id}`
            yield* sql`UPDATE ${items} SET seq = seq + 2000 WHERE id = ${b!.id}`
            yield* sql.withTransaction(
              Effect.gen(function* () {
                for (const setting of off) yield* sql.unsafe(`SET LOCAL ${setting} = off`)
                yield* sql`DISCARD PLANS`
                const claimed =
                  fn === "kairos_claim"
                    ? yield* sql<{ payload: string }>`SELECT payload FROM ${sql(`${schema}.kairos_claim`)}(
                      ARRAY[${t}]::text[], 3, 'w', ${at}::timestamptz, ${leaseUntil}::timestamptz,
                      ${repeatAfter}::timestamptz, true)`
                    : yield* sql<{ payload: string }>`SELECT payload FROM ${sql(`${schema}.kairos_claim_items`)}(
                      ARRAY[${c!.id}, ${b!.id}, ${a!.id}]::bigint[], 'w', ${at}::timestamptz,
                      ${leaseUntil}::timestamptz, ${repeatAfter}::timestamptz)`
                expect(claimed.map((r) => r.payload)).toEqual(["c", "b", "a"])
                for (const setting of off) yield* sql.unsafe(`RESET ${setting}`)
                yield* sql`DISCARD PLANS`
              })
            )
            const order = yield* sql<{ payload: string }>`SELECT payload FROM ${items} WHERE task_type = ${t}
            ORDER BY priority DESC, seq`
            expect(
              order.map((r) => r.payload),
              `${fn}, ${join} join`
            ).toEqual(["c", "b", "a"])
            yield* sql`DELETE FROM ${sql(`${schema}.queue_leases`)} WHERE item_id IN (SELECT id FROM ${items}
            WHERE task_type = ${t})`
            yield* sql`DELETE FROM ${items} WHERE task_type = ${t}`
          }
        }
      })
  )

  it.effect("an instance not yet upgraded past 0013 still records through the record function it knows", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      const now = new Date()
      yield* q.enqueue({ taskType: "oldrecord", payload: "p" }, now)
      // Claimed as that instance claims, through kairos_claim as 0013 left it (six arguments): a lease row.
      const [claim] = (yield* claimAs0013("oldrecord", now)).map((row) => ({ leaseId: row.lease_id, token: row.token }))
      expect(Number(claim!.leaseId)).toBeGreaterThan(0)
      // kairos_record_once as 0009 made it: task types and payloads sent along.
      const recorded = yield* sql<{ id: string }>`
        SELECT r::text AS id FROM ${sql(`${schema}.kairos_record_once`)}(
          ${[claim!.leaseId]}::bigint[], ${[claim!.token]}::text[], ${["oldrecord"]}::text[], ${["p"]}::text[],
          ${["ok"]}::text[], ${[""]}::text[], ${[now.toISOString()]}::timestamptz[], ${[now.toISOString()]}::timestamptz[],
          ${[0]}::int[], ${[1]}::int[], ${[0]}::bigint[], ${[false]}::boolean[], ${[0]}::bigint[]) AS r`
      expect(recorded.map((r) => r.id)).toEqual([claim!.leaseId])
      const left = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'oldrecord'`
      expect(left[0]!.n).toBe(0)
      const log = yield* sql<{ task_type: string; payload: string }>`
        SELECT task_type, payload FROM ${sql(`${schema}.processed_items`)}`
      expect(log).toEqual([{ task_type: "oldrecord", payload: "p" }])
      // Other tests here count the log: leave it empty (TRUNCATE is the one way past its insert-only rule).
      yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
    })
  )

  it.effect(
    "a run-once concurrent item's execution holds its lease on the item row (0014): no lease row, fenced by the token",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        const now = new Date("2026-06-01T12:00:00Z")
        const opts = (at: Date, owner = "w") => claimOptions("onrow", at, owner)
        const item = yield* q.enqueue({ taskType: "onrow", payload: "p", thread: 1 }, now)
        const [claim] = yield* q.claimBatch(opts(now))
        expect(claim!.leaseId).toBe(`-${item.id}`)
        const leaseOf = sql<{ token: string | null; owner: string | null; until: Date | null; in_flight: number }>`
          SELECT lease_token AS token, lease_owner AS owner, lease_until AS until, in_flight FROM ${items}
          WHERE id = ${item.id}`
        expect(yield* leaseOf).toEqual([
          { token: claim!.token, owner: "w", until: new Date(now.getTime() + 60_000), in_flight: 1 }
        ])
        const [leaseRows] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_leases`)} l JOIN ${items} i ON i.id = l.item_id
          WHERE i.task_type = 'onrow'`
        expect(leaseRows!.n).toBe(0)
        // Renewed on the row; a wrong token renews nothing and records nothing.
        const later = new Date(now.getTime() + 120_000)
        expect(yield* q.renewLeases([claim!], later, now)).toEqual([true])
        expect((yield* leaseOf)[0]!.until).toEqual(later)
        const forged = { ...claim!, token: "forged" }
        expect(yield* q.renewLeases([forged], later, now)).toEqual([false])
        const result = { startedAt: now, finishedAt: now }
        expect(yield* q.recordResults([{ claim: forged, result }])).toEqual([false])
        // Expired, it is taken back (an execution that never finished); the late result is refused.
        expect(yield* q.recoverStuck(new Date(later.getTime() + 1))).toBe(1)
        expect(
          yield* sql`SELECT status, in_flight, unfinished, lease_token FROM ${items} WHERE id = ${item.id}`
        ).toEqual([{ status: "pending", in_flight: 0, unfinished: 1, lease_token: null }])
        expect(yield* q.recordResults([{ claim: claim!, result }])).toEqual([false])
        // Claimed again, with a new token, and recorded: the item is gone and logged once.
        const again = new Date(later.getTime() + 2)
        const [second] = yield* q.claimBatch(opts(again, "w2"))
        expect([second!.leaseId, second!.attempt]).toEqual([claim!.leaseId, 2])
        expect(second!.token).not.toBe(claim!.token)
        expect(yield* q.recordResults([{ claim: second!, result: { startedAt: again, finishedAt: again } }])).toEqual([
          true
        ])
        expect(yield* sql`SELECT 1 FROM ${items} WHERE id = ${item.id}`).toEqual([])
        const log = yield* sql<{ status: string; n: number }>`
          SELECT status, count(*)::int AS n FROM ${sql(`${schema}.processed_items`)}
          WHERE queue_item_id = ${item.id} GROUP BY status`
        expect(log).toEqual([{ status: "ok", n: 1 }])
        yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
      })
  )

  it.effect(
    "a row-leased item changed by SQL to run again while it runs is recorded as a repetition, not deleted",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        const now = new Date("2026-06-02T12:00:00Z")
        const item = yield* q.enqueue({ taskType: "onrowagain", payload: "p", thread: 1 }, now)
        const [claim] = yield* q.claimBatch(claimOptions("onrowagain", now))
        expect(claim!.leaseId).toBe(`-${item.id}`)
        yield* sql`UPDATE ${items} SET max_runs = 3 WHERE id = ${item.id}`
        expect(yield* q.recordResults([{ claim: claim!, result: { startedAt: now, finishedAt: now } }])).toEqual([true])
        expect(
          yield* sql`SELECT status, in_flight, max_runs, runs_done, lease_token FROM ${items} WHERE id = ${item.id}`
        ).toEqual([{ status: "pending", in_flight: 0, max_runs: 2, runs_done: 1, lease_token: null }])
        // Its next executions hold rows of queue_leases, as every repetition does.
        const next = yield* q.claimBatch(claimOptions("onrowagain", now))
        expect(next.map((c) => c.leaseId.startsWith("-"))).toEqual([false, false])
        expect(
          yield* q.recordResults(next.map((claim) => ({ claim, result: { startedAt: now, finishedAt: now } })))
        ).toEqual([true, true])
        expect(yield* sql`SELECT 1 FROM ${items} WHERE id = ${item.id}`).toEqual([])
        yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
      })
  )

  it.effect(
    "an item changed by SQL to run forever while it runs is kept after that run, whatever its lease (0016)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        const now = new Date("2026-06-05T12:00:00Z")
        // A row lease (run-once concurrent), and a lease row (claimed through 0013's claim, as an older instance does).
        const onRow = yield* q.enqueue({ taskType: "forever1", payload: "r", thread: 1 }, now)
        const inRow = yield* q.enqueue({ taskType: "forever2", payload: "l", thread: 1 }, now)
        const [rowClaim] = yield* q.claimBatch(claimOptions("forever1", now))
        const [old] = yield* claimAs0013("forever2", now)
        expect([rowClaim!.leaseId, Number(old!.lease_id) > 0]).toEqual([`-${onRow.id}`, true])
        yield* sql`UPDATE ${items} SET max_runs = -1 WHERE id IN (${onRow.id}::bigint, ${inRow.id}::bigint)`
        const leaseRowClaim = {
          ...rowClaim!,
          item: { ...rowClaim!.item, id: inRow.id },
          leaseId: old!.lease_id,
          token: old!.token
        }
        const result = { startedAt: now, finishedAt: now }
        expect(
          yield* q.recordResults([
            { claim: rowClaim!, result },
            { claim: leaseRowClaim, result }
          ])
        ).toEqual([true, true])
        expect(
          yield* sql`SELECT task_type, max_runs, runs_done, status, in_flight, lease_token FROM ${items}
          WHERE task_type LIKE 'forever%' ORDER BY task_type`
        ).toEqual([
          { task_type: "forever1", max_runs: -1, runs_done: 1, status: "pending", in_flight: 0, lease_token: null },
          { task_type: "forever2", max_runs: -1, runs_done: 1, status: "pending", in_flight: 0, lease_token: null }
        ])
        yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
      }).pipe(
        Effect.ensuring(
          Effect.flatMap(Effect.all([SqlClient.SqlClient, TestSchema]), ([sql, schema]) =>
            Effect.ignore(sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type LIKE 'forever%'`)
          )
        )
      )
  )

  it.effect("an instance not yet upgraded past 0014 claims with leases in queue_leases, and they are recorded", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      const now = new Date("2026-06-03T12:00:00Z")
      yield* q.enqueue({ taskType: "oldclaim", payload: "a", thread: 1 }, now)
      yield* q.enqueue({ taskType: "oldclaim", payload: "b", thread: 1 }, now)
      // kairos_claim as 0013 left it (six arguments): every execution holds a lease row.
      const rows = yield* claimAs0013("oldclaim", now)
      expect(rows.length).toBe(1)
      expect(Number(rows[0]!.lease_id)).toBeGreaterThan(0)
      // This instance claims the other with a row lease; its rescue at an expiry takes back both kinds.
      const mine = yield* q.claimBatch(claimOptions("oldclaim", now, "new", 30_000))
      expect(mine.map((c) => c.leaseId.startsWith("-"))).toEqual([true])
      expect(Option.getOrThrow(yield* q.nextLeaseExpiry("old"))).toEqual(new Date(now.getTime() + 30_000))
      expect(Option.getOrThrow(yield* q.nextLeaseExpiry("new"))).toEqual(new Date(now.getTime() + 60_000))
      expect(yield* q.recoverStuck(new Date(now.getTime() + 61_000))).toBe(2)
      const again = yield* q.claimBatch(claimOptions("oldclaim", new Date(now.getTime() + 62_000), "new"))
      expect(again.length).toBe(2)
      const result = { startedAt: now, finishedAt: now }
      expect(yield* q.recordResults(again.map((claim) => ({ claim, result })))).toEqual([true, true])
      const [left] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'oldclaim'`
      expect(left!.n).toBe(0)
      // Other tests here count the log: leave it empty (TRUNCATE is the one way past its insert-only rule).
      yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
    })
  )

  it.effect("a prepared statement whose result type changed under it (a newer instance migrated) is sent again", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      // The store has one connection to itself here, so the enqueue below runs on the connection that prepared it.
      const store = yield* Effect.provide(
        PgQueueStore.make({ schema }),
        yield* Layer.build(PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 1 }))
      )
      yield* store.enqueue({ taskType: "stale", payload: "before" }, new Date())
      // What the insert returns changes type: its prepared plan can no longer be used ("cached plan must not
      // change result type").
      yield* sql`ALTER TABLE ${sql(`${schema}.queue_items`)} ALTER COLUMN payload TYPE varchar`
      const after = yield* store.enqueue({ taskType: "stale", payload: "after" }, new Date())
      expect(after.payload).toBe("after")
      const rows = yield* sql<{ payload: string }>`
        SELECT payload FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'stale' ORDER BY id`
      expect(rows.map((r) => r.payload)).toEqual(["before", "after"])
      yield* sql`ALTER TABLE ${sql(`${schema}.queue_items`)} ALTER COLUMN payload TYPE text`
      yield* sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE task_type = 'stale'`
    }).pipe(Effect.scoped)
  )

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

  it.effect("a row inserted by plain SQL with any one column out of the normal is normalised", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const items = sql(`${schema}.queue_items`)
      // The trigger runs only for rows it would change: each case puts one column off, the rest as the API writes.
      const created = "2026-01-02T03:04:05.000Z"
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["max_runs", "NULL"],
        ["max_runs", "0"],
        ["max_runs", "-3"],
        ["thread", "NULL"],
        ["thread", "7"],
        ["priority", "NULL"],
        ["status", "'processing'"],
        ["in_flight", "2"],
        ["runs_done", "3"],
        ["runs_started", "4"],
        ["created_at", "NULL"],
        ["updated_at", "NULL"]
      ]
      for (const [column, value] of cases) {
        const values: Record<string, string> = {
          task_type: `'norm-${column}-${value.replace(/\W/g, "")}'`,
          max_runs: "1",
          thread: "0",
          priority: "0",
          status: "'pending'",
          in_flight: "0",
          runs_done: "0",
          runs_started: "0",
          created_at: `'${created}'`,
          updated_at: `'${created}'`,
          [column]: value
        }
        yield* sql.unsafe(
          `INSERT INTO "${schema}".queue_items (${Object.keys(values).join(", ")})
           VALUES (${Object.values(values).join(", ")})`
        )
      }
      const rows = yield* sql<{
        max_runs: number
        thread: number
        priority: number
        status: string
        in_flight: number
        runs_done: number
        runs_started: number
        created: boolean
        updated: boolean
      }>`
        SELECT max_runs, thread, priority, status, in_flight, runs_done, runs_started,
          created_at IS NOT NULL AS created, updated_at = created_at AS updated
        FROM ${items} WHERE task_type LIKE 'norm-%' ORDER BY id`
      expect(rows.length).toBe(cases.length)
      for (const [i, row] of rows.entries()) {
        expect({ column: cases[i]![0], value: cases[i]![1], ...row }).toEqual({
          column: cases[i]![0],
          value: cases[i]![1],
          max_runs: 1,
          thread: 0,
          priority: 0,
          status: "pending",
          in_flight: 0,
          runs_done: 0,
          runs_started: 0,
          created: true,
          // A missing created_at is now; an updated_at given stays.
          updated: cases[i]![0] !== "created_at"
        })
      }
      yield* sql`DELETE FROM ${items} WHERE task_type LIKE 'norm-%'`
    })
  )

  it.effect("an item deleted by SQL while it runs loses its lease: not renewed, its result not logged", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      const now = new Date()
      const opts = (taskType: string) => ({
        limit: 5,
        taskTypes: [taskType],
        owner: "w",
        leaseUntil: new Date(now.getTime() + 60_000),
        now,
        repeatAfter: new Date(now.getTime() + 1_000)
      })
      const once = yield* q.enqueue({ taskType: "gone1", payload: "x", thread: 1 }, now)
      const twice = yield* q.enqueue({ taskType: "gone2", payload: "y", thread: 1, maxRuns: 2 }, now)
      const claims = [...(yield* q.claimBatch(opts("gone1"))), ...(yield* q.claimBatch(opts("gone2")))]
      expect(claims.map((c) => c.item.id).sort()).toEqual([once.id, twice.id, twice.id].sort())
      yield* sql`DELETE FROM ${sql(`${schema}.queue_items`)} WHERE id IN (${once.id}, ${twice.id})`
      expect(yield* q.renewLeases(claims, new Date(now.getTime() + 120_000), now)).toEqual([false, false, false])
      const result = { startedAt: now, finishedAt: now }
      expect(yield* q.recordResults(claims.map((claim) => ({ claim, result })))).toEqual([false, false, false])
      const [logged] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${sql(`${schema}.processed_items`)} WHERE task_type IN ('gone1', 'gone2')`
      expect(logged!.n).toBe(0)
      // The run-once item's lease, held on its row, went with it; the other's are taken back once they expire.
      expect(yield* q.recoverStuck(new Date(now.getTime() + 61_000))).toBe(2)
    })
  )

  it.scoped(
    "an expired lease whose rows an open transaction holds (a record whose COMMIT went unanswered) is skipped, not waited for, and taken back once that transaction ends",
    () =>
      Effect.gen(function* () {
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const now = new Date()
        // A run-once item (its lease on its row) and one of two runs, run side by side (two leases in queue_leases).
        const once = yield* q.enqueue({ taskType: "held1", payload: "x", thread: 1 }, now)
        const many = yield* q.enqueue({ taskType: "held2", payload: "y", thread: 1, maxRuns: 2 }, now)
        expect((yield* q.claimBatch(claimOptions("held1", now, "w", 1_000))).length).toBe(1)
        expect((yield* q.claimBatch(claimOptions("held2", now, "w", 1_000))).length).toBe(2)
        // Another session holds what an execution's record locks: the item rows, and the lease row.
        const holder = yield* connect
        yield* query(holder, "BEGIN")
        yield* query(holder, `SELECT id FROM "${schema}".queue_items WHERE id = ANY($1::bigint[]) FOR UPDATE`, [
          [once.id, many.id]
        ])
        yield* query(holder, `SELECT id FROM "${schema}".queue_leases FOR UPDATE`)
        const later = new Date(now.getTime() + 2_000)
        // Not waited for: the store's statements would otherwise block until the holder ends.
        expect(yield* q.recoverStuck(later).pipe(Effect.timeout("5 seconds"))).toBe(0)
        yield* query(holder, "COMMIT")
        expect(yield* q.recoverStuck(later)).toBe(3)
        const claimed = [
          ...(yield* q.claimBatch(claimOptions("held1", later))),
          ...(yield* q.claimBatch(claimOptions("held2", later)))
        ]
        expect(claimed.map((c) => c.item.id).sort()).toEqual([once.id, many.id, many.id].sort())
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

// A schema of its own: the tests above count rows of the shared tables.
// A schema of its own: the insert-only test above counts every processed_items row of its schema.
layer(PgQueue("queuenull"), { timeout: "60 seconds", excludeTestServices: true })("NULL payloads", (it) => {
  it.effect("an item inserted by SQL with a NULL payload is logged with NULL, not ''", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      yield* sql`INSERT INTO ${sql(`${schema}.queue_items`)} (task_type, thread) VALUES ('nullsql', 1)`
      const now = new Date()
      const claims = yield* q.claimBatch({
        limit: 10,
        taskTypes: ["nullsql"],
        owner: "w1",
        leaseUntil: new Date(now.getTime() + 30_000),
        now,
        repeatAfter: new Date(now.getTime() + 10_000)
      })
      expect(claims.map((c) => c.item.payload)).toEqual([null])
      yield* q.recordResults(
        claims.map((claim) => ({ claim, result: { startedAt: now, finishedAt: now, error: "x" } }))
      )
      const logged = yield* sql<{ payload: string | null }>`
        SELECT payload FROM ${sql(`${schema}.processed_items`)} WHERE task_type = 'nullsql'`
      expect(logged).toEqual([{ payload: null }])
    })
  )
})

layer(PgQueue("queueseq"), { timeout: "60 seconds", excludeTestServices: true })("sequential claims", (it) => {
  it.effect("twenty claimers at once take one sequential item of a type, never two, and none fails", () =>
    Effect.gen(function* () {
      const q = yield* QueueStore
      const now = new Date()
      yield* q.enqueueMany(
        Array.from({ length: 50 }, (_, i) => ({ taskType: "seqrace", payload: String(i), thread: 0 })),
        now
      )
      const claim = q.claimBatch({
        limit: 10,
        taskTypes: ["seqrace"],
        owner: "w",
        leaseUntil: new Date(now.getTime() + 60_000),
        now,
        repeatAfter: now
      })
      let first: Array<{ claim: QueueClaim; result: { startedAt: Date; finishedAt: Date } }> = []
      for (let round = 0; round < 5; round++) {
        const claims = (yield* Effect.all(
          Array.from({ length: 20 }, () => claim),
          { concurrency: "unbounded" }
        )).flat()
        // The first round takes the oldest item; later rounds find the type's slot taken.
        expect(claims.map((c) => c.item.payload)).toEqual(round === 0 ? ["0"] : [])
        if (round === 0) {
          const result = { startedAt: now, finishedAt: now }
          first = claims.map((c) => ({ claim: c, result }))
        }
      }
      // Recorded, the slot is free again: the next item in order is claimed.
      expect(yield* q.recordResults(first)).toEqual([true])
      const next = yield* claim
      expect(next.map((c) => c.item.payload)).toEqual(["1"])
      yield* q.recordResults(next.map((c) => ({ claim: c, result: { startedAt: now, finishedAt: now } })))
    })
  )
})

// A schema of its own: the earliest lease of the whole table is what is measured.
layer(PgQueue("queueexpiry"), { timeout: "60 seconds", excludeTestServices: true })("lease expiry", (it) => {
  it.effect("nextLeaseExpiry: the earliest lease of any other owner; none when only the caller holds leases", () =>
    Effect.gen(function* () {
      const q = yield* QueueStore
      const now = new Date()
      expect(Option.isNone(yield* q.nextLeaseExpiry("a"))).toBe(true)
      yield* q.enqueueMany(
        Array.from({ length: 3 }, (_, i) => ({ taskType: "exp", payload: String(i), thread: 1 })),
        now
      )
      const claim = (owner: string, ms: number) =>
        q.claimBatch({
          limit: 1,
          taskTypes: ["exp"],
          owner,
          leaseUntil: new Date(now.getTime() + ms),
          now,
          repeatAfter: now
        })
      yield* claim("a", 10_000)
      yield* claim("b", 20_000)
      yield* claim("b", 5_000)
      expect(Option.getOrThrow(yield* q.nextLeaseExpiry("a")).getTime()).toBe(now.getTime() + 5_000)
      expect(Option.getOrThrow(yield* q.nextLeaseExpiry("b")).getTime()).toBe(now.getTime() + 10_000)
      expect(Option.getOrThrow(yield* q.nextLeaseExpiry("c")).getTime()).toBe(now.getTime() + 5_000)
    })
  )
})

layer(PgQueue("queueunique"), { timeout: "60 seconds", excludeTestServices: true })("unique items", (it) => {
  it.effect("twenty connections enqueue one unique key at once: one row, and all get its id", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const items = sql(`${schema}.queue_items`)
      // Twenty stores, each on a client of its own with a single connection, connected before the race starts.
      const stores = yield* Effect.forEach(Array.from({ length: 20 }), (_, i) =>
        Effect.gen(function* () {
          // Half on kairos's own client (prepared statements on its pool), half on a plain PgClient.
          const context = yield* Layer.build(
            i % 2 === 0
              ? PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 1, applicationName: "kairos-uniq" })
              : PgClient.layer({ url: Redacted.make(databaseUrl()), maxConnections: 1, applicationName: "kairos-uniq" })
          )
          yield* Effect.provide(SqlClient.SqlClient, context).pipe(Effect.flatMap((c) => c`SELECT 1`))
          return yield* Effect.provide(PgQueueStore.make({ schema }), context)
        })
      )
      for (let round = 0; round < 5; round++) {
        const key = `race-${round}`
        const go = yield* Deferred.make<void>()
        const racers = Effect.forEach(
          stores,
          (q, i) =>
            Effect.zipRight(
              Deferred.await(go),
              q.enqueue({ taskType: "uniqrace", payload: String(i), uniqueKey: key }, new Date())
            ),
          { concurrency: "unbounded" }
        )
        const [got] = yield* Effect.all([racers, Deferred.succeed(go, undefined)], { concurrency: "unbounded" })
        const rows = yield* sql<{ id: string }>`SELECT id::text AS id FROM ${items} WHERE unique_key = ${key}`
        expect(rows.length).toBe(1)
        expect(new Set(got.map((item) => item.id))).toEqual(new Set([rows[0]!.id]))
      }
      // Batches racing too, each with two keys (one listed twice): two rows, every batch gets the same ids.
      const go = yield* Deferred.make<void>()
      const batches = Effect.forEach(
        stores,
        (q, i) =>
          Effect.zipRight(
            Deferred.await(go),
            q.enqueueMany(
              [
                { taskType: "uniqrace", payload: `a${i}`, uniqueKey: "batch-a" },
                { taskType: "uniqrace", payload: `b${i}`, uniqueKey: "batch-b" },
                { taskType: "uniqrace", payload: `a${i}`, uniqueKey: "batch-a" }
              ],
              new Date()
            )
          ),
        { concurrency: "unbounded" }
      )
      const [all] = yield* Effect.all([batches, Deferred.succeed(go, undefined)], { concurrency: "unbounded" })
      const rows = yield* sql<{ id: string; unique_key: string }>`
        SELECT id::text AS id, unique_key FROM ${items} WHERE unique_key LIKE 'batch-%' ORDER BY unique_key`
      expect(rows.map((r) => r.unique_key)).toEqual(["batch-a", "batch-b"])
      for (const ids of all) expect(ids).toEqual([rows[0]!.id, rows[1]!.id, rows[0]!.id])
    }).pipe(Effect.scoped)
  )

  it.effect("a claim reports the item's columns as stored, its two times whether they are equal or not", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      const items = sql(`${schema}.queue_items`)
      const now = new Date("2026-10-25T01:30:00.123Z")
      // One row touched after it was created (a later UPDATE by SQL), one not; microseconds are cut to milliseconds.
      yield* sql`INSERT INTO ${items} (task_type, payload, priority, max_runs, thread, run_after, unique_key,
                   created_at, updated_at, group_key)
                 VALUES ('columns', 'touched', 7, 3, 1, '2026-10-25 01:00:00.5+00', 'k1',
                   '2026-10-24 23:59:59.999999+00', '2026-10-25 03:00:00.25+02', 'g1'),
                 ('columns', NULL, 0, 1, 0, NULL, NULL, '2026-01-01 00:00:00+00', '2026-01-01 00:00:00+00', NULL)`
      const claims = yield* q.claimBatch({
        limit: 5,
        taskTypes: ["columns"],
        owner: "w",
        leaseUntil: new Date(now.getTime() + 60_000),
        now,
        repeatAfter: now
      })
      // The item that runs three times is claimed three times at once (thread 1), then the other.
      const touched = {
        taskType: "columns",
        payload: "touched",
        status: "processing",
        priority: 7,
        maxRuns: 3,
        thread: 1,
        runAfter: new Date("2026-10-25T01:00:00.500Z"),
        uniqueKey: "k1",
        group: "g1",
        createdAt: new Date("2026-10-24T23:59:59.999Z"),
        updatedAt: new Date("2026-10-25T01:00:00.250Z")
      }
      const untouched = {
        taskType: "columns",
        payload: null,
        status: "processing",
        priority: 0,
        maxRuns: 1,
        thread: 0,
        runAfter: null,
        uniqueKey: null,
        group: null,
        createdAt: new Date("2026-01-01T00:00:00.000Z"),
        updatedAt: new Date("2026-01-01T00:00:00.000Z")
      }
      expect(claims.map(({ item: { id: _, ...item } }) => item)).toEqual([touched, touched, touched, untouched])
      expect(claims.map((c) => [c.runsDone, c.attempt])).toEqual([
        [0, 1],
        [0, 2],
        [0, 3],
        [0, 1]
      ])
      // Equal times, two objects: a handler that changes one does not change the other.
      expect(claims[3]!.item.updatedAt).not.toBe(claims[3]!.item.createdAt)
    })
  )
  it.effect("plain SQL sets run_after and unique_key; the partial unique index refuses a second queued key", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const q = yield* QueueStore
      const items = sql(`${schema}.queue_items`)
      const now = new Date()
      yield* sql`INSERT INTO ${items} (task_type, payload, run_after, unique_key)
                 VALUES ('sqldelay', 'x', now() + interval '1 hour', 'sql-key')`
      const opts = {
        limit: 5,
        taskTypes: ["sqldelay"],
        owner: "w",
        leaseUntil: new Date(now.getTime() + 60_000),
        now,
        repeatAfter: now
      }
      expect(yield* q.claimBatch(opts)).toEqual([])
      const due = Option.getOrThrow(yield* q.nextRunAfter(["sqldelay"], now))
      expect(due.getTime()).toBeGreaterThan(now.getTime() + 3_500_000)
      // The API finds the row SQL inserted; a second plain INSERT of the key fails on the index.
      const found = yield* q.enqueue({ taskType: "sqldelay", payload: "y", uniqueKey: "sql-key" }, now)
      expect(found).toMatchObject({ payload: "x", uniqueKey: "sql-key", runAfter: due })
      const second = yield* Effect.either(
        sql`INSERT INTO ${items} (task_type, unique_key) VALUES ('sqldelay', 'sql-key')`
      )
      expect(Either.isLeft(second)).toBe(true)
      const claimed = yield* q.claimBatch({ ...opts, now: new Date(due.getTime() + 1) })
      expect(claimed.map((c) => c.item.id)).toEqual([found.id])
    })
  )
  it.effect(
    "plain SQL sets an item's retry columns (NULLs read as Retry.fromColumns says); bad values are refused",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        const now = new Date("2026-03-01T00:00:00Z")
        // Only the attempts: the default backoff, exponential from a second. The second row sets a fixed backoff.
        yield* sql`INSERT INTO ${items} (task_type, payload, thread, retry_attempts) VALUES ('sqlretry', 'a', 1, 3)`
        yield* sql`INSERT INTO ${items} (task_type, payload, thread, retry_attempts, retry_backoff_ms)
                 VALUES ('sqlretry', 'b', 1, 2, 7000)`
        const opts = (at: Date) => ({
          limit: 5,
          taskTypes: ["sqlretry"],
          owner: "w",
          leaseUntil: new Date(at.getTime() + 60_000),
          now: at,
          repeatAfter: at
        })
        const fail = (claims: ReadonlyArray<QueueClaim>, at: Date) =>
          q.recordResults(claims.map((claim) => ({ claim, result: { startedAt: at, finishedAt: at, error: "no" } })))
        const first = yield* q.claimBatch(opts(now))
        expect(first.map((c) => c.item.payload)).toEqual(["a", "b"])
        yield* fail(first, now)
        const retryAt = yield* sql<{ payload: string; wait: number; failures: number }>`
        SELECT payload, extract(epoch FROM run_after - ${now}::timestamptz)::float8 AS wait, failures
        FROM ${items} WHERE task_type = 'sqlretry' ORDER BY id`
        expect(retryAt).toEqual([
          { payload: "a", wait: 1, failures: 1 },
          { payload: "b", wait: 7, failures: 1 }
        ])
        const later = new Date(now.getTime() + 10_000)
        yield* fail(yield* q.claimBatch(opts(later)), later)
        // `b` had two attempts: gone. `a` waits 2 s (doubled) for its third.
        const left = yield* sql<{ payload: string; wait: number }>`
        SELECT payload, extract(epoch FROM run_after - ${later}::timestamptz)::float8 AS wait
        FROM ${items} WHERE task_type = 'sqlretry'`
        expect(left).toEqual([{ payload: "a", wait: 2 }])
        for (const bad of [
          sql`INSERT INTO ${items} (task_type, retry_attempts) VALUES ('sqlretry', 0)`,
          sql`INSERT INTO ${items} (task_type, retry_attempts, retry_backoff_ms) VALUES ('sqlretry', 2, -1)`,
          sql`INSERT INTO ${items} (task_type, failures) VALUES ('sqlretry', -1)`
        ]) {
          const refused = yield* Effect.flip(bad)
          expect(String((refused.cause as { message?: unknown }).message)).toMatch(
            /queue_items_(retry_attempts_from_1_to_1000|retry_backoff_from_0_to_a_year|failures_not_negative)/
          )
        }
      })
  )
})

// A schema of its own: rows held by connections of the test's own. Integration: Postgres's one-second deadlock check.
layer(PgQueue("queuekeys"), { timeout: "60 seconds", excludeTestServices: true })("bulks with keys in common", (it) => {
  // A bulk of keyed items alone, and one with an item that waits as well (written in a transaction with them).
  for (const waits of [false, true]) {
    it.scoped(
      `a bulk that loses a deadlock on a key another bulk is inserting is written again, and answers${waits ? " (one of its items waits)" : ""}`,
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const schema = yield* TestSchema
          const t = waits ? "keyed_w" : "keyed"
          const dep = yield* q.enqueue({ taskType: `${t}_dep` }, new Date())
          const other = yield* patient
          const probe = yield* connect
          // Another bulk, in the other order: k2 inserted, not committed.
          yield* query(other, "BEGIN")
          yield* query(other, `INSERT INTO ${schema}.queue_items (task_type, unique_key) VALUES ($1, $2)`, [t, `${t}2`])
          // This bulk inserts k1, then waits to learn whether k2 is taken.
          const bulk = yield* Effect.fork(
            q.enqueueMany(
              [
                { taskType: t, uniqueKey: `${t}1` },
                { taskType: t, uniqueKey: `${t}2` },
                ...(waits ? [{ taskType: `${t}_after`, after: [dep.id] }] : [])
              ],
              new Date()
            )
          )
          yield* blocked(probe, schema, "unique_key")
          // The other bulk's k1 waits for this one's: a cycle, this bulk aborted.
          yield* query(other, `INSERT INTO ${schema}.queue_items (task_type, unique_key) VALUES ($1, $2)`, [t, `${t}1`])
          yield* query(other, "ROLLBACK")
          const ids = yield* Fiber.join(bulk)
          const keyed = yield* query(
            probe,
            `SELECT id::text AS id, unique_key FROM ${schema}.queue_items WHERE task_type = $1 ORDER BY id`,
            [t]
          )
          expect(keyed.rows.map((r: { unique_key: string }) => r.unique_key)).toEqual([`${t}1`, `${t}2`])
          expect(ids.slice(0, 2)).toEqual(keyed.rows.map((r: { id: string }) => r.id))
          if (waits) {
            const waiting = yield* query(probe, `SELECT id::text AS id FROM ${schema}.queue_waiting`)
            expect(waiting.rows).toEqual([{ id: ids[2] }])
          }
        })
    )
  }
})

// One connection, so that its session's prepared statements are all of them (pg_prepared_statements is per session).
const PgQueueOnOneConnection = Layer.unwrapEffect(
  Effect.map(TestSchema, (schema) => PgQueueStore.layer({ schema }))
).pipe(
  Layer.provideMerge(Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema })))),
  Layer.provideMerge(TestSchemaLive("queueplans")),
  Layer.provideMerge(
    Layer.suspend(() =>
      PgKairos.clientLayer({ url: databaseUrl(), maxConnections: 1, applicationName: "kairos-test-plans" })
    )
  )
)

layer(PgQueueOnOneConnection, { timeout: "60 seconds", excludeTestServices: true })("planning", (it) => {
  it.effect("a claim, alone or with a record, and the looks at the next wake-up are planned once per connection", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* QueueStore
      const at = new Date()
      const ok = (claim: QueueClaim) => ({ claim, result: { startedAt: at, finishedAt: at } })
      yield* queue.enqueueMany(
        Array.from({ length: 40 }, (_, i) => ({ taskType: "planned", payload: String(i), thread: 1 })),
        at
      )
      // One at a time, as an idle runner claims what a wake-up announced; then two results recorded with the claim
      // of two more (one and one is a chain's step, a statement of its own).
      let claims = yield* queue.claimBatch({ ...claimOptions("planned", at), limit: 2 })
      for (let i = 0; i < 12; i++) yield* queue.claimBatch({ ...claimOptions("planned", at), limit: 1 })
      for (let i = 0; i < 10; i++) {
        const next = yield* queue.recordAndClaim(claims.map(ok), { ...claimOptions("planned", at), limit: 2 })
        expect(next.recorded).toEqual([true, true])
        claims = next.claims
        expect(claims).toHaveLength(2)
      }
      // What an idle runner looks at to plan its next wake-up: an item due later, a lease of another owner's.
      const later = new Date(at.getTime() + 60_000)
      yield* queue.enqueue({ taskType: "planned", payload: "later", runAfter: later }, at)
      for (let i = 0; i < 12; i++) {
        expect(yield* queue.nextRunAfter(["planned"], at)).toEqual(Option.some(later))
        expect(yield* queue.nextLeaseExpiry("w")).toEqual(Option.none())
        expect(yield* queue.nextLeaseExpiry("someone else")).toEqual(
          Option.some(claimOptions("planned", at).leaseUntil)
        )
      }
      // Postgres plans a prepared statement for its values five times, then keeps a generic plan unless those were
      // cheaper: with a known one-type array they were, and every claim was planned again (custom plans only).
      const kinds = { "kairos_record_and_claim(": "record", "kairos_claim(": "claim", "min(n.at)": "run_after" }
      const plans = yield* sql<{ statement: string; generic_plans: number; custom_plans: number }>`
        SELECT statement, generic_plans::int AS generic_plans, custom_plans::int AS custom_plans
        FROM pg_prepared_statements
        WHERE statement LIKE '%kairos_claim(%' OR statement LIKE '%kairos_record_and_claim(%'
          OR statement LIKE '%min(n.at)%' OR statement LIKE '%min(lease_until)%'`
      const kindOf = (statement: string) =>
        Object.entries(kinds).find(([marker]) => statement.includes(marker))?.[1] ?? "lease_until"
      expect(plans.map((p) => kindOf(p.statement)).sort()).toEqual(["claim", "lease_until", "record", "run_after"])
      for (const p of plans) {
        expect(p.custom_plans, p.statement).toBeLessThanOrEqual(5)
        expect(p.generic_plans, p.statement).toBeGreaterThanOrEqual(5)
      }
    })
  )
})

layer(PgQueue("queuedepth"), { timeout: "60 seconds", excludeTestServices: true })("queue depth", (it) => {
  it.effect(
    "past EXACT_DEPTH_UP_TO items the depth is the planner's estimate (never below the bound), close once analyzed",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        const q = yield* QueueStore
        const items = sql(`${schema}.queue_items`)
        yield* sql`INSERT INTO ${items} (task_type, payload, thread) SELECT 'deep', '', 1 FROM generate_series(1, 50000)`
        // Never analyzed: the planner guesses from the table's size (no statistics yet), never below the bound.
        const unanalyzed = yield* q.depth()
        expect(unanalyzed.exact).toBe(false)
        expect(unanalyzed.count).toBeGreaterThan(EXACT_DEPTH_UP_TO)
        yield* sql`ANALYZE ${items}`
        const analyzed = yield* q.depth()
        expect(analyzed.exact).toBe(false)
        expect(Math.abs(analyzed.count - 50_000)).toBeLessThan(2_500)
        expect(yield* q.pendingCount()).toBe(50_000)
        yield* sql`DELETE FROM ${items} WHERE id > (SELECT min(id) + 9 FROM ${items})`
        expect(yield* q.depth()).toEqual({ count: 10, exact: true })
      })
  )
})
