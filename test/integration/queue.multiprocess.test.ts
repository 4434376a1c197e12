/**
 * The queue across worker processes on one database: exact run counts, sequential types never overlapping,
 * fenced late results, wake-ups by NOTIFY (also after the listener's connection is killed), the semaphore.
 * Integration: real processes, real signals, a real Postgres, wall time.
 */
import { afterEach, describe, expect, it } from "vitest"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"
import { channel } from "../../src/adapters/postgres/PgSchema.js"

let db: TestDb | undefined
let workers: Array<Worker> = []

afterEach(async () => {
  killAll(workers)
  workers = []
  await db?.close()
  db = undefined
})

const processedOf = async (itemId: string) =>
  (
    await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.processed_items WHERE queue_item_id = $1`, [
      itemId
    ])
  )[0]!.n

describe("the queue across processes", () => {
  it(
    "three workers, 5,000 SQL-inserted items: exact run counts, nothing left, no sequential overlap",
    { timeout: 240_000 },
    async () => {
      db = await migratedSchema("q5000")
      const types = Array.from({ length: 10 }, (_, i) => `type${i}`)
      const config = { workers: 16, batchSize: 50, interval: "1 second", leaseDuration: "10 seconds" }
      workers = Array.from({ length: 3 }, () => startWorker(db!, { config, types }))
      await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready")))
      const inserted = await db.query<{ id: string; max_runs: number }>(
        `INSERT INTO $schema.queue_items (task_type, payload, priority, max_runs, thread)
       SELECT 'type' || (i % 10), 'item ' || i, i % 7, CASE WHEN i % 3 = 0 THEN 3 ELSE 1 END, (i / 10) % 2
       FROM generate_series(1, 5000) i
       RETURNING id::text AS id, max_runs`
      )
      expect(inserted.length).toBe(5000)
      await until(
        async () => (await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
        200_000,
        "the queue to drain",
        // Say what is left and what the workers logged: a stuck item is otherwise invisible.
        async () => {
          const left = await db!.query(
            `SELECT task_type, status, thread, in_flight, max_runs, count(*)::int AS n FROM $schema.queue_items
           GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3`
          )
          const leases = await db!.query(
            `SELECT (SELECT count(*) FROM $schema.queue_leases)::int AS n,
             (SELECT count(*) FROM $schema.queue_items WHERE lease_token IS NOT NULL)::int AS "onRows"`
          )
          const logs = workers.flatMap((w) => w.events.filter((ev) => ev.event === "log").slice(-20))
          return `left: ${JSON.stringify(left)}\nleases: ${JSON.stringify(leases)}\nlogs: ${JSON.stringify(logs)}`
        }
      )
      const counts = await db.query<{ id: string; n: number }>(
        `SELECT queue_item_id::text AS id, count(*)::int AS n FROM $schema.processed_items GROUP BY queue_item_id`
      )
      const byId = new Map(counts.map((c) => [c.id, c.n]))
      for (const item of inserted) expect(byId.get(item.id) ?? 0).toBe(item.max_runs)
      const total = inserted.reduce((n, i) => n + i.max_runs, 0)
      expect(counts.reduce((n, c) => n + c.n, 0)).toBe(total)
      // Sequential executions of one type never overlap (back-to-back is fine).
      const overlaps = await db.query(
        `SELECT a.id FROM $schema.processed_items a
       JOIN $schema.processed_items b ON a.task_type = b.task_type AND a.id < b.id
         AND a.started_at < b.finished_at AND b.started_at < a.finished_at
       WHERE a.queue_item_id IN (SELECT unnest($1::bigint[])) AND b.queue_item_id IN (SELECT unnest($1::bigint[]))
       LIMIT 5`,
        [inserted.filter((_, i) => Math.floor((i + 1) / 10) % 2 === 0).map((i) => i.id)]
      )
      expect(overlaps).toEqual([])
      const owners = new Set(workers.flatMap((w) => w.events.filter((e) => e.event === "ready").map((e) => e.owner)))
      expect(owners.size).toBe(3)
      const exits = await Promise.all(workers.map((w) => w.stop()))
      expect(exits.map((e) => e.code)).toEqual([0, 0, 0])
      expect(await db.query(`SELECT 1 FROM $schema.queue_leases`)).toEqual([])
      expect(await db.query(`SELECT 1 FROM $schema.queue_items WHERE lease_token IS NOT NULL`)).toEqual([])
    }
  )

  it(
    "committed rows wake an idle worker within a second (30 s poll); rolled-back rows never run",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qwake")
      const worker = startWorker(db, { config: { interval: "30 seconds" } })
      workers = [worker]
      await worker.waitFor((e) => e.event === "ready")
      await sleep(1500) // let the first (startup) tick pass
      await db.query(
        `BEGIN; INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', 'rolled-back'); ROLLBACK;`
      )
      const before = Date.now()
      const [item] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload, priority, max_runs, thread) VALUES ('sleepy', '0', 0, 1, 0) RETURNING id::text AS id`
      )
      await worker.waitFor((e) => e.event === "end" && e.item === item!.id, 10_000)
      expect(Date.now() - before).toBeLessThan(1500)
      // The worker writes its results in batches, after the handler's end.
      await until(async () => (await processedOf(item!.id)) > 0, 10_000, "the item's result in the log")
      expect(await db.query(`SELECT 1 FROM $schema.processed_items WHERE payload = 'rolled-back'`)).toEqual([])
      expect(await processedOf(item!.id)).toBe(1)

      // Kill the listening connection: the listener reconnects and wake-ups come back.
      await db.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
        // This file's listeners only: other files run beside it on the same server.
        [`kairos-listener:${channel(db.schema)}`.slice(0, 63)]
      )
      await until(
        async () =>
          (
            await db!.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1`, [
              `kairos-listener:${channel(db!.schema)}`.slice(0, 63)
            ])
          ).length > 0,
        10_000,
        "the listener to reconnect"
      )
      const again = Date.now()
      const [next] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', '0') RETURNING id::text AS id`
      )
      await worker.waitFor((e) => e.event === "end" && e.item === next!.id, 10_000)
      expect(Date.now() - again).toBeLessThan(1500)
      await worker.stop()
    }
  )

  it(
    "without any NOTIFY (listener killed, trigger off), new items still run by the poll",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qpoll")
      const worker = startWorker(db, { config: { interval: "1 second" } })
      workers = [worker]
      await worker.waitFor((e) => e.event === "ready")
      await db.query(`ALTER TABLE $schema.queue_items DISABLE TRIGGER queue_items_notify`)
      await db.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
        // This file's listeners only: other files run beside it on the same server.
        [`kairos-listener:${channel(db.schema)}`.slice(0, 63)]
      )
      const [item] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', '0') RETURNING id::text AS id`
      )
      await worker.waitFor((e) => e.event === "end" && e.item === item!.id, 10_000)
      await until(async () => (await processedOf(item!.id)) === 1, 5_000, "the result")
      await worker.stop()
    }
  )

  it(
    "SIGKILL a worker mid-item: the item runs again after its lease expires, on another worker, once",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qkill")
      const config = { interval: "500 millis", leaseDuration: "2 seconds" }
      const victim = startWorker(db, { config })
      workers = [victim]
      await victim.waitFor((e) => e.event === "ready")
      const [item] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', '60000') RETURNING id::text AS id`
      )
      await victim.waitFor((e) => e.event === "start" && e.item === item!.id)
      // The survivor finishes at once what the victim would have slept on for a minute.
      const survivor = startWorker(db, { config, sleepFactor: 0 })
      workers.push(survivor)
      await survivor.waitFor((e) => e.event === "ready")
      victim.child.kill("SIGKILL")
      await survivor.waitFor((e) => e.event === "end" && e.item === item!.id, 20_000)
      await until(async () => (await processedOf(item!.id)) === 1, 5_000, "the survivor's result")
      await sleep(1000)
      // Once: the killed execution never counts, and the item is gone after its one run.
      expect(await processedOf(item!.id)).toBe(1)
      expect(await db.query(`SELECT 1 FROM $schema.queue_items WHERE id = $1`, [item!.id])).toEqual([])
      expect(survivor.events.filter((e) => e.event === "start" && e.item === item!.id).length).toBe(1)
      await survivor.stop()
    }
  )

  it(
    "a frozen worker (SIGSTOP past its lease, then SIGCONT) has its late result refused; the run count stays exact",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qfrozen")
      const config = { interval: "300 millis", leaseDuration: "1500 millis" }
      const frozen = startWorker(db, { config })
      workers = [frozen]
      await frozen.waitFor((e) => e.event === "ready")
      const [item] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', '2500') RETURNING id::text AS id`
      )
      await frozen.waitFor((e) => e.event === "start" && e.item === item!.id)
      frozen.child.kill("SIGSTOP")
      const successor = startWorker(db, { config })
      workers.push(successor)
      await successor.waitFor((e) => e.event === "end" && e.item === item!.id, 20_000)
      await until(async () => (await processedOf(item!.id)) === 1, 5_000, "the successor's result")
      frozen.child.kill("SIGCONT")
      await frozen.waitFor(
        (e) => e.event === "log" && /lease.*lost|not renewed in time|refused/.test(String(e.message)),
        15_000
      )
      await sleep(500)
      expect(await processedOf(item!.id)).toBe(1)
      expect(await db.query(`SELECT 1 FROM $schema.queue_items WHERE id = $1`, [item!.id])).toEqual([])
      await Promise.all(workers.map((w) => w.stop()))
    }
  )

  it(
    "a pause written while the listener is away still stops a busy worker, whose poll is a minute",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qpauseaway")
      // A busy worker trusts the switches it read while its listener listens: with the listener gone, it must read
      // them at every tick again (the NOTIFY of this pause is lost), not wait for its one-minute poll.
      const worker = startWorker(db, { config: { interval: "1 minute" } })
      workers = [worker]
      await worker.waitFor((e) => e.event === "ready")
      await db.query(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) SELECT 'sleepy', '20', 1 FROM generate_series(1, 2000)`
      )
      await worker.waitFor((e) => e.event === "end", 10_000)
      await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, [
        `kairos-listener:${channel(db.schema)}`.slice(0, 63)
      ])
      await db.query(`INSERT INTO $schema.scheduler_meta (key, value) VALUES ('semaphore', 'red')`)
      // Whatever was claimed before the pause finishes; then nothing more starts.
      await sleep(3000)
      const starts = () => worker.events.filter((e) => e.event === "start").length
      const paused = starts()
      await sleep(2000)
      expect(starts()).toBe(paused)
      expect(paused).toBeLessThan(2000)
      await db.query(`UPDATE $schema.scheduler_meta SET value = 'green' WHERE key = 'semaphore'`)
      await until(async () => starts() > paused, 10_000, "work to resume")
      await worker.stop()
    }
  )

  it(
    "the semaphore set to red by another process: nothing new starts; green: work resumes",
    { timeout: 60_000 },
    async () => {
      db = await migratedSchema("qsem")
      const worker = startWorker(db, { config: { interval: "500 millis" } })
      workers = [worker]
      await worker.waitFor((e) => e.event === "ready")
      await db.query(`INSERT INTO $schema.scheduler_meta (key, value) VALUES ('semaphore', 'red')`)
      await sleep(700)
      const [item] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('sleepy', '0') RETURNING id::text AS id`
      )
      await sleep(2000)
      expect(worker.events.some((e) => e.event === "start" && e.item === item!.id)).toBe(false)
      await db.query(`UPDATE $schema.scheduler_meta SET value = 'green' WHERE key = 'semaphore'`)
      await worker.waitFor((e) => e.event === "end" && e.item === item!.id, 10_000)
      await until(async () => (await processedOf(item!.id)) === 1, 5_000, "the result")
      await worker.stop()
    }
  )
})
