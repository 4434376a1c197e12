/**
 * The floor: the least a Postgres queue can do, written here with plain `pg`, to show how far this machine lets
 * any Postgres queue go. One narrow table (id, payload); a statement-level trigger NOTIFYs on insert; a worker
 * loop claims a batch with `DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING` inside
 * a transaction, runs the handlers, and commits (the delete is the completion; a crash rolls it back). No log, no
 * leases, no retries, no priorities. Idle loops sleep until a NOTIFY (or a 1 s poll).
 */
import pg from "pg"
import type { Context, DrainOutcome, Figures, System } from "../lib/types.js"
import { pickupFigures, rate } from "../lib/types.js"
import {
  dropSchema,
  isEmpty,
  latch,
  now,
  pickupSampler,
  quoteIdent,
  sleep,
  stopwatch,
  waitFor,
  within
} from "../lib/util.js"

interface FloorConfig {
  readonly name: string
  readonly loops: number
  readonly batch: number
}

const CONFIGS: ReadonlyArray<FloorConfig> = [
  { name: "4 loops × batch 500", loops: 4, batch: 500 },
  { name: "2 loops × batch 1000", loops: 2, batch: 1000 },
  { name: "8 loops × batch 100", loops: 8, batch: 100 }
]
const PICKUP: FloorConfig = { name: "2 loops × batch 100", loops: 2, batch: 100 }

const createQueue = async (ctx: Context): Promise<void> => {
  const s = quoteIdent(ctx.schema)
  await dropSchema(ctx.admin, ctx.schema)
  await ctx.admin.query(`CREATE SCHEMA ${s}`)
  await ctx.admin.query(`CREATE TABLE ${s}.q (id bigserial PRIMARY KEY, payload text NOT NULL)`)
  await ctx.admin.query(`
    CREATE FUNCTION ${s}.q_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_notify('${ctx.schema}_q', ''); RETURN NULL; END $$`)
  await ctx.admin.query(
    `CREATE TRIGGER q_notify AFTER INSERT ON ${s}.q FOR EACH STATEMENT EXECUTE FUNCTION ${s}.q_notify()`
  )
}

/** A running floor worker: `loops` claim loops over a pool, one LISTEN connection that wakes them. */
const startWorker = async (ctx: Context, config: FloorConfig, handler: (payload: string) => void) => {
  const pool = new pg.Pool({ connectionString: ctx.url, max: config.loops, application_name: "kairos-bench-floor" })
  pool.on("error", () => undefined)
  const listener = new pg.Client({ connectionString: ctx.url, application_name: "kairos-bench-floor" })
  await listener.connect()
  let stopping = false
  let generation = 0
  let wake = latch()
  listener.on("notification", () => {
    generation++
    const w = wake
    wake = latch()
    w.resolve()
  })
  await listener.query(`LISTEN "${ctx.schema}_q"`)
  const claim = `DELETE FROM ${quoteIdent(ctx.schema)}.q WHERE id IN (
      SELECT id FROM ${quoteIdent(ctx.schema)}.q ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $1
    ) RETURNING id, payload`
  const loop = async () => {
    const client = await pool.connect()
    try {
      while (!stopping) {
        const seen = generation
        const waiting = wake.promise
        await client.query("BEGIN")
        const { rows } = await client.query<{ id: string; payload: string }>({
          name: "floor_claim",
          text: claim,
          values: [config.batch]
        })
        for (const row of rows) handler(row.payload)
        await client.query("COMMIT")
        if (rows.length === 0 && generation === seen) await Promise.race([waiting, sleep(1_000)])
      }
    } finally {
      client.release()
    }
  }
  const loops = Array.from({ length: config.loops }, loop)
  return {
    stop: async () => {
      stopping = true
      generation++
      wake.resolve()
      await Promise.allSettled(loops)
      await listener.end()
      await pool.end()
    }
  }
}

const withQueue = async <A>(ctx: Context, f: (db: pg.Pool) => Promise<A>): Promise<A> => {
  await createQueue(ctx)
  const db = new pg.Pool({ connectionString: ctx.url, max: 10, application_name: "kairos-bench-floor" })
  db.on("error", () => undefined)
  try {
    return await f(db)
  } finally {
    await db.end()
    await dropSchema(ctx.admin, ctx.schema)
  }
}

