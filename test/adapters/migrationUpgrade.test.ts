/**
 * An upgrade across the shipped migrations with work in flight: a schema migrated only to 0002 (before queue order,
 * per-execution attempts, lean leases, the claim functions and row leases) holds what that version's code wrote —
 * items pending, a sequential item leased by a worker that died, an item half done, rows in the execution log, a
 * job's slot mid-run, the old pause setting — then migrates to the head, and a runner of today finishes everything
 * exactly once. And limits written before 0024 (a concurrency per group with a rate) keep their meaning after it.
 * Integration: a real Postgres, the real clock (short intervals), its own schema.
 */
import { SqlClient } from "@effect/sql"
import * as Migrator from "@effect/sql/Migrator"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { migrate, type MigrationName, migrationNames, migrations } from "../../src/adapters/postgres/migrations.js"
import * as PgLimits from "../../src/adapters/postgres/PgLimits.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { Runner } from "../../src/index.js"
import { databaseUrl, PgTestClient, uniqueSchemaName } from "../support/database.js"

/** The shipped migrations up to `last` only, through the Migrator and its table, as a release of that time ran them. */
const migrateTo = (schema: string, last: MigrationName) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const all = migrations(schema)
    const upTo = migrationNames.slice(0, migrationNames.indexOf(last) + 1)
    yield* sql`CREATE SCHEMA ${sql(schema)}`
    return yield* Migrator.make({})({
      loader: Migrator.fromRecord(Object.fromEntries(upTo.map((name) => [name, all[name]]))),
      table: `${schema}.kairos_migrations`
    })
  })

