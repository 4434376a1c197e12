/**
 * What the per-execution statements cost as kairos sends them by default (unnamed, each timed by the client: see
 * src/adapters/postgres/PgSession.ts) against named prepared statements and without the client's timer, side by
 * side on one database: a claim of 20 with the record of its 20 results, and a sequential chain's step (the record
 * of one result with the claim of its type's next item). The four variants run in turns, in short blocks, so a
 * machine that slows down or speeds up weighs on each alike; medians per variant. Not a test: nothing is asserted.
 *
 *   npm run build:bench && node .bench-build/bench/statements.js     (DATABASE_URL, or a throwaway embedded Postgres)
 *   BENCH_BLOCKS=40 ...                                               (blocks per variant; default 20)
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import pg from "pg"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../src/adapters/postgres/migrations.js"
import * as PgQueueStore from "../src/adapters/postgres/PgQueueStore.js"
import * as PgKairos from "../src/layers/PgKairos.js"
import { QueueStore, type QueueClaim } from "../src/ports/QueueStore.js"

const schema = "kairos_bench_statements"
const BLOCKS = Number(process.env["BENCH_BLOCKS"] ?? 20)
const PER_BLOCK = 25
const BATCH = 20

interface Variant {
  readonly name: string
  readonly namedStatements: boolean
  readonly statementTimeout: number | "1 minute"
}
const variants: ReadonlyArray<Variant> = [
  { name: "unnamed, timed (the default)", namedStatements: false, statementTimeout: "1 minute" },
  { name: "named, timed", namedStatements: true, statementTimeout: "1 minute" },
  { name: "unnamed, no client timer", namedStatements: false, statementTimeout: 0 },
  { name: "named, no client timer (as before)", namedStatements: true, statementTimeout: 0 }
]

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

const main = async (url: string) => {
  const admin = new pg.Pool({ connectionString: url, max: 1 })
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  const setup = ManagedRuntime.make(PgKairos.clientLayer({ url, maxConnections: 1 }))
  await setup.runPromise(migrate({ schema }))
  await setup.dispose()
  const items = `"${schema}".queue_items`
  const n = BLOCKS * PER_BLOCK
  for (const [i] of variants.entries()) {
    await admin.query(
      `INSERT INTO ${items} (task_type, payload, thread) SELECT 'batch${i}', 'x', 1 FROM generate_series(1, ${n * BATCH})`
    )
    await admin.query(
      `INSERT INTO ${items} (task_type, payload, thread) SELECT 'chain${i}', 'x', 0 FROM generate_series(1, ${n + 1})`
    )
  }
  await admin.query(`ANALYZE ${items}`)
  const runtimes = variants.map((v) =>
    ManagedRuntime.make(
      PgQueueStore.layer({ schema }).pipe(
        Layer.provideMerge(
          PgKairos.clientLayer({
            url,
            maxConnections: 2,
            namedStatements: v.namedStatements,
            statementTimeout: v.statementTimeout
          })
        )
      )
    )
  )
  const batchMs: Array<Array<number>> = variants.map(() => [])
  const chainMs: Array<Array<number>> = variants.map(() => [])
  const chains: Array<QueueClaim | undefined> = variants.map(() => undefined)
  const request = (taskType: string, limit: number) => {
    const now = new Date()
    return {
      limit,
      taskTypes: [taskType],
      owner: "bench",
      now,
      leaseUntil: new Date(now.getTime() + 600_000),
      repeatAfter: now
    }
  }
  const result = () => ({ startedAt: new Date(), finishedAt: new Date() })
  for (let block = 0; block < BLOCKS; block++) {
    for (const [i, rt] of runtimes.entries()) {
      await rt.runPromise(
        Effect.gen(function* () {
          const queue = yield* QueueStore
          for (let k = 0; k < PER_BLOCK; k++) {
            let t = performance.now()
            const claims = yield* queue.claimBatch(request(`batch${i}`, BATCH))
            yield* queue.recordResults(claims.map((claim) => ({ claim, result: result() })))
            batchMs[i]!.push(performance.now() - t)
            const previous = chains[i] ?? (yield* queue.claimBatch(request(`chain${i}`, 1)))[0]!
            t = performance.now()
            const step = yield* queue.recordAndClaim([{ claim: previous, result: result() }], request(`chain${i}`, 1))
            chainMs[i]!.push(performance.now() - t)
            chains[i] = step.claims[0]
          }
        })
      )
    }
  }
  console.log(`${BLOCKS} blocks of ${PER_BLOCK} per variant, in turns; medians:`)
  console.log("| variant | claim(20) + record(20) (ms) | sequential step: record + claim next (ms) |")
  console.log("|---|--:|--:|")
  for (const [i, v] of variants.entries())
    console.log(`| ${v.name} | ${median(batchMs[i]!).toFixed(3)} | ${median(chainMs[i]!).toFixed(3)} |`)
  for (const rt of runtimes) await rt.dispose()
  await admin.query(`DROP SCHEMA "${schema}" CASCADE`)
  await admin.end()
}

withDatabaseUrl(main).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
