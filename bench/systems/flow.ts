/**
 * A graph of items that wait for other items (issue 35): a flow of `steps` steps with fan-out and fan-in, enqueued
 * with one `enqueueFlow` call and drained by claims of 20 with their results recorded (no runner: the store's own
 * statements, timed one by one), beside the same number of plain items drained the same way in a schema of their
 * own. And the claim of plain items while the whole graph waits in the same schema (its root held back): waiting
 * items are outside every claim, so that claim should cost what it costs without them.
 */
import { Effect } from "effect"
import { type FlowStepInput, QueueStore, type QueueClaim } from "../../src/index.js"
import type { Context, Figures } from "../lib/types.js"
import { median, now, quoteIdent } from "../lib/util.js"
import { DEFAULTS, enqueueAll, noopInputs, withKairos } from "./kairos.js"

/**
 * A root that fans out to a first layer, layers in which each step waits for two steps of the layer above (fan-in and
 * fan-out of two), and a sink that waits for the whole last layer: `steps` steps in all.
 */
export const graph = (steps: number, taskType: string, rootType = taskType): Array<FlowStepInput> => {
  const width = Math.max(1, Math.floor((steps - 2) / 5))
  const layers = Math.floor((steps - 2) / width)
  const flow: Array<FlowStepInput> = [{ key: "root", taskType: rootType, thread: 1 }]
  for (let l = 0; l < layers; l++)
    for (let i = 0; i < width; i++)
      flow.push({
        key: `${l}:${i}`,
        taskType,
        thread: 1,
        after: l === 0 ? ["root"] : [`${l - 1}:${i}`, `${l - 1}:${(i + 1) % width}`]
      })
  const extra = steps - 2 - layers * width
  for (let i = 0; i < extra; i++) flow.push({ key: `x:${i}`, taskType, thread: 1, after: ["root"] })
  flow.push({
    key: "sink",
    taskType,
    thread: 1,
    after: Array.from({ length: width }, (_, i) => `${layers - 1}:${i}`)
  })
  return flow
}

type Rt = Parameters<Parameters<typeof withKairos>[2]>[0]

/** Claims of up to 20 with their results recorded until `taskTypes` has nothing left; each claim's time. */
const drain = (rt: Rt, taskTypes: ReadonlyArray<string>, capMs: number) =>
  rt.runPromise(
    Effect.gen(function* () {
      const queue = yield* QueueStore
      const claims: Array<number> = []
      let executions = 0
      let empty = 0
      const t0 = now()
      while (empty < 3 && now() - t0 < capMs) {
        const at = new Date()
        const t = now()
        const got: ReadonlyArray<QueueClaim> = yield* queue.claimBatch({
          limit: 20,
          taskTypes,
          owner: "bench",
          leaseUntil: new Date(at.getTime() + 600_000),
          now: at,
          repeatAfter: at
        })
        if (got.length === 0) {
          empty++
          continue
        }
        empty = 0
        claims.push(now() - t)
        executions += got.length
        yield* queue.recordResults(
          got.map((claim) => ({
            claim,
            result: { startedAt: at, finishedAt: new Date(), output: JSON.stringify({ n: claim.item.id }) }
          }))
        )
      }
      return { claims, executions, seconds: (now() - t0) / 1000 }
    })
  )

const p95 = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.95)] ?? 0

export const flowGraph = (ctx: Context, steps: number, capMs = 600_000): Promise<Figures> => {
  const plain = { ...ctx, schema: `${ctx.schema}_plain` }
  return withKairos(ctx, DEFAULTS, (rtFlow) =>
    withKairos(plain, DEFAULTS, async (rtPlain) => {
      // Plain items claimed beside the waiting graph, and without it.
      const beside = 2_000
      await enqueueAll(rtFlow, noopInputs(beside, 1))
      await enqueueAll(rtPlain, noopInputs(beside, 1))
      let t = now()
      const held = await rtFlow.runPromise(
        Effect.flatMap(QueueStore, (queue) => queue.enqueueFlow(graph(steps, "step", "hold"), new Date()))
      )
      const enqueueSeconds = (now() - t) / 1000
      ctx.log(`  flow of ${steps.toLocaleString("en-US")} steps enqueued in ${enqueueSeconds.toFixed(2)} s`)
      for (const c of [ctx, plain]) await c.admin.query(`VACUUM ANALYZE ${quoteIdent(c.schema)}.queue_items`)
      const besideGraph = await drain(rtFlow, ["noop"], capMs)
      const alone = await drain(rtPlain, ["noop"], capMs)
      // The graph itself, its root released by hand (the type nobody claims above): then drained.
      await ctx.admin.query(`UPDATE ${quoteIdent(ctx.schema)}.queue_items SET task_type = 'step' WHERE id = $1`, [
        held["root"]
      ])
      await enqueueAll(rtPlain, noopInputs(steps, 1))
      t = now()
      const flow = await drain(rtFlow, ["step"], capMs)
      const plainDrain = await drain(rtPlain, ["noop"], capMs)
      const { rows } = await ctx.admin.query<{ n: number }>(
        `SELECT ((SELECT count(*) FROM ${quoteIdent(ctx.schema)}.queue_waiting) +
           (SELECT count(*) FROM ${quoteIdent(ctx.schema)}.queue_items))::int AS n`
      )
      const left = rows[0]!.n
      const detail = `${steps.toLocaleString("en-US")} steps`
      return {
        "flow.enqueue": { value: enqueueSeconds, detail },
        "flow.claimBeside": { value: median(besideGraph.claims), detail: `${detail} waiting` },
        "flow.claimAlone": { value: median(alone.claims) },
        "flow.claim": { value: median(flow.claims), detail: `p95 ${p95(flow.claims).toFixed(2)} ms` },
        "flow.plainClaim": { value: median(plainDrain.claims), detail: `p95 ${p95(plainDrain.claims).toFixed(2)} ms` },
        "flow.rate": {
          value: flow.executions / flow.seconds,
          capped: left > 0,
          detail: left > 0 ? `${left} steps left` : `${flow.executions} executions`
        },
        "flow.plainRate": { value: plainDrain.executions / plainDrain.seconds }
      }
    })
  )
}
