/**
 * Clock skew: three worker processes whose machine clocks are 90 s behind, right and 90 s ahead share one database.
 * The database's clock judges time (PgClock), so no slot fires early by it, none fires twice, no instance takes
 * back work a live one is running, and sequential items never overlap.
 * Integration: real processes, a real Postgres, wall time.
 */
import { afterEach, describe, expect, it } from "vitest"
import { Schedule } from "../../src/index.js"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"

let db: TestDb | undefined
let workers: Array<Worker> = []

afterEach(async () => {
  killAll(workers)
  workers = []
  await db?.close()
  db = undefined
})

const count = async (query: string) => (await db!.query<{ n: number }>(query))[0]!.n

describe("clock skew between instances", () => {
  it(
    "instances at -90 s, 0 and +90 s: slots fire on the database's time, once; no takeover; no sequential overlap",
    { timeout: 120_000 },
    async () => {
      db = await migratedSchema("skew")
      // The database's time at which each run row was written: "early" is judged by it, not by any worker.
      await db.query(`CREATE TABLE $schema.fired (run_id bigint, scheduled_for timestamptz, db_at timestamptz)`)
      await db.query(`
        CREATE FUNCTION $schema.note_fired() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO ${`"${db.schema}"`}.fired VALUES (NEW.id, NEW.scheduled_for, clock_timestamp());
          RETURN NEW;
        END $$`)
      await db.query(
        `CREATE TRIGGER note_fired AFTER INSERT ON $schema.job_runs FOR EACH ROW WHEN (NEW.status = 'running')
         EXECUTE FUNCTION $schema.note_fired()`
      )
      // Leases short enough that a worker judging them by a clock 90 s ahead would take back everything at once.
      const config = { workers: 4, batchSize: 20, interval: "1 second", leaseDuration: "6 seconds" }
      workers = [-90_000, 0, 90_000].map((skewMs) => startWorker(db!, { config, skewMs, slowMs: 2500 }))
      await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready")))
      // The skewed ones noticed and said so.
      for (const w of [workers[0]!, workers[2]!]) {
        expect(
          w.events.some(
            (e) => e.event === "log" && /clock is 90\.\d s (behind|ahead of) the database's/.test(String(e.message))
          )
        ).toBe(true)
      }

      // Interval jobs every second from two seconds after the database's now, and slow ones that overlap themselves.
      const every = Schedule.encodeJson(Schedule.interval({ every: "1 second" }))
      await db.query(
        `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule, next_run_at)
         SELECT 'tick-' || i, 'noop', $1::jsonb, date_trunc('second', now()) + interval '2 seconds'
         FROM generate_series(1, 10) i
         UNION ALL
         SELECT 'slow-' || i, 'slow', $1::jsonb, date_trunc('second', now()) + interval '2 seconds'
         FROM generate_series(1, 2) i`,
        [every]
      )
      // Sequential items (100 ms each: about 6 s of one-at-a-time work) and concurrent ones, some run three times.
      await db.query(
        `INSERT INTO $schema.queue_items (task_type, payload, thread, max_runs)
         SELECT 'sleepy', '100', 0, 1 FROM generate_series(1, 60)
         UNION ALL SELECT 'sleepy', '300', 1, CASE WHEN g % 4 = 0 THEN 3 ELSE 1 END FROM generate_series(1, 200) g`
      )
      await until(
        async () => (await count(`SELECT count(*)::int AS n FROM $schema.queue_items`)) === 0,
        60_000,
        "the queue to drain"
      )
      // Let the jobs run a few more seconds, then stop them and let what runs finish.
      await sleep(3000)
      await db.query(`UPDATE $schema.scheduled_jobs SET enabled = false`)
      await until(
        async () => (await count(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'running'`)) === 0,
        20_000,
        "running slots to finish"
      )

      // Items: each ran exactly its max_runs times, and no execution was started and then lost to another instance.
      const perItem = await db.query<{ runs: number; items: number }>(
        `SELECT runs, count(*)::int AS items FROM (SELECT count(*)::int AS runs FROM $schema.processed_items
         GROUP BY queue_item_id) r GROUP BY runs ORDER BY runs`
      )
      expect(perItem).toEqual([
        { runs: 1, items: 210 },
        { runs: 3, items: 50 }
      ])
      const starts = workers.flatMap((w) => w.events.filter((e) => e.event === "start" && e.item !== undefined))
      expect(starts.length).toBe(210 + 150)
      const logs = workers.flatMap((w) => w.events.filter((e) => e.event === "log").map((e) => String(e.message)))
      expect(logs.filter((m) => /lease.*lost|not renewed in time|results? refused/.test(m))).toEqual([])
      // Every instance took part, the skewed ones included.
      for (const w of workers) expect(w.events.some((e) => e.event === "start")).toBe(true)

      // Sequential items: one at a time across the three instances (clocks agree within a round trip: 20 ms slack).
      const overlaps = await count(
        `SELECT count(*)::int AS n FROM (
           SELECT started_at, lag(finished_at) OVER (ORDER BY started_at) AS previous_end
           FROM $schema.processed_items p
           WHERE p.payload = '100') s
         WHERE started_at < previous_end - interval '20 milliseconds'`
      )
      expect(overlaps).toBe(0)

      // Slots: none before its time by the database's clock, none fired twice, none taken back from a live owner.
      expect(await count(`SELECT count(*)::int AS n FROM $schema.fired`)).toBeGreaterThan(30)
      const early = await db.query(
        `SELECT run_id, scheduled_for, db_at FROM $schema.fired WHERE db_at < scheduled_for - interval '20 milliseconds'`
      )
      expect(early).toEqual([])
      const doubled = await count(
        `SELECT count(*)::int AS n FROM (SELECT job_id, scheduled_for FROM $schema.job_runs
         WHERE status IN ('success', 'running', 'failed') GROUP BY job_id, scheduled_for HAVING count(*) > 1) d`
      )
      expect(doubled).toBe(0)
      expect(
        await count(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE attempt > 1 OR status = 'failed'`)
      ).toBe(0)
      // The slow jobs overlapped themselves: those slots were recorded as skipped, not run beside the running one.
      expect(await count(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'skipped'`)).toBeGreaterThan(0)

      for (const w of workers) expect((await w.stop()).code).toBe(0)
    }
  )
})
