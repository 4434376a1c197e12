/**
 * A SIGKILL storm: one of three workers is killed with SIGKILL and replaced, every few seconds, for about forty seconds
 * (five kills at least), while 1,000 items (sequential and concurrent, some run three times) and 50 interval jobs run.
 * Short leases, so what a killed worker held is taken back quickly. Everything finishes; the invariants hold.
 * Integration: a real Postgres, real worker processes and signals, the real clock.
 */
import { afterEach, describe, expect, it } from "vitest"
import { Schedule } from "../../src/index.js"
import { exited } from "../support/process.js"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"
import { assertInvariants, type Enqueued } from "./invariants.js"

let db: TestDb | undefined
let workers: Array<Worker> = []

afterEach(async () => {
  killAll(workers)
  workers = []
  await db?.close()
  db = undefined
})

/** The waves of items come in over this long, and the storm lasts at least as long. */
const STORM_MS = 40_000
const KILLS = 5
const sequentialTypes = ["seq-a", "seq-b", "seq-c", "seq-d", "seq-e", "seq-f", "seq-g", "seq-h"]

describe("a SIGKILL storm", () => {
  it(
    "one of three workers killed and replaced every few seconds: nothing lost, nothing doubled, no overlap",
    { timeout: 240_000 },
    async () => {
      const t0 = Date.now()
      const phase = (what: string) =>
        console.log(`sigkill storm: ${what} at ${((Date.now() - t0) / 1000).toFixed(1)} s`)
      db = await migratedSchema("storm")
      const config = { workers: 8, batchSize: 20, interval: "1 second", leaseDuration: "2 seconds" }
      const spawn = () => {
        const w = startWorker(db!, { config, sleepyTypes: sequentialTypes, jobEvents: true })
        workers.push(w)
        return w
      }
      const live: Array<Worker> = [spawn(), spawn(), spawn()]
      await Promise.all(live.map((w) => w.waitFor((e) => e.event === "ready")))
      phase("three workers ready")

      // 50 interval jobs, every 1 or 2 seconds.
      const every = (ms: number) => Schedule.encodeJson(Schedule.interval({ every: ms }))
      await db.query(
        `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule, next_run_at)
         SELECT 'job-' || i, 'noop', CASE WHEN i % 2 = 0 THEN $1::jsonb ELSE $2::jsonb END, now() + interval '1 second'
         FROM generate_series(1, 50) i`,
        [every(1000), every(2000)]
      )
      // 1,000 items in eight waves of 125, five seconds apart, so the kills hit work all along: per wave 50
      // sequential ones (50 ms, over eight task types) and 75 concurrent ones (0.6-1.8 s); every third runs three times.
      const enqueued: Array<Enqueued> = []
      const wave = () =>
        db!.query<Enqueued>(
          `INSERT INTO $schema.queue_items (task_type, payload, thread, max_runs)
           SELECT ($1::text[])[1 + g % 8], '50', 0, CASE WHEN g % 3 = 0 THEN 3 ELSE 1 END FROM generate_series(1, 50) g
           UNION ALL
           SELECT 'sleepy', (600 + 400 * (g % 4))::text, 1, CASE WHEN g % 3 = 0 THEN 3 ELSE 1 END
           FROM generate_series(1, 75) g
           RETURNING id::text AS id, max_runs, thread`,
          [sequentialTypes]
        )

      // The storm: SIGKILL a worker and start another in its place.
      const stormStart = Date.now()
      let kills = 0
      let killedMidWork = 0
      let wavesLeft = 7
      const waves = setInterval(() => {
        if (wavesLeft-- > 0) void wave().then((rows) => enqueued.push(...rows))
      }, STORM_MS / 8)
      enqueued.push(...(await wave()))
      // A kill 2-5 s after the previous replacement came up (so two workers always run), for as long as the waves come
      // in, and five kills at least (on a loaded machine, workers take seconds to start).
      while (kills < KILLS || Date.now() - stormStart < STORM_MS) {
        await sleep(2000 + Math.random() * 3000)
        await Promise.all(live.map((w) => w.waitFor((e) => e.event === "ready", 60_000)))
        // Handlers each worker started and has not ended: a random one of the busy workers is killed (any one, if
        // none is busy), so the kills cut executions short.
        const open = live.map((w) =>
          w.events.reduce((n, e) => n + (e.event === "start" ? 1 : e.event === "end" ? -1 : 0), 0)
        )
        const busy = live.flatMap((_, j) => (open[j]! > 0 ? [j] : []))
        const i =
          busy.length > 0 ? busy[Math.floor(Math.random() * busy.length)]! : Math.floor(Math.random() * live.length)
        live[i]!.child.kill("SIGKILL")
        await exited(live[i]!.child)
        kills++
        phase(`kill ${kills}`)
        if (open[i]! > 0) killedMidWork++
        live[i] = spawn()
      }
      clearInterval(waves)
      phase(`the storm over (${kills} kills)`)
      await until(async () => enqueued.length === 1000, 10_000, "the last wave")
      // The kills hit running handlers, not idle workers only.
      expect(killedMidWork).toBeGreaterThanOrEqual(kills / 2)

      await Promise.all(live.map((w) => w.waitFor((e) => e.event === "ready")))
      await until(
        async () => (await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
        // Seconds on a quiet machine; minutes' worth of margin for a loaded or slow one (a liveness bound only).
        120_000,
        "the queue to drain after the storm"
      )
      phase("the queue drained")
      await db.query(`UPDATE $schema.scheduled_jobs SET enabled = false`)
      await until(
        async () =>
          (
            await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'running'`)
          )[0]!.n === 0,
        20_000,
        "running slots to finish or be taken back"
      )
      const stats = await assertInvariants(db, {
        enqueued,
        drained: true,
        leaseSlackMs: 3000,
        handlerEvents: () => workers.flatMap((w) => w.events)
      })
      const runs = enqueued.reduce((n, e) => n + e.max_runs, 0)
      expect(stats.processed).toBe(runs)
      // The jobs kept firing through the storm: about 37 slots a second were due.
      expect(stats.successfulSlots).toBeGreaterThan(500)

      const exits = await Promise.all(live.map((w) => w.stop()))
      expect(exits.map((e) => e.code)).toEqual([0, 0, 0])
      await assertInvariants(db, { enqueued, drained: true })
    }
  )
})
