/**
 * Flow control's cost through a runner (issue 36): drains of `count` no-op items by one runner (`PgKairos.layer`, 20
 * workers, batch 20) of a plain type, of a type whose concurrency limit never binds (10,000 at once: what the limited
 * claim itself costs), and of one with 2 per group over 1,000 groups, interleaved over `rounds` rounds. `npm run
 * bench` reports the best of each and their ratio to plain (the goal: within 20 %); `npm run bench:limits` takes these
 * and the store-level and fairness measures.
 */
import { Effect, ManagedRuntime } from "effect"
import type pg from "pg"
import { Limits, PgKairos, QueueStore, Runner } from "../../src/index.js"
import type { Context, Figures } from "../lib/types.js"

/** What a drain is limited by: nothing, a limit that never binds, or one per group. */
export interface DrainCase {
  readonly name: "plain" | "limited" | "grouped"
  readonly limit: { readonly concurrency: number; readonly perGroup?: boolean } | undefined
  readonly groups: number
}

export const cases = (groups: number): ReadonlyArray<DrainCase> => [
  { name: "plain", limit: undefined, groups: 0 },
  { name: "limited", limit: { concurrency: 10_000 }, groups: 0 },
  { name: "grouped", limit: { concurrency: 2, perGroup: true }, groups }
]

/** One runner drain of `count` no-op items in a schema of its own: items per second, from the start to an empty queue. */
export const runnerDrain = async (
  url: string,
  admin: pg.Pool,
  schema: string,
  c: DrainCase,
  count: number
): Promise<number> => {
  const drainSchema = `${schema}_${c.name}`
  await admin.query(`DROP SCHEMA IF EXISTS "${drainSchema}" CASCADE`)
  const rt = ManagedRuntime.make(
    PgKairos.layer({ url, schema: drainSchema, workers: 20, batchSize: 20, interval: "1 second" })
  )
  try {
    await rt.runPromise(
      Effect.gen(function* () {
        const runner = yield* Runner.Runner
        yield* runner.register("t", () => Effect.void)
        if (c.limit !== undefined) yield* (yield* Limits).set({ taskType: "t", ...c.limit })
        const queue = yield* QueueStore
        yield* queue.enqueueMany(
          Array.from({ length: count }, (_, i) => ({
            taskType: "t",
            payload: "x",
            thread: 1,
            ...(c.groups > 0 ? { group: `g${i % c.groups}` } : {})
          })),
          new Date()
        )
      })
    )
    const start = performance.now()
    await rt.runPromise(Effect.flatMap(Runner.Runner, (runner) => runner.start))
    for (;;) {
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${drainSchema}".queue_items`)
      if (rows[0].n === 0) break
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    return (count / (performance.now() - start)) * 1000
  } finally {
    await rt.dispose()
    await admin.query(`DROP SCHEMA IF EXISTS "${drainSchema}" CASCADE`)
  }
}

/** The three drains, interleaved over `rounds` rounds: each one's rates, in round order. */
export const runnerDrains = async (
  url: string,
  admin: pg.Pool,
  schema: string,
  count: number,
  groups: number,
  rounds: number
): Promise<ReadonlyMap<DrainCase["name"], ReadonlyArray<number>>> => {
  const rates = new Map<DrainCase["name"], Array<number>>()
  for (let round = 0; round < rounds; round++)
    for (const c of cases(groups))
      rates.set(c.name, [...(rates.get(c.name) ?? []), await runnerDrain(url, admin, schema, c, count)])
  return rates
}

/** `npm run bench`'s figures: the best drain of each case, and the limited ones against plain. */
export const limitedDrains = async (ctx: Context, count: number, rounds: number): Promise<Figures> => {
  const groups = Math.min(1_000, Math.max(1, Math.floor(count / 10)))
  const rates = await runnerDrains(ctx.url, ctx.admin, ctx.schema, count, groups, rounds)
  const best = (name: DrainCase["name"]) => Math.max(...(rates.get(name) ?? [Number.NaN]))
  const all = (name: DrainCase["name"]) => (rates.get(name) ?? []).map((r) => r.toFixed(0)).join(" / ")
  for (const c of cases(groups)) ctx.log(`  limits ${c.name}: ${all(c.name)} items/s`)
  return {
    "limits.plain": { value: best("plain"), detail: all("plain") },
    "limits.limited": { value: best("limited"), detail: all("limited") },
    "limits.grouped": { value: best("grouped"), detail: `${groups.toLocaleString("en-US")} groups; ${all("grouped")}` },
    "limits.limitedRatio": { value: best("limited") / best("plain") },
    "limits.groupedRatio": { value: best("grouped") / best("plain") }
  }
}
