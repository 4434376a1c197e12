/**
 * How long one claim takes when a million unclaimable rows sort first: 500,000 items of a type no worker handles
 * (at the highest priority) and 500,000 sequential items of a handled type whose one sequential slot is taken.
 * Prints the time per claim; it should stay around a millisecond. Not a test: nothing is asserted.
 *
 *   npm run bench:claim          (DATABASE_URL, or a throwaway embedded Postgres)
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../src/adapters/postgres/migrations.js"
import * as PgQueueStore from "../src/adapters/postgres/PgQueueStore.js"

const schema = "kairos_bench_claim"
const ROWS = Number(process.env["BENCH_ROWS"] ?? 1_000_000)
const CLAIMS = 300

const program = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DROP SCHEMA IF EXISTS ${sql(schema)} CASCADE`
  yield* migrate({ schema })
  const queue = yield* PgQueueStore.make({ schema })
  const items = sql(`${schema}.queue_items`)
  const t0 = Date.now()
  yield* sql`INSERT INTO ${items} (task_type, payload, priority, thread)
             SELECT 'unhandled', 'x', 100, 1 FROM generate_series(1, ${ROWS / 2})`
  yield* sql`INSERT INTO ${items} (task_type, payload, priority, thread)
             SELECT 'busy', 'x', 50, 0 FROM generate_series(1, ${ROWS / 2})`
  yield* sql`INSERT INTO ${items} (task_type, payload, priority, thread)
             SELECT 'work', 'x', 0, 1 FROM generate_series(1, ${CLAIMS * 20})`
  yield* sql`ANALYZE ${items}`
  console.log(
    `inserted ${ROWS.toLocaleString("en")} unclaimable rows + ${(CLAIMS * 20).toLocaleString("en")} claimable in ${Date.now() - t0} ms`
  )
  const now = new Date()
  const leaseUntil = new Date(now.getTime() + 600_000)
  // Take the one sequential slot of "busy": its 499,999 other items are now blocked.
  const blocker = yield* queue.claimBatch({
    limit: 1,
    taskTypes: ["busy"],
    owner: "bench",
    leaseUntil,
    now,
    repeatAfter: now
  })
  if (blocker.length !== 1) throw new Error("could not take the busy slot")

  for (const limit of [1, 20]) {
    const times: Array<number> = []
    let claimed = 0
    for (let i = 0; i < CLAIMS / 2; i++) {
      const start = performance.now()
      const claims = yield* queue.claimBatch({
        limit,
        taskTypes: ["busy", "work"],
        owner: "bench",
        leaseUntil,
        now,
        repeatAfter: now
      })
      times.push(performance.now() - start)
      claimed += claims.length
      if (claims.some((c) => c.item.taskType !== "work")) throw new Error("claimed something unclaimable")
    }
    times.sort((a, b) => a - b)
    const pct = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))]!.toFixed(2)
    console.log(
      `claimBatch(limit ${String(limit).padStart(2)}): median ${pct(0.5)} ms, p95 ${pct(0.95)} ms, max ${pct(1)} ms ` +
        `(${times.length} claims, ${claimed} items)`
    )
  }
  yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
})

const main = (url: string) =>
  Effect.runPromise(program.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped))

withDatabaseUrl(main).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