describe("upgrading a schema with work in flight", () => {
  it.live(
    "from 0002 to the head: queued, leased, half-done items and a job mid-run all finish exactly once",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = uniqueSchemaName("upgrade")
        yield* Effect.addFinalizer(() => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`.pipe(Effect.ignore))
        const t = (name: string) => sql(`${schema}.${name}`)

        const early = yield* migrateTo(schema, "0002_queue")
        expect(early.map(([id]) => id)).toEqual([1, 2])

        // What 0002's code wrote, in its shapes. Insert-time values are normalised by the trigger (pending, nothing
        // in flight); a claim then set in_flight and status and wrote a lease row with a UUID token; a record wrote
        // the log row, counted the run down and deleted the item after its last run.
        yield* sql`INSERT INTO ${t("scheduler_meta")} (key, value) VALUES ('scheduler.paused', 'false')`
        yield* sql`INSERT INTO ${t("scheduler_workers")} (id, task_types, started_at, heartbeat_at)
          VALUES ('old-worker', '{up.work,up.seq,up.job}', now() - interval '20 minutes', now() - interval '5 minutes')`
        // The sequential item the dead worker held, inserted first as the claim took the type's first item.
        yield* sql`INSERT INTO ${t("queue_items")} (task_type, payload, max_runs, thread, priority) VALUES
          ('up.seq', 'd', 1, 0, 0),
          ('up.seq', 'c1', 1, 0, 0),
          ('up.seq', 'c2', 1, 0, 0),
          ('up.work', 'a', 1, 1, 0),
          ('up.work', 'b', 3, 1, 0),
          ('up.work', 'e', 2, 1, 0),
          ('up.work', 'f', 1, 1, 0)`
        yield* sql`UPDATE ${t("queue_items")} SET in_flight = 1, status = 'processing',
          updated_at = now() - interval '5 minutes' WHERE payload = 'd'`
        yield* sql`INSERT INTO ${t("queue_leases")} (item_id, token, owner, started_at, lease_until)
          SELECT id, gen_random_uuid()::text, 'old-worker', now() - interval '5 minutes', now() - interval '4 minutes'
          FROM ${t("queue_items")} WHERE payload = 'd'`
        // e ran once of its two runs; f ran its only run and was deleted.
        yield* sql`INSERT INTO ${t("processed_items")}
          (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT id, task_type, payload, 'ok', '', now() - interval '8 minutes', now() - interval '8 minutes', 3
          FROM ${t("queue_items")} WHERE payload IN ('e', 'f')`
        yield* sql`UPDATE ${t("queue_items")} SET max_runs = max_runs - 1, runs_done = runs_done + 1
          WHERE payload IN ('e', 'f')`
        yield* sql`DELETE FROM ${t("queue_items")} WHERE payload = 'f' AND max_runs = 0 AND in_flight = 0`
        // A job whose slot started ten minutes ago on the dead worker; its next slot is 50 minutes away.
        const [job] = yield* sql<{ id: string; slot: Date }>`
          INSERT INTO ${t("scheduled_jobs")}
            (name, task_type, payload, schedule, enabled, next_run_at, missed_slots, overlap, created_at, updated_at)
          VALUES ('upgrade-job', 'up.job', '', '{"_tag":"Interval","everyMillis":3600000}', true,
            date_trunc('second', now()) + interval '50 minutes', NULL, 'skip', now() - interval '1 day', now())
          RETURNING id::text, next_run_at - interval '1 hour' AS slot`
        yield* sql`INSERT INTO ${t("job_runs")}
          (job_id, scheduled_for, attempt, status, started_at, owner, lease_until, lease_token)
          VALUES (${job!.id}::bigint, ${job!.slot}, 1, 'running', now() - interval '10 minutes', 'old-worker',
            now() - interval '4 minutes', gen_random_uuid()::text)`
        const items = yield* sql<{ id: string; payload: string }>`
          SELECT id::text, payload FROM ${t("queue_items")} ORDER BY id`
        const fId = yield* sql<{ id: string }>`
          SELECT queue_item_id::text AS id FROM ${t("processed_items")} WHERE payload = 'f'`

        const applied = yield* migrate({ schema })
        expect(applied.map(([id]) => id)).toEqual(migrationNames.map((name) => Number(name.slice(0, 4))).slice(2))
        // 0003 turned the old pause setting into the semaphore.
        expect(yield* sql`SELECT key, value FROM ${t("scheduler_meta")} ORDER BY key`).toEqual([
          { key: "semaphore", value: "green" }
        ])

        // Today's runner on the upgraded schema, as users build it.
        const calls = new Map<string, number>()
        const slots: Array<readonly [number, number]> = []
        let sequentialNow = 0
        let sequentialMax = 0
        const remaining = sql<{ items: number; leases: number; unfinished_runs: number; successes: number }>`
          SELECT (SELECT count(*)::int FROM ${t("queue_items")}) AS items,
            (SELECT count(*)::int FROM ${t("queue_leases")}) AS leases,
            (SELECT count(*)::int FROM ${t("job_runs")} WHERE status IN ('pending', 'running')) AS unfinished_runs,
            (SELECT count(*)::int FROM ${t("job_runs")} WHERE status = 'success') AS successes`
        yield* Effect.scoped(
          Effect.gen(function* () {
            const runner = yield* Runner.Runner
            yield* runner.register("up.work", (j) => {
              calls.set(j.payload, (calls.get(j.payload) ?? 0) + 1)
            })
            yield* runner.register("up.seq", (j) =>
              Effect.gen(function* () {
                calls.set(j.payload, (calls.get(j.payload) ?? 0) + 1)
                sequentialMax = Math.max(sequentialMax, ++sequentialNow)
                yield* Effect.sleep("20 millis")
                sequentialNow--
              })
            )
            yield* runner.register("up.job", (j) => {
              slots.push([j.scheduledFor.getTime(), j.attempt])
            })
            yield* runner.start
            for (let i = 0; i < 300; i++) {
              const [left] = yield* remaining
              if (left!.items === 0 && left!.leases === 0 && left!.unfinished_runs === 0 && left!.successes > 0) break
              yield* Effect.sleep("100 millis")
            }
            // A while longer: nothing runs a second time.
            yield* Effect.sleep("1 second")
            yield* runner.stop
          }).pipe(
            Effect.provide(
              PgKairos.layer({ url: databaseUrl(), schema, workers: 4, interval: "200 millis", maxConnections: 4 })
            )
          )
        )

        expect((yield* remaining)[0]).toEqual({ items: 0, leases: 0, unfinished_runs: 0, successes: 1 })
        // Each item's handler ran as many times as it had runs left, d's lost execution included once.
        expect(Object.fromEntries([...calls].sort())).toEqual({ a: 1, b: 3, c1: 1, c2: 1, d: 1, e: 1 })
        expect(sequentialMax).toBe(1)
        // The execution log: one row per run of each item, those from before the upgrade kept.
        const logged = yield* sql<{ id: string; n: number; ok: number }>`
          SELECT queue_item_id::text AS id, count(*)::int AS n, count(*) FILTER (WHERE status = 'ok')::int AS ok
          FROM ${t("processed_items")} GROUP BY queue_item_id`
        const byPayload = Object.fromEntries(
          [...items, { id: fId[0]!.id, payload: "f" }].map(({ id, payload }) => [
            payload,
            logged.find((r) => r.id === id) ?? { id, n: 0, ok: 0 }
          ])
        )
        expect(Object.fromEntries(Object.entries(byPayload).map(([p, r]) => [p, [r.n, r.ok]]))).toEqual({
          a: [1, 1],
          b: [3, 3],
          c1: [1, 1],
          c2: [1, 1],
          d: [1, 1],
          e: [2, 2],
          f: [1, 1]
        })
        expect(logged.length).toBe(7)
        // The slot mid-run fired once: the lost attempt recorded as such, the slot run again and done; no other slot.
        expect(slots).toEqual([[job!.slot.getTime(), 2]])
        const runs = yield* sql<{ scheduled_for: Date; attempt: number; status: string; error: string | null }>`
          SELECT scheduled_for, attempt, status, error FROM ${t("job_runs")} ORDER BY id`
        expect(runs.map((r) => [r.scheduled_for.getTime(), r.attempt, r.status])).toEqual([
          [job!.slot.getTime(), 1, "failed"],
          [job!.slot.getTime(), 2, "success"]
        ])
        expect(runs[0]!.error).toContain("owner lost")
      }).pipe(Effect.scoped, Effect.provide(PgTestClient)),
    { timeout: 90_000 }
  )

  it.live(
    "limits stored before 0024 keep their meaning: a concurrency per group beside a rate for the whole type",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = uniqueSchemaName("upgrade_limits")
        yield* Effect.addFinalizer(() => sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`.pipe(Effect.ignore))
        const t = (name: string) => sql(`${schema}.${name}`)
        yield* migrateTo(schema, "0023_flow_steps")
        // As 0021's code wrote them: each group in order, 3 starts a day in all; and 2 per group without a rate.
        yield* sql`INSERT INTO ${t("queue_limits")} (task_type, concurrency, per_group, rate, rate_per_ms) VALUES
          ('up.ordered', 1, true, 3, 86400000), ('up.grouped', 2, true, NULL, NULL)`
        expect((yield* migrate({ schema }))[0]).toEqual([24, "group_rates"])
        const limits = yield* PgLimits.make({ schema })
        expect(yield* limits.list).toEqual([
          { taskType: "up.grouped", concurrency: 2, perGroup: true, rate: null, ratePerGroup: false },
          {
            taskType: "up.ordered",
            concurrency: 1,
            perGroup: true,
            rate: { limit: 3, perMs: 86_400_000 },
            ratePerGroup: false
          }
        ])
        // And the claim reads them so: three heads in all, not three per group.
        const queue = yield* PgQueueStore.make({ schema })
        const now = new Date()
        yield* queue.enqueueMany(
          ["a", "b", "c", "d"].flatMap((g) =>
            [0, 1].map((i) => ({ taskType: "up.ordered", payload: `${g}${i}`, group: g }))
          ),
          now
        )
        const claims = yield* queue.claimBatch({
          limit: 20,
          taskTypes: ["up.ordered"],
          owner: "w1",
          now,
          leaseUntil: new Date(now.getTime() + 30_000),
          repeatAfter: new Date(now.getTime() + 10_000),
          limited: ["up.ordered"]
        })
        expect(claims.map((c) => c.item.payload).sort()).toEqual(["a0", "b0", "c0"])
      }).pipe(Effect.scoped, Effect.provide(PgTestClient)),
    { timeout: 60_000 }
  )
})
