/**
 * Faults during a drain, across worker processes (integration: a real Postgres, real processes, the real clock):
 * connections killed again and again, mid-transaction, while three workers drain the queue.
 */
import { afterAll, describe, expect, it } from "vitest"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"

const dbs: Array<TestDb> = []
afterAll(async () => {
  for (const db of dbs) await db.close()
})

describe("faults during a drain", () => {
  it("sessions killed mid-transaction again and again: three workers stay alive and record every item exactly once", async () => {
    const db = await migratedSchema("faults")
    dbs.push(db)
    // Enough that the drain outlasts the first kills, even on a fast machine.
    const items = 20_000
    await db.query(
      `INSERT INTO $schema.queue_items (task_type, payload, thread) SELECT 'noop', g::text, 1 FROM generate_series(1, ${items}) g`
    )
    const config = { workers: 20, batchSize: 50, interval: "1 second", leaseDuration: "3 seconds" }
    const workers: Array<Worker> = [0, 1, 2].map(() => startWorker(db, { config }))
    try {
      await Promise.all(workers.map((w) => w.waitFor((e) => e.event === "ready")))
      // Kill every session of this file's workers every 20 ms for 3 seconds: claims, result batches, renewals
      // and heartbeats die mid-statement and mid-transaction (a ROLLBACK on a dead connection is a defect).
      let killedMidDrain = 0
      const until3s = Date.now() + 3000
      while (Date.now() < until3s) {
        const [left] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`)
        const rows = await db.query<{ n: number }>(
          `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1`,
          [`kairos-worker:${db.schema}`.slice(0, 63)]
        )
        if (left!.n > 0) killedMidDrain += rows[0]!.n
        await sleep(20)
      }
      // The kills hit the workers in the middle of the drain, not only idle ones afterwards.
      expect(killedMidDrain).toBeGreaterThan(0)
      // Every item is recorded once: a result whose batch died is refused later (its lease was taken back), so
      // the item runs again and is recorded then.
      await until(
        async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
        90_000,
        "the queue to drain after the kills"
      )
      const [log] = await db.query<{ rows: number; items: number }>(
        `SELECT count(*)::int AS rows, count(DISTINCT queue_item_id)::int AS items FROM $schema.processed_items`
      )
      expect(log).toEqual({ rows: items, items })
      for (const w of workers) expect(w.child.exitCode).toBeNull()
      // They said what happened.
      const logged = workers.flatMap((w) => w.events.filter((e) => e.event === "log").map((e) => String(e.message)))
      expect(logged.some((m) => /tick failed|recording results failed|renewal failed|heartbeat failed/.test(m))).toBe(
        true
      )
      // And they keep working: new items run at once.
      await db.query(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) SELECT 'noop', 'after', 1 FROM generate_series(1, 100)`
      )
      await until(
        async () =>
          (
            await db.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM $schema.processed_items WHERE payload = 'after'`
            )
          )[0]!.n === 100,
        15_000,
        "items enqueued after the kills"
      )
      for (const w of workers) expect((await w.stop()).code).toBe(0)
    } finally {
      killAll(workers)
    }
  }, 150_000)
})
