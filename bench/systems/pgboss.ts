/**
 * pg-boss 12, through its documented API: `insert` (bulk), `send` (single), `work` (a batch handler).
 *
 * Defaults: `new PgBoss({ connectionString, schema })`, `createQueue(name)`, `work(name, handler)`: one job per
 * fetch, a 2-second poll, no LISTEN/NOTIFY (it is opt-in), completed jobs kept for 7 days.
 * Best: LISTEN/NOTIFY on (`useListenNotify` and the queue's `notify`), batched fetch and completion
 * (`batchSize`), several fetch loops (`localConcurrency`), `burstWhenBatchFull` (fetch again at once while batches
 * come back full), a 0.5 s poll; the candidates below are tried each round (with `--quick`, the first only) and the
 * best one is kept. Pickup latency uses its defaults plus NOTIFY (without it a pickup waits up to the 2 s poll).
 */
import { PgBoss } from "pg-boss"
import type { Context, DrainOutcome, Figures, System } from "../lib/types.js"
import { pickupFigures, rate } from "../lib/types.js"
import { dropSchema, isEmpty, latch, now, pickupSampler, quoteIdent, stopwatch, waitFor, within } from "../lib/util.js"

interface BossConfig {
  readonly name: string
  readonly notify: boolean
  readonly max?: number
  readonly work: {
    readonly batchSize?: number
    readonly localConcurrency?: number
    readonly burstWhenBatchFull?: boolean
    readonly pollingIntervalSeconds?: number
  }
}

const DEFAULTS: BossConfig = { name: "defaults", notify: false, work: {} }
const BEST: ReadonlyArray<BossConfig> = [
  {
    name: "notify, batch 100 × 4 loops, burst, pool 20",
    notify: true,
    max: 20,
    work: { batchSize: 100, localConcurrency: 4, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }
  },
  {
    name: "notify, batch 500 × 2 loops, burst, pool 20",
    notify: true,
    max: 20,
    work: { batchSize: 500, localConcurrency: 2, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }
  }
]
const PICKUP: BossConfig = { name: "defaults + notify", notify: true, work: {} }

const QUEUE = "noop"

const withBoss = async <A>(ctx: Context, config: BossConfig, f: (boss: PgBoss) => Promise<A>): Promise<A> => {
  await dropSchema(ctx.admin, ctx.schema)
  const boss = new PgBoss({
    connectionString: ctx.url,
    schema: ctx.schema,
    ...(config.notify ? { useListenNotify: true } : {}),
    ...(config.max !== undefined ? { max: config.max } : {})
  })
  boss.on("error", (e) => ctx.log(`  pg-boss error: ${String(e)}`))
  try {
    await boss.start()
    await boss.createQueue(QUEUE, config.notify ? { notify: true } : {})
    return await f(boss)
  } finally {
    await boss.stop({ graceful: true, timeout: 5_000 })
    await dropSchema(ctx.admin, ctx.schema)
  }
}

const jobs = (n: number) => Array.from({ length: n }, (_, i) => ({ data: { n: i } }))

const bulkEnqueue = (ctx: Context): Promise<Figures> =>
  withBoss(ctx, DEFAULTS, async (boss) => {
    // Warmed with a call of the full size, as every system is: the first call of a size is slower (JIT, buffers).
    await boss.insert(QUEUE, jobs(ctx.sizes.items))
    const all = jobs(ctx.sizes.items)
    const t0 = now()
    await boss.insert(QUEUE, all)
    return { bulk: { value: all.length / ((now() - t0) / 1000), detail: "insert, one call" } }
  })

const singleEnqueue = (ctx: Context): Promise<Figures> =>
  withBoss(ctx, DEFAULTS, async (boss) => {
    const n = ctx.sizes.singles
    for (let i = 0; i < 20; i++) await boss.send(QUEUE, { n: i })
    let t0 = now()
    for (let i = 0; i < n; i++) await boss.send(QUEUE, { n: i })
    const single = n / ((now() - t0) / 1000)
    t0 = now()
    await Promise.all(
      Array.from({ length: 10 }, async (_, c) => {
        for (let i = c; i < n; i += 10) await boss.send(QUEUE, { n: i })
      })
    )
    const single10 = n / ((now() - t0) / 1000)
    return { single: { value: single, detail: "send" }, single10: { value: single10 } }
  })

const drainOnce = (ctx: Context, config: BossConfig): Promise<DrainOutcome> =>
  withBoss(ctx, config, async (boss) => {
    const n = ctx.sizes.items
    await boss.insert(QUEUE, jobs(n))
    let handled = 0
    const all = latch()
    const clock = stopwatch()
    await boss.work(QUEUE, config.work, async (batch) => {
      handled += batch.length
      if (handled >= n) all.resolve()
    })
    const done = await within(all.promise, ctx.sizes.drainCapMs)
    const recorded =
      done &&
      (await waitFor(
        () =>
          isEmpty(ctx.admin, `SELECT 1 FROM ${quoteIdent(ctx.schema)}.job WHERE name = $1 AND state < 'completed'`, [
            QUEUE
          ]),
        30_000,
        5
      ))
    const time = clock.read()
    await boss.offWork(QUEUE)
    return { handled, ...time, capped: !recorded }
  })

const drain = async (ctx: Context): Promise<Figures> => {
  const defaults = await drainOnce(ctx, DEFAULTS)
  ctx.log(`  pg-boss defaults: ${(defaults.handled / defaults.seconds).toFixed(1)}/s`)
  let best: { config: BossConfig; outcome: DrainOutcome } | undefined
  for (const config of ctx.sizes.allCandidates ? BEST : BEST.slice(0, 1)) {
    const outcome = await drainOnce(ctx, config)
    ctx.log(`  pg-boss ${config.name}: ${Math.round(outcome.handled / outcome.seconds)}/s`)
    if (best === undefined || outcome.handled / outcome.seconds > best.outcome.handled / best.outcome.seconds) {
      best = { config, outcome }
    }
  }
  return { "drain.default": rate(defaults), "drain.best": rate(best!.outcome, best!.config.name) }
}

const pickup = (ctx: Context): Promise<Figures> =>
  withBoss(ctx, PICKUP, async (boss) => {
    const sampler = pickupSampler()
    await boss.work<{ n: number }>(QUEUE, async (batch) => {
      for (const job of batch) sampler.handled(job.data.n)
    })
    const { latencies, timedOut } = await sampler.run({
      samples: ctx.sizes.samples,
      enqueue: (i) => boss.send(QUEUE, { n: i })
    })
    return pickupFigures(latencies, timedOut, PICKUP.name)
  })

export const system: System = { name: "pg-boss", bulkEnqueue, singleEnqueue, drain, pickup }