const payloads = (n: number) => Array.from({ length: n }, (_, i) => JSON.stringify({ n: i }))

const insertMany = (db: pg.Pool, ctx: Context, items: ReadonlyArray<string>) =>
  db.query(`INSERT INTO ${quoteIdent(ctx.schema)}.q (payload) SELECT unnest($1::text[])`, [items])

const bulkEnqueue = (ctx: Context): Promise<Figures> =>
  withQueue(ctx, async (db) => {
    // Warmed with a call of the full size, as every system is: the first call of a size is slower (JIT, buffers).
    await insertMany(db, ctx, payloads(ctx.sizes.items))
    const all = payloads(ctx.sizes.items)
    const t0 = now()
    await insertMany(db, ctx, all)
    return { bulk: { value: all.length / ((now() - t0) / 1000), detail: "INSERT ... SELECT unnest($1)" } }
  })

const singleEnqueue = (ctx: Context): Promise<Figures> =>
  withQueue(ctx, async (db) => {
    const n = ctx.sizes.singles
    const insert = (i: number) =>
      db.query({
        name: "floor_insert",
        text: `INSERT INTO ${quoteIdent(ctx.schema)}.q (payload) VALUES ($1) RETURNING id`,
        values: [JSON.stringify({ n: i })]
      })
    for (let i = 0; i < 20; i++) await insert(i)
    let t0 = now()
    for (let i = 0; i < n; i++) await insert(i)
    const single = n / ((now() - t0) / 1000)
    t0 = now()
    await Promise.all(
      Array.from({ length: 10 }, async (_, c) => {
        for (let i = c; i < n; i += 10) await insert(i)
      })
    )
    const single10 = n / ((now() - t0) / 1000)
    return { single: { value: single }, single10: { value: single10 } }
  })

const drainOnce = (ctx: Context, config: FloorConfig): Promise<DrainOutcome> =>
  withQueue(ctx, async (db) => {
    const n = ctx.sizes.items
    await insertMany(db, ctx, payloads(n))
    let handled = 0
    const all = latch()
    const clock = stopwatch()
    const worker = await startWorker(ctx, config, () => {
      if (++handled === n) all.resolve()
    })
    try {
      const done = await within(all.promise, ctx.sizes.drainCapMs)
      const recorded =
        done && (await waitFor(() => isEmpty(ctx.admin, `SELECT 1 FROM ${quoteIdent(ctx.schema)}.q`), 30_000, 5))
      return { handled, ...clock.read(), capped: !recorded }
    } finally {
      await worker.stop()
    }
  })

const drain = async (ctx: Context): Promise<Figures> => {
  let best: { config: FloorConfig; outcome: DrainOutcome } | undefined
  for (const config of ctx.sizes.allCandidates ? CONFIGS : CONFIGS.slice(0, 1)) {
    const outcome = await drainOnce(ctx, config)
    ctx.log(`  floor ${config.name}: ${Math.round(outcome.handled / outcome.seconds)}/s`)
    if (best === undefined || outcome.handled / outcome.seconds > best.outcome.handled / best.outcome.seconds) {
      best = { config, outcome }
    }
  }
  const figure = rate(best!.outcome, best!.config.name)
  return { "drain.default": figure, "drain.best": figure }
}

const pickup = (ctx: Context): Promise<Figures> =>
  withQueue(ctx, async (db) => {
    const sampler = pickupSampler()
    const worker = await startWorker(ctx, PICKUP, (payload) => sampler.handled(Number(payload)))
    try {
      const { latencies, timedOut } = await sampler.run({
        samples: ctx.sizes.samples,
        enqueue: (i) => db.query(`INSERT INTO ${quoteIdent(ctx.schema)}.q (payload) VALUES ($1)`, [String(i)])
      })
      return pickupFigures(latencies, timedOut, PICKUP.name)
    } finally {
      await worker.stop()
    }
  })

export const system: System = { name: "floor", bulkEnqueue, singleEnqueue, drain, pickup }
