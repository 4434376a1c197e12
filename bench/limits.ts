/**
 * Flow control's costs and fairness, measured on one connection with no-op work (the store's claim and record, as
 * a runner's results writer chains them: `recordAndClaim`), so the numbers are the claim's own:
 *
 * 0. runner drains: a runner (`PgKairos.layer`, 20 workers, batch 20) drains 10,000 no-op items of a plain type, of
 *    a type whose concurrency limit never binds (10,000), and of one with 2 per group over 1,000 groups;
 * 1. store drains: 20,000 items of a plain type, of a type with a concurrency limit that never binds (the limited claim's
 *    overhead), of one with 20 groups and of one with 10,000 groups (2 running per group: never binding with 20 groups
 *    and claims of 20);
 * 2. fairness: 1,000 groups of 100 items and one of 100,000 enqueued first, 5 per group: when do the small groups
 *    finish, and how much of the big one ran meanwhile (in plain queue order, all of it would run first).
 *
 * Figures are indicative (one machine, shared). `BENCH_SCALE=0.1` shrinks every count tenfold;
 * `BENCH_PARTS=runner,store,fairness` picks measures (default all).
 *
 *   npm run bench:limits          (DATABASE_URL, or a throwaway embedded Postgres)
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import pg from "pg"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../src/adapters/postgres/migrations.js"
import * as PgLimits from "../src/adapters/postgres/PgLimits.js"
import * as PgQueueStore from "../src/adapters/postgres/PgQueueStore.js"
import type { QueueClaim } from "../src/ports/QueueStore.js"
import * as LimitsBench from "./systems/limits.js"

const schema = "kairos_bench_limits"
const SCALE = Number(process.env["BENCH_SCALE"] ?? 1)
const n = (count: number) => Math.max(1, Math.round(count * SCALE))
const BATCH = 20
/** `BENCH_PARTS=runner,store,fairness` (default all): which measures to take. */
const PARTS = new Set((process.env["BENCH_PARTS"] ?? "runner,store,fairness").split(","))

