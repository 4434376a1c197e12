/**
 * The runner's own cost per execution, with no store cost at all: a synthetic QueueStore hands out `BENCH_ITEMS`
 * claims as fast as they are asked for and accepts every result. Prints items per second and client CPU per item.
 * Not a test: nothing is asserted.
 *
 *   npm run build:bench && node .bench-build/bench/runner-overhead.js
 *   (BENCH_ITEMS=200000, BENCH_WORKERS=1, BENCH_BATCH=20, BENCH_ASYNC=1 for an async handler, BENCH_THREAD=0 for
 *   sequential items: one in flight, each result written with the claim of the next, as a chain runs)
 */
import { Effect, Layer, Logger, LogLevel } from "effect"
import * as EmptyQueueStore from "../src/adapters/memory/EmptyQueueStore.js"
import * as MemorySettings from "../src/adapters/memory/MemorySettings.js"
import * as NoopStore from "../src/adapters/memory/NoopStore.js"
import * as TestRunner from "../src/layers/TestRunner.js"
import { type QueueClaim, QueueStore } from "../src/ports/QueueStore.js"
import * as Runner from "../src/runtime/Runner.js"

const ITEMS = Number(process.env["BENCH_ITEMS"] ?? 200_000)
const WORKERS = Number(process.env["BENCH_WORKERS"] ?? 1)
const BATCH = Number(process.env["BENCH_BATCH"] ?? 20)
// BENCH_ASYNC=1: an async handler (a promise per execution, as graphile-worker's tasks are), else a plain function.
const ASYNC = process.env["BENCH_ASYNC"] === "1"
const THREAD = process.env["BENCH_THREAD"] === "0" ? 0 : 1

const synthetic = Layer.effect(
  QueueStore,
  Effect.gen(function* () {
    const empty = yield* QueueStore
    let next = 0
    let inFlight = 0
    const created = new Date()
    const take = (limit: number) => {
      // Sequential items: one of the type at a time.
      const room = THREAD === 0 ? Math.min(1, 1 - inFlight) : limit
      const n = Math.max(0, Math.min(room, ITEMS - next))
      const claims: Array<QueueClaim> = []
      for (let i = 0; i < n; i++) {
        const id = String(++next)
        claims.push({
          item: {
            id,
            taskType: "noop",
            payload: "{}",
            status: "processing",
            priority: 0,
            maxRuns: 1,
            thread: THREAD,
            runAfter: null,
            uniqueKey: null,
            group: null,
            createdAt: created,
            updatedAt: created
          },
          runsDone: 0,
          attempt: 1,
          leaseId: id,
          token: id
        })
      }
      inFlight += n
      return claims
    }
    return QueueStore.of({
      ...empty,
      claimBatch: (options) => Effect.sync(() => take(options.limit)),
      recordAndClaim: (results, options) =>
        Effect.sync(() => {
          inFlight -= results.length
          return { recorded: results.map(() => true), claims: take(options.limit) }
        }),
      recordResults: (results) =>
        Effect.sync(() => {
          inFlight -= results.length
          return results.map(() => true)
        }),
      renewLeases: (claims) => Effect.succeed(claims.map(() => true))
    })
  })
).pipe(Layer.provide(EmptyQueueStore.layer))

const program = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  let handled = 0
  let done: () => void = () => undefined
  const all = new Promise<void>((resolve) => (done = resolve))
  const count = () => {
    if (++handled === ITEMS) done()
  }
  yield* runner.register("noop", ASYNC ? async () => count() : count)
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  yield* runner.start
  yield* Effect.promise(() => all)
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  console.log(
    `runner alone, ${ITEMS.toLocaleString("en")} no-op executions: ${Math.round(ITEMS / seconds).toLocaleString("en")}/s, ` +
      `client CPU ${((cpu.user + cpu.system) / 1000 / ITEMS).toFixed(4)} ms/item (workers ${WORKERS}, batch ${BATCH}, thread ${THREAD}, ${ASYNC ? "async" : "sync"} handler)`
  )
  yield* runner.stop
})

Effect.runPromise(
  program.pipe(
    Effect.provide(
      Runner.layer({ workers: WORKERS, batchSize: BATCH, interval: "1 minute" }).pipe(
        Layer.provideMerge(Layer.mergeAll(NoopStore.layer, synthetic)),
        Layer.provideMerge(TestRunner.controlPorts()),
        Layer.provideMerge(MemorySettings.layer())
      )
    ),
    Effect.scoped,
    Logger.withMinimumLogLevel(LogLevel.Warning)
  )
).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
