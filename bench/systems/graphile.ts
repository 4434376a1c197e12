/**
 * graphile-worker 0.18, through its documented API: `makeWorkerUtils` (`addJobs` for bulk, `addJob` for single),
 * and `run` with a `taskList`.
 *
 * Defaults: `run({ connectionString, schema, taskList })`, so concurrency 1, pool 10, poll 2 s (it LISTENs for
 * new jobs), no local queue, one completion statement per job.
 * Best: its own performance page's configuration (concurrentJobs 24, maxPoolSize 25, localQueue of 500,
 * completeJobBatchDelay 0, failJobBatchDelay 0) and a larger-concurrency variant; each is tried each round (with
 * `--quick`, the first only) and the best one is kept.
 */
import { Logger, makeWorkerUtils, run, type RunnerOptions, type WorkerUtils } from "graphile-worker"
import type { Context, DrainOutcome, Figures, System } from "../lib/types.js"
import { pickupFigures, rate } from "../lib/types.js"
import { dropSchema, isEmpty, latch, now, pickupSampler, quoteIdent, stopwatch, waitFor, within } from "../lib/util.js"

const silent = new Logger(() => () => undefined)

interface GraphileConfig {
  readonly name: string
  readonly options: Partial<RunnerOptions>
}

const DEFAULTS: GraphileConfig = { name: "defaults", options: {} }
const BEST: ReadonlyArray<GraphileConfig> = [
  {
    name: "concurrency 24, pool 25, localQueue 500, batched completion",
    options: {
      concurrency: 24,
      maxPoolSize: 25,
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
    }
  },
  {
    name: "concurrency 100, pool 25, localQueue 500, batched completion",
    options: {
      concurrency: 100,
      maxPoolSize: 25,
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
    }
  }
]

const withUtils = async <A>(ctx: Context, f: (utils: WorkerUtils) => Promise<A>): Promise<A> => {
  await dropSchema(ctx.admin, ctx.schema)
  const utils = await makeWorkerUtils({ connectionString: ctx.url, schema: ctx.schema, logger: silent })
  try {
    await utils.migrate()
    return await f(utils)
  } finally {
    await utils.release()
    await dropSchema(ctx.admin, ctx.schema)
  }
}

const specs = (n: number) => Array.from({ length: n }, (_, i) => ({ identifier: "noop", payload: { n: i } }))

const bulkEnqueue = (ctx: Context): Promise<Figures> =>
  withUtils(ctx, async (utils) => {
    // Warmed with a call of the full size, as every system is: the first call of a size is slower (JIT, buffers).
    await utils.addJobs(specs(ctx.sizes.items))
    const all = specs(ctx.sizes.items)
    const t0 = now()
    await utils.addJobs(all)
    return { bulk: { value: all.length / ((now() - t0) / 1000), detail: "WorkerUtils.addJobs, one call" } }
  })

const singleEnqueue = (ctx: Context): Promise<Figures> =>
  withUtils(ctx, async (utils) => {
    const n = ctx.sizes.singles
    for (let i = 0; i < 20; i++) await utils.addJob("noop", { n: i })
    let t0 = now()
    for (let i = 0; i < n; i++) await utils.addJob("noop", { n: i })
    const single = n / ((now() - t0) / 1000)
    t0 = now()
    await Promise.all(
      Array.from({ length: 10 }, async (_, c) => {
        for (let i = c; i < n; i += 10) await utils.addJob("noop", { n: i })
      })
    )
    const single10 = n / ((now() - t0) / 1000)
    return { single: { value: single, detail: "WorkerUtils.addJob" }, single10: { value: single10 } }
  })

const drainOnce = (ctx: Context, config: GraphileConfig): Promise<DrainOutcome> =>
  withUtils(ctx, async (utils) => {
    const n = ctx.sizes.items
    await utils.addJobs(specs(n))
    let handled = 0
    const all = latch()
    const clock = stopwatch()
    const runner = await run({
      connectionString: ctx.url,
      schema: ctx.schema,
      logger: silent,
      noHandleSignals: true,
      parsedCronItems: [],
      taskList: {
        noop: async () => {
          if (++handled === n) all.resolve()
        }
      },
      ...config.options
    })
    try {
      const done = await within(all.promise, ctx.sizes.drainCapMs)
      const recorded =
        done &&
        (await waitFor(() => isEmpty(ctx.admin, `SELECT 1 FROM ${quoteIdent(ctx.schema)}._private_jobs`), 30_000, 5))
      return { handled, ...clock.read(), capped: !recorded }
    } finally {
      await runner.stop()
    }
  })

const drain = async (ctx: Context): Promise<Figures> => {
  const defaults = await drainOnce(ctx, DEFAULTS)
  ctx.log(`  graphile-worker defaults: ${Math.round(defaults.handled / defaults.seconds)}/s`)
  let best: { config: GraphileConfig; outcome: DrainOutcome } | undefined
  for (const config of ctx.sizes.allCandidates ? BEST : BEST.slice(0, 1)) {
    const outcome = await drainOnce(ctx, config)
    ctx.log(`  graphile-worker ${config.name}: ${Math.round(outcome.handled / outcome.seconds)}/s`)
    if (best === undefined || outcome.handled / outcome.seconds > best.outcome.handled / best.outcome.seconds) {
      best = { config, outcome }
    }
  }
  return { "drain.default": rate(defaults), "drain.best": rate(best!.outcome, best!.config.name) }
}

const pickup = (ctx: Context): Promise<Figures> =>
  withUtils(ctx, async (utils) => {
    const sampler = pickupSampler()
    const runner = await run({
      connectionString: ctx.url,
      schema: ctx.schema,
      logger: silent,
      noHandleSignals: true,
      parsedCronItems: [],
      taskList: { ping: async (payload) => sampler.handled((payload as { n: number }).n) }
    })
    try {
      const { latencies, timedOut } = await sampler.run({
        samples: ctx.sizes.samples,
        enqueue: (i) => utils.addJob("ping", { n: i })
      })
      return pickupFigures(latencies, timedOut, "defaults (LISTEN/NOTIFY)")
    } finally {
      await runner.stop()
    }
  })

export const system: System = { name: "graphile-worker", bulkEnqueue, singleEnqueue, drain, pickup }