const program = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`
  yield* migrate({ schema })
  const queue = yield* PgQueueStore.make({ schema })
  const limits = yield* PgLimits.make({ schema })
  const items = sql(`${schema}.queue_items`)

  const options = (taskType: string, limited: boolean) => {
    const now = new Date()
    return {
      limit: BATCH,
      taskTypes: [taskType],
      owner: "bench",
      now,
      leaseUntil: new Date(now.getTime() + 600_000),
      repeatAfter: now,
      limited: limited ? [taskType] : undefined
    }
  }
  const ok = (claim: QueueClaim) => {
    const at = new Date()
    return { claim, result: { startedAt: at, finishedAt: at } }
  }

  /** Drains the type, each batch's results written with the next claim; calls `onRecorded` per result. */
  const drain = (
    taskType: string,
    limited: boolean,
    until: () => boolean = () => false,
    onRecorded?: (c: QueueClaim) => void
  ) =>
    Effect.gen(function* () {
      const start = performance.now()
      let claims = yield* queue.claimBatch(options(taskType, limited))
      let done = 0
      while (claims.length > 0 && !until()) {
        const next = yield* queue.recordAndClaim(claims.map(ok), options(taskType, limited))
        done += claims.length
        if (onRecorded !== undefined) for (const c of claims) onRecorded(c)
        claims = next.claims
      }
      if (claims.length > 0) yield* queue.recordResults(claims.map(ok))
      return { ms: performance.now() - start, done }
    })

  const insert = (taskType: string, count: number, groups: number) =>
    groups === 0
      ? sql`INSERT INTO ${items} (task_type, payload, thread) SELECT ${taskType}, 'x', 1 FROM generate_series(1, ${count})`
      : sql`INSERT INTO ${items} (task_type, payload, thread, group_key)
            SELECT ${taskType}, 'x', 1, 'g' || (i % ${groups}) FROM generate_series(1, ${count}) i`

  if (PARTS.has("store")) {
    console.log(`drains of ${n(20_000).toLocaleString("en")} no-op items, claims of ${BATCH} (indicative):`)
    const cases = [
      { name: "plain", limit: undefined, groups: 0 },
      { name: "limited (10,000 at once: never binds)", limit: { concurrency: 10_000 }, groups: 0 },
      { name: "2 per group, 20 groups", limit: { concurrency: 2, perGroup: true }, groups: 20 },
      { name: "2 per group, 10,000 groups", limit: { concurrency: 2, perGroup: true }, groups: 10_000 }
    ] as const
    // Twice each, interleaved: the machine's drift shows as a spread within a case.
    const results = new Map<string, Array<number>>()
    for (let round = 0; round < 2; round++) {
      for (const [i, c] of cases.entries()) {
        const t = `drain${i}_${round}`
        if (c.limit !== undefined) yield* limits.set({ taskType: t, ...c.limit })
        yield* insert(t, n(20_000), c.groups)
        yield* sql`ANALYZE ${items}`
        const { done, ms } = yield* drain(t, c.limit !== undefined)
        if (done !== n(20_000)) throw new Error(`${c.name}: drained ${done} of ${n(20_000)}`)
        results.set(c.name, [...(results.get(c.name) ?? []), (done / ms) * 1000])
      }
    }
    const plain = Math.max(...results.get("plain")!)
    for (const [name, rates] of results) {
      const best = Math.max(...rates)
      console.log(
        `  ${name.padEnd(36)} ${rates.map((r) => r.toFixed(0).padStart(6)).join(" ")} items/s` +
          (name === "plain" ? "" : `  (best ${((best / plain) * 100).toFixed(0)}% of plain)`)
      )
    }
  }
  if (PARTS.has("fairness")) {
    // Fairness: the big group enqueued first, then the small ones.
    const small = n(1_000)
    const big = n(100_000)
    const t = "fair"
    yield* limits.set({ taskType: t, concurrency: 5, perGroup: true })
    const groupOf = new Map<string, string>()
    for (const r of yield* sql<{ id: string; group_key: string }>`
    INSERT INTO ${items} (task_type, payload, thread, group_key) SELECT ${t}, 'x', 1, 'big' FROM generate_series(1, ${big})
    RETURNING id::text AS id, group_key`)
      groupOf.set(r.id, r.group_key)
    for (const r of yield* sql<{ id: string; group_key: string }>`
    INSERT INTO ${items} (task_type, payload, thread, group_key)
    SELECT ${t}, 'x', 1, 's' || lpad((i % ${small})::text, 5, '0') FROM generate_series(1, ${small * 100}) i
    RETURNING id::text AS id, group_key`)
      groupOf.set(r.id, r.group_key)
    yield* sql`ANALYZE ${items}`
    const left = new Map<string, number>()
    for (const g of groupOf.values()) if (g !== "big") left.set(g, (left.get(g) ?? 0) + 1)
    let bigDone = 0
    const finished: Array<number> = []
    const start = performance.now()
    const { done, ms } = yield* drain(
      t,
      true,
      () => finished.length === small,
      (c) => {
        const g = groupOf.get(c.item.id)!
        if (g === "big") bigDone++
        else {
          const rest = left.get(g)! - 1
          left.set(g, rest)
          if (rest === 0) finished.push(performance.now() - start)
        }
      }
    )
    finished.sort((x, y) => x - y)
    const at = (p: number) =>
      (finished[Math.min(finished.length - 1, Math.floor(p * finished.length))]! / 1000).toFixed(1)
    const perItem = ms / done
    console.log(
      `fairness: ${small.toLocaleString("en")} groups of 100 behind one of ${big.toLocaleString("en")} (5 per group): ` +
        `the small groups finished at ${at(0.5)} s (median) … ${at(1)} s (last); ${bigDone.toLocaleString("en")} items ` +
        `of the big group ran meanwhile (${((bigDone / (done || 1)) * 100).toFixed(0)}% of the executions). In plain ` +
        `queue order the first small group would start after the big one: about ${((big * perItem) / 1000).toFixed(0)} s ` +
        `at this rate (${(1000 / perItem).toFixed(0)} items/s).`
    )
  }
  yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
})

const runnerDrains = async (url: string) => {
  const admin = new pg.Pool({ connectionString: url, max: 2 })
  try {
    console.log(`runner drains of ${n(10_000).toLocaleString("en")} no-op items (20 workers, batch 20; indicative):`)
    const rates = await LimitsBench.runnerDrains(url, admin, "kairos_bench_limits", n(10_000), n(1_000), 2)
    const plain = Math.max(...rates.get("plain")!)
    const label: Record<string, string> = {
      plain: "plain",
      limited: "limited (10,000 at once: never binds)",
      grouped: `2 per group, ${n(1_000).toLocaleString("en")} groups`
    }
    for (const [name, xs] of rates)
      console.log(
        `  ${label[name]!.padEnd(36)} ${xs.map((r) => r.toFixed(0).padStart(6)).join(" ")} items/s` +
          (name === "plain" ? "" : `  (best ${((Math.max(...xs) / plain) * 100).toFixed(0)}% of plain)`)
      )
  } finally {
    await admin.end()
  }
}

const main = async (url: string) => {
  if (PARTS.has("runner")) await runnerDrains(url)
  await Effect.runPromise(program.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped))
}

withDatabaseUrl(main).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
