/**
 * A flow under SIGKILL: a 300-step graph with fan-out and fan-in runs on two workers, one killed and replaced every
 * couple of seconds. Nothing is lost (every step ends with exactly one successful log row), nothing runs early (each
 * step starts after everything it waits for finished, and gets their outputs), nothing completes twice.
 * Integration: a real Postgres, real worker processes and signals, the real clock.
 */
import { afterEach, describe, expect, it } from "vitest"
import { exited } from "../support/process.js"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"

let db: TestDb | undefined
let workers: Array<Worker> = []

afterEach(async () => {
  killAll(workers)
  workers = []
  await db?.close()
  db = undefined
})

describe("a flow under SIGKILL", () => {
  it(
    "workers killed mid-flow: every step runs to one success, in dependency order, with its inputs",
    { timeout: 150_000 },
    async () => {
      db = await migratedSchema("flowkill")
      const config = { workers: 8, batchSize: 8, interval: "1 second", leaseDuration: "2 seconds" }
      const spawn = () => {
        const w = startWorker(db!, { config })
        workers.push(w)
        return w
      }
      const live: Array<Worker> = [spawn(), spawn()]
      await Promise.all(live.map((w) => w.waitFor((e) => e.event === "ready")))

      // Ten layers of 30 steps (each waits for two of the layer above), written by plain SQL in one statement.
      const width = 30
      const depth = 10
      const ids = (
        await db.query<{ id: string }>(
          `SELECT nextval('${db.schema}.queue_items_id_seq')::text AS id FROM generate_series(1, $1::int)`,
          [width * depth]
        )
      ).map((r) => r.id)
      const idOf = (l: number, i: number) => ids[l * width + (i % width)]!
      const after = new Map<string, ReadonlyArray<string>>()
      for (let l = 0; l < depth; l++)
        for (let i = 0; i < width; i++) after.set(idOf(l, i), l === 0 ? [] : [idOf(l - 1, i), idOf(l - 1, i + 1)])
      await db.query(
        `INSERT INTO $schema.queue_waiting (id, task_type, payload, thread, after)
         SELECT x.id, 'flow-step', (100 + (x.n % 5) * 100)::text, 1, ARRAY(SELECT jsonb_array_elements_text(x.after::jsonb)::bigint)
         FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS x(id, after, n) ORDER BY x.n`,
        [ids, ids.map((id) => JSON.stringify(after.get(id)))]
      )

      // Kill one of the two every 2-3 s while the flow runs, five times at least.
      let kills = 0
      let killedMidStep = 0
      const left = async () =>
        (
          await db!.query<{ n: number }>(
            `SELECT ((SELECT count(*) FROM $schema.queue_items) + (SELECT count(*) FROM $schema.queue_waiting))::int AS n`
          )
        )[0]!.n
      // Each kill comes 2-3 s after a worker was running, and the replacement is not waited for: the flow only moves
      // while a worker runs, so however long a replacement takes to start (seconds, on a loaded machine, when a run
      // that waited for it saw the flow finish after two kills), it cannot finish between kills.
      const ready = (w: Worker) => w.events.some((e) => e.event === "ready")
      while (kills < 5 && (await left()) > 0) {
        await until(async () => live.some(ready), 60_000, "a worker to be running")
        await sleep(2000 + Math.random() * 1000)
        // A busy worker if there is one (handlers started and not ended), so the kills cut steps short.
        const open = live.map((w) =>
          w.events.reduce((n, e) => n + (e.event === "start" ? 1 : e.event === "end" ? -1 : 0), 0)
        )
        const busy = live.flatMap((_, j) => (open[j]! > 0 ? [j] : []))
        const running = live.flatMap((w, j) => (ready(w) ? [j] : []))
        const pick = (js: ReadonlyArray<number>) => js[Math.floor(Math.random() * js.length)]!
        const i = busy.length > 0 ? pick(busy) : pick(running)
        live[i]!.child.kill("SIGKILL")
        await exited(live[i]!.child)
        kills++
        if (open[i]! > 0) killedMidStep++
        live[i] = spawn()
      }
      await Promise.all(live.map((w) => w.waitFor((e) => e.event === "ready", 60_000)))
      expect(kills).toBeGreaterThanOrEqual(3)
      expect(killedMidStep).toBeGreaterThanOrEqual(2)
      await until(async () => (await left()) === 0, 90_000, "the flow to finish")

      const log = await db.query<{
        item: string
        status: string
        started_at: Date
        finished_at: Date
        output: unknown
      }>(`SELECT queue_item_id::text AS item, status, started_at, finished_at, output FROM $schema.processed_items`)
      // Nothing lost, nothing completed twice.
      expect(log.length).toBe(ids.length)
      expect(new Set(log.map((r) => r.item)).size).toBe(ids.length)
      expect(log.every((r) => r.status === "ok")).toBe(true)
      const byItem = new Map(log.map((r) => [r.item, r]))
      for (const id of ids) {
        expect(byItem.get(id)!.output).toEqual({ step: id })
        // Nothing ran early: started after everything it waited for finished (two workers' estimates of the
        // database's clock may differ by a few milliseconds).
        for (const dep of after.get(id)!)
          expect(byItem.get(id)!.started_at.getTime()).toBeGreaterThanOrEqual(
            byItem.get(dep)!.finished_at.getTime() - 100
          )
      }
      // Every start any worker reported carried the outputs of what that step waited for.
      const starts = workers.flatMap((w) => w.events.filter((e) => e.event === "start"))
      expect(starts.length).toBeGreaterThanOrEqual(ids.length)
      for (const s of starts) {
        const deps = after.get(String(s["item"]))!
        expect(s["inputs"]).toEqual(Object.fromEntries(deps.map((dep) => [dep, { step: dep }])))
      }
      await Promise.all(live.map((w) => w.stop()))
    }
  )
})
