/**
 * Drains no-op queue items with one runner process and prints items per second. Not a test: nothing is asserted.
 *
 *   npm run bench:throughput     (BENCH_ITEMS=20000, BENCH_WORKERS=64, BENCH_BATCH=500, BENCH_THREAD=1 — 0 for
 *                                 sequential items of one type; DATABASE_URL or embedded)
 */
import { SqlClient } from "@effect/sql"
import { type Duration, Effect, Logger, LogLevel } from "effect"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import * as PgKairos from "../src/layers/PgKairos.js"
import * as Runner from "../src/runtime/Runner.js"
import { machineBusyMs } from "./lib/util.js"

const schema = "kairos_bench_throughput"
const ITEMS = Number(process.env["BENCH_ITEMS"] ?? 20_000)
const WORKERS = Number(process.env["BENCH_WORKERS"] ?? 64)
const BATCH = Number(process.env["BENCH_BATCH"] ?? 500)
const THREAD = process.env["BENCH_THREAD"] === "0" ? 0 : 1
// The runner's poll interval (the drain is woken by NOTIFY and its own claims, whatever it is).
const INTERVAL = (process.env["BENCH_INTERVAL"] ?? "1 second") as Duration.DurationInput
// BENCH_ASYNC=1: an async handler (a promise per execution, as the side-by-side bench's), else a plain function.
const ASYNC = process.env["BENCH_ASYNC"] === "1"

const program = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const runner = yield* Runner.Runner
  const items = sql(`${schema}.queue_items`)
  yield* sql`TRUNCATE ${items} CASCADE`
  yield* sql`TRUNCATE ${sql(`${schema}.processed_items`)}`
  // The handlers count their executions, so the drain's end is seen without asking the database over and over (a
  // count(*) every few milliseconds would cost Postgres as much as part of the drain it measures).
  let ran = 0
  let allRan: () => void = () => undefined
  const allRanPromise = new Promise<void>((resolve) => (allRan = resolve))
  const count = () => {
    if (++ran === ITEMS) allRan()
  }
  yield* runner.register("noop", ASYNC ? async () => count() : count)
  yield* sql`INSERT INTO ${items} (task_type, payload, thread) SELECT 'noop', '{}', ${THREAD} FROM generate_series(1, ${ITEMS})`
  const start = performance.now()
  const cpu0 = process.cpuUsage()
  const busy0 = machineBusyMs()
  yield* runner.start
  yield* Effect.promise(() => allRanPromise)
  // The last results are recorded a moment after their handlers return.
  while (true) {
    const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${items}`
    if (row!.n === 0 && (yield* runner.running) === 0) break
    yield* Effect.sleep("5 millis")
  }
  const seconds = (performance.now() - start) / 1000
  const cpu = process.cpuUsage(cpu0)
  const busy = machineBusyMs()
  const [done] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.processed_items`)}`
  console.log(
    `drained ${ITEMS.toLocaleString("en")} no-op items in ${seconds.toFixed(2)} s: ` +
      `${Math.round(ITEMS / seconds).toLocaleString("en")} items/s ` +
      `(workers ${WORKERS}, batch ${BATCH}, thread ${THREAD}, ${done!.n.toLocaleString("en")} processed rows)`
  )
  // Where the CPU went: this process's, and the whole machine's (Postgres's when it runs here and nothing else does).
  const perItem = (ms: number) => `${((ms * 1000) / ITEMS).toFixed(1)} µs`
  const runnerMs = (cpu.user + cpu.system) / 1000
  console.log(
    `CPU per item: this process ${perItem(runnerMs)}` +
      (busy0 !== undefined && busy !== undefined
        ? `, the machine ${perItem(busy - busy0)} (the rest ${perItem(busy - busy0 - runnerMs)})`
        : "")
  )
  // Leave nothing behind on a shared database.
  yield* runner.stop
  yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
})

const main = (url: string) =>
  Effect.runPromise(
    program.pipe(
      Effect.provide(
        PgKairos.layer({ url, schema, workers: WORKERS, batchSize: BATCH, interval: INTERVAL, maxConnections: 20 })
      ),
      Effect.scoped,
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  )

withDatabaseUrl(main).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
