/**
 * kairos, through its public API only (`../../src/index.js`): `Kairos.create` (the Promise API), and
 * `PgKairos.layer` with `Runner` and `QueueStore` (the Effect API).
 *
 * Defaults: `PgKairos.layer({ url, schema })`, so today 1 worker, batch 20, a one-minute poll woken by NOTIFY.
 * Tuned: the `TUNED` candidates below (workers / batch / pool); every candidate is tried each round (with
 * `--quick`, the first only) and the best one is kept, its name shown beside the figure.
 */
import { Effect, ManagedRuntime } from "effect"
import { Kairos, PgKairos, QueueStore, Runner, type Semaphore } from "../../src/index.js"
import type { EnqueueInput } from "../../src/index.js"
import { type Context, type DrainOutcome, type Figures, type System, pickupFigures, rate } from "../lib/types.js"
import { dropSchema, isEmpty, latch, now, pickupSampler, quoteIdent, stopwatch, waitFor, within } from "../lib/util.js"

export interface KairosConfig {
  readonly name: string
  readonly workers?: number
  readonly batchSize?: number
  readonly maxConnections?: number
  /** `namedStatements`: prepared once per connection (a direct connection's option; the default is unnamed). */
  readonly namedStatements?: boolean
}

export const DEFAULTS: KairosConfig = { name: "defaults" }
/** The defaults with named prepared statements: what the default (unnamed, which any pooler passes) costs. */
export const NAMED: KairosConfig = { name: "defaults, named statements", namedStatements: true }
/** Candidates for "kairos tuned"; the first is the one `--quick`, the RSS and the scale-out measures use. */
export const TUNED: ReadonlyArray<KairosConfig> = [
  { name: "workers 500, batch 500, pool 20", workers: 500, batchSize: 500, maxConnections: 20 },
  { name: "workers 200, batch 200, pool 10", workers: 200, batchSize: 200, maxConnections: 10 },
  { name: "workers 1000, batch 1000, pool 20", workers: 1000, batchSize: 1000, maxConnections: 20 }
]

export const layerOptions = (url: string, schema: string, config: KairosConfig): PgKairos.Options => ({
  url,
  schema,
  ...(config.workers !== undefined ? { workers: config.workers } : {}),
  ...(config.batchSize !== undefined ? { batchSize: config.batchSize } : {}),
  ...(config.maxConnections !== undefined ? { maxConnections: config.maxConnections } : {}),
  ...(config.namedStatements !== undefined ? { namedStatements: config.namedStatements } : {}),
  // KAIROS_VACUUM_DEAD_ROWS=0 measures a drain without the runner's queue vacuum (what it costs a short drain).
  ...(process.env["KAIROS_VACUUM_DEAD_ROWS"] !== undefined
    ? { vacuumDeadRows: Number(process.env["KAIROS_VACUUM_DEAD_ROWS"]) }
    : {})
})

/** A runtime over `PgKairos.layer` (migrating the schema), disposed and the schema dropped after `f`. */
export const withKairos = async <A>(
  ctx: Context,
  config: KairosConfig,
  f: (rt: ManagedRuntime.ManagedRuntime<Runner.Runner | QueueStore | Semaphore, unknown>) => Promise<A>,
  schema = ctx.schema
): Promise<A> => {
  await dropSchema(ctx.admin, schema)
  const rt = ManagedRuntime.make(PgKairos.layer(layerOptions(ctx.url, schema, config)))
  try {
    await rt.runPromise(Effect.void)
    return await f(rt)
  } finally {
    await rt.dispose()
    await dropSchema(ctx.admin, schema)
  }
}

export const noopInputs = (n: number, thread: 0 | 1, taskType = "noop"): Array<EnqueueInput> =>
  Array.from({ length: n }, (_, i) => ({ taskType, payload: JSON.stringify({ n: i }), thread }))

/** Adds items through `QueueStore.enqueueMany`, 20,000 per statement. */
export const enqueueAll = (
  rt: ManagedRuntime.ManagedRuntime<QueueStore, unknown>,
  inputs: ReadonlyArray<EnqueueInput>
): Promise<void> =>
  rt.runPromise(
    Effect.gen(function* () {
      const queue = yield* QueueStore
      for (let i = 0; i < inputs.length; i += 20_000) yield* queue.enqueueMany(inputs.slice(i, i + 20_000), new Date())
    })
  )

export const queueEmpty = (ctx: Context, schema = ctx.schema) =>
  isEmpty(ctx.admin, `SELECT 1 FROM ${quoteIdent(schema)}.queue_items`)

/** Drains `n` queued no-op items with one runner of `config`; timed from `runner.start` to an empty queue. */
const drainOnce = (ctx: Context, config: KairosConfig, thread: 0 | 1, n = ctx.sizes.items): Promise<DrainOutcome> =>
  withKairos(ctx, config, async (rt) => {
    const runner = await rt.runPromise(Runner.Runner)
    let handled = 0
    const all = latch()
    await rt.runPromise(
      // An async function, as graphile-worker's and pg-boss's handlers are.
      runner.register("noop", async () => {
        if (++handled === n) all.resolve()
      })
    )
    await enqueueAll(rt, noopInputs(n, thread))
    const clock = stopwatch()
    await rt.runPromise(runner.start)
    const done = await within(all.promise, ctx.sizes.drainCapMs)
    const recorded = done && (await waitFor(() => queueEmpty(ctx), 30_000, 5))
    const time = clock.read()
    await rt.runPromise(runner.stop)
    return { handled, ...time, capped: !recorded }
  })

const bulkEnqueue = async (ctx: Context): Promise<Figures> => {
  const n = ctx.sizes.items
  const inputs = noopInputs(n, 1)
  await dropSchema(ctx.admin, ctx.schema)
  // The Promise API: Kairos.create(...).enqueueMany.
  const k = await Kairos.create({ url: ctx.url, schema: ctx.schema })
  let promise: number
  try {
    // Each API is warmed with a call of the full size, as every system is: the first call of a size is ~20 % slower
    // (JIT, buffers), so whichever API went first here measured slower.
    await k.enqueueMany(noopInputs(n, 1))
    const t0 = now()
    await k.enqueueMany(inputs)
    promise = n / ((now() - t0) / 1000)
  } finally {
    await k.stop()
    await dropSchema(ctx.admin, ctx.schema)
  }
  // The Effect API: QueueStore.enqueueMany, one statement.
  const effect = await withKairos(ctx, DEFAULTS, async (rt) => {
    await enqueueAll(rt, noopInputs(n, 1))
    const t0 = now()
    await rt.runPromise(Effect.flatMap(QueueStore, (queue) => queue.enqueueMany(inputs, new Date())))
    return n / ((now() - t0) / 1000)
  })
  return { bulk: { value: promise, detail: "Kairos.create().enqueueMany" }, "bulk.effect": { value: effect } }
}

const singleEnqueue = async (ctx: Context): Promise<Figures> => {
  const n = ctx.sizes.singles
  const input = (i: number): EnqueueInput => ({ taskType: "noop", payload: JSON.stringify({ n: i }) })
  const out: Record<string, { value: number }> = {}
  await dropSchema(ctx.admin, ctx.schema)
  const k = await Kairos.create({ url: ctx.url, schema: ctx.schema })
  try {
    for (let i = 0; i < 20; i++) await k.enqueue(input(i))
    let t0 = now()
    for (let i = 0; i < n; i++) await k.enqueue(input(i))
    out["single.promise"] = { value: n / ((now() - t0) / 1000) }
    t0 = now()
    await Promise.all(
      Array.from({ length: 10 }, async (_, c) => {
        for (let i = c; i < n; i += 10) await k.enqueue(input(i))
      })
    )
    out["single10.promise"] = { value: n / ((now() - t0) / 1000) }
  } finally {
    await k.stop()
    await dropSchema(ctx.admin, ctx.schema)
  }
  await withKairos(ctx, DEFAULTS, async (rt) => {
    const sequential = (count: number) =>
      Effect.gen(function* () {
        const queue = yield* QueueStore
        for (let i = 0; i < count; i++) yield* queue.enqueue(input(i), new Date())
      })
    await rt.runPromise(sequential(20))
    let t0 = now()
    await rt.runPromise(sequential(n))
    out["single.effect"] = { value: n / ((now() - t0) / 1000) }
    t0 = now()
    await rt.runPromise(
      Effect.flatMap(QueueStore, (queue) =>
        Effect.forEach(
          Array.from({ length: 10 }, (_, c) => c),
          (c) =>
            Effect.gen(function* () {
              for (let i = c; i < n; i += 10) yield* queue.enqueue(input(i), new Date())
            }),
          { concurrency: "unbounded", discard: true }
        )
      )
    )
    out["single10.effect"] = { value: n / ((now() - t0) / 1000) }
  })
  return out
}

const drain = async (ctx: Context): Promise<Figures> => {
  const defaults = await drainOnce(ctx, DEFAULTS, 1)
  ctx.log(`  kairos defaults: ${Math.round(defaults.handled / defaults.seconds)}/s`)
  let best: { config: KairosConfig; outcome: DrainOutcome } | undefined
  for (const config of ctx.sizes.allCandidates ? TUNED : TUNED.slice(0, 1)) {
    const outcome = await drainOnce(ctx, config, 1)
    ctx.log(`  kairos ${config.name}: ${Math.round(outcome.handled / outcome.seconds)}/s`)
    if (best === undefined || outcome.handled / outcome.seconds > best.outcome.handled / best.outcome.seconds) {
      best = { config, outcome }
    }
  }
  const sequential = await drainOnce(ctx, DEFAULTS, 0)
  ctx.log(`  kairos sequential: ${Math.round(sequential.handled / sequential.seconds)}/s`)
  // The same two drains with named prepared statements (the option for a direct connection).
  const named = await drainOnce(ctx, NAMED, 1)
  ctx.log(`  kairos defaults, named statements: ${Math.round(named.handled / named.seconds)}/s`)
  const sequentialNamed = await drainOnce(ctx, NAMED, 0)
  ctx.log(`  kairos sequential, named statements: ${Math.round(sequentialNamed.handled / sequentialNamed.seconds)}/s`)
  return {
    "drain.default": rate(defaults),
    "drain.best": rate(best!.outcome, best!.config.name),
    "drain.sequential": rate(sequential),
    "drain.named": rate(named),
    "drain.sequential.named": rate(sequentialNamed)
  }
}

const pickup = async (ctx: Context): Promise<Figures> => {
  await dropSchema(ctx.admin, ctx.schema)
  const sampler = pickupSampler()
  const k = await Kairos.create({ url: ctx.url, schema: ctx.schema })
  try {
    await k.register("ping", (job) => sampler.handled(Number(job.payload)))
    await k.start()
    const { latencies, timedOut } = await sampler.run({
      samples: ctx.sizes.samples,
      enqueue: (i) => k.enqueue({ taskType: "ping", payload: String(i) })
    })
    return pickupFigures(latencies, timedOut, "Kairos.create defaults, default (thread 0) items")
  } finally {
    await k.stop()
    await dropSchema(ctx.admin, ctx.schema)
  }
}

export const system: System = { name: "kairos", bulkEnqueue, singleEnqueue, drain, pickup }
