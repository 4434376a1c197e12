/**
 * The fault suite's invariant checker catches what it claims to: tables written by hand, each breaking one rule.
 * Integration: a real Postgres (no workers).
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { migratedSchema, type TestDb } from "../support/workers.js"
import { checkInvariants, type Enqueued } from "./invariants.js"

// A schema per test: each writes its own story into empty tables.
let db: TestDb
beforeEach(async () => {
  db = await migratedSchema("invariants")
})
afterEach(async () => {
  await db.close()
})

const enqueue = async (taskType: string, maxRuns: number, thread: number) =>
  (
    await db.query<Enqueued>(
      `INSERT INTO $schema.queue_items (task_type, max_runs, thread) VALUES ($1, $2, $3)
       RETURNING id::text AS id, max_runs, thread`,
      [taskType, maxRuns, thread]
    )
  )[0]!

/** A recorded execution, `from`..`to` seconds after a fixed instant. */
const processed = (item: Enqueued, taskType: string, from: number, to: number) =>
  db.query(
    `INSERT INTO $schema.processed_items (queue_item_id, task_type, status, started_at, finished_at, duration_ms)
     VALUES ($1, $2, 'ok', timestamptz '2026-01-01Z' + make_interval(secs => $3),
             timestamptz '2026-01-01Z' + make_interval(secs => $4), 0)`,
    [item.id, taskType, from, to]
  )

const violationsOf = async (enqueued: ReadonlyArray<Enqueued>, drained = false) =>
  (await checkInvariants(db, { enqueued, drained })).violations

describe("the invariant checker", () => {
  it("passes consistent tables and names each kind of violation", { timeout: 60_000 }, async () => {
    // A run-once item done, a three-times item with one of three runs recorded, both consistent.
    const once = await enqueue("a", 1, 0)
    const thrice = await enqueue("b", 3, 1)
    await processed(once, "a", 0, 1)
    await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [once.id])
    await processed(thrice, "b", 0, 1)
    await db.query(`UPDATE $schema.queue_items SET max_runs = 2, runs_done = 1 WHERE id = $1`, [thrice.id])
    expect(await violationsOf([once, thrice])).toEqual([])
    // Still queued after the drain.
    expect(await violationsOf([once, thrice], true)).toEqual([
      expect.stringMatching(new RegExp(`^items lost or not finished after the drain \\(1\\).*"id":"${thrice.id}"`))
    ])

    // An item gone without its run, one run too often, a row for an item never enqueued.
    const gone = await enqueue("c", 1, 1)
    await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [gone.id])
    await processed(once, "a", 5, 6)
    const stranger = await enqueue("d", 1, 1)
    await processed(stranger, "d", 0, 1)
    expect(await violationsOf([once, thrice, gone])).toEqual([
      expect.stringMatching(/^items run more than their max_runs times \(1\)/),
      expect.stringMatching(/^items lost \(gone or miscounted\) \(1\)/),
      expect.stringMatching(/^executions recorded for items the test never enqueued \(1\)/)
    ])
  })

  it("sequential executions that overlap, but not back-to-back ones or concurrent items", async () => {
    const [x, y, z, w] = [await enqueue("s", 1, 0), await enqueue("s", 1, 0), await enqueue("s", 1, 0)].concat(
      await enqueue("s", 1, 1)
    )
    for (const item of [x!, y!, z!, w!]) await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [item.id])
    await processed(x!, "s", 10, 11)
    await processed(y!, "s", 11, 12) // back to back: fine
    await processed(w!, "s", 10, 12) // concurrent: fine
    await processed(z!, "s", 11.5, 13) // overlaps y
    const found = await checkInvariants(db, { enqueued: [x!, y!, z!, w!] })
    expect(found.violations).toEqual([
      expect.stringMatching(/^sequential \(thread 0\) executions that overlapped \(1\)/)
    ])
  })

  it("a slot fired twice, overlapping runs, a lost slot, an expired lease", async () => {
    const job = async (name: string, overlap: string) =>
      (
        await db.query<{ id: string }>(
          `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule, overlap)
           VALUES ($1, 'noop', '{"_tag":"Interval","everyMillis":1000}', $2) RETURNING id::text AS id`,
          [name, overlap]
        )
      )[0]!.id
    const run = (jobId: string, slot: number, attempt: number, status: string, from: number, to: number, error = "") =>
      db.query(
        `INSERT INTO $schema.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
         VALUES ($1, timestamptz '2026-01-01Z' + make_interval(secs => $2), $3, $4,
                 timestamptz '2026-01-01Z' + make_interval(secs => $5),
                 timestamptz '2026-01-01Z' + make_interval(secs => $6), nullif($7, ''))`,
        [jobId, slot, attempt, status, from, to, error]
      )
    const clean = await job("clean", "skip")
    // A run taken back from a dead owner: its lease expired at 2 s, the rescue came at 4 s, the next slot began at 3 s.
    await run(
      clean,
      0,
      1,
      "failed",
      0,
      4,
      "owner lost: w stopped renewing its lease (expired 2026-01-01T00:00:02.000Z)"
    )
    await run(clean, 0, 2, "success", 4, 5)
    await run(clean, 3, 1, "success", 3, 3.5)
    // A run its live owner no longer ran, its lease expired at 6.5 s, let go at 8 s; the next slot ran from 7 s (the
    // transactional storm, on a slow machine).
    await run(
      clean,
      6,
      1,
      "failed",
      6,
      8,
      "owner w no longer runs it (a failover lost its result or its claim's answer, or it gave the run up); " +
        "its lease expired 2026-01-01T00:00:06.500Z"
    )
    await run(clean, 7, 1, "success", 7, 7.5)
    // Two workers' clocks 3 ms apart: a no-op run of slot 9 (claimed and done at 10.003 by one) and the run of slot 10
    // (started at 10.000 by the other) that came after it.
    await run(clean, 10, 1, "success", 10, 12)
    await run(clean, 9, 1, "success", 10.003, 10.003)
    expect((await checkInvariants(db, { enqueued: [] })).violations).toEqual([])
    // But a no-op run deep inside another's span, or one that starts with it and runs on, overlapped it.
    for (const [name, first, second] of [
      ["inside", [20, 22], [21, 21]],
      ["together", [30, 32], [30.003, 31]]
    ] as const) {
      const id = await job(name, "skip")
      await run(id, 0, 1, "success", first[0], first[1])
      await run(id, 1, 1, "success", second[0], second[1])
      expect((await checkInvariants(db, { enqueued: [] })).violations).toEqual([
        expect.stringMatching(/^job runs that overlapped another run of their slot or job \(1\)/)
      ])
      // With the workers' events, the report shows when each run's handler ran, by the machine's clock.
      const ids = await db.query<{ id: string }>(
        `SELECT id::text AS id FROM $schema.job_runs WHERE job_id = $1 ORDER BY scheduled_for`,
        [id]
      )
      const events = ids.flatMap((r, k) => [
        { event: "run-start", runId: Number(r.id), at: 1000 + k, pid: 7 },
        { event: "start", item: r.id, at: 5, pid: 7 }
      ])
      expect((await checkInvariants(db, { enqueued: [], handlerEvents: () => events })).violations).toEqual([
        expect.stringMatching(
          /"handlers":\[\{"event":"run-start","at":1001,"pid":7\}\],"overlappedHandlers":\[\{"event":"run-start","at":1000,"pid":7\}\]/
        )
      ])
      await db.query(`DELETE FROM $schema.job_runs WHERE job_id = $1`, [id])
    }

    const twice = await job("twice", "allow")
    await run(twice, 0, 1, "success", 0, 1)
    await run(twice, 0, 2, "success", 0.5, 2) // also overlaps attempt 1
    await run(twice, 1, 1, "success", 1, 2) // another slot of an overlap-allowed job: fine
    const lonely = await job("lonely", "skip")
    await run(
      lonely,
      0,
      1,
      "failed",
      0,
      4,
      "owner lost: w stopped renewing its lease (expired 2026-01-01T00:00:02.000Z)"
    )
    const item = await enqueue("e", 1, 1)
    await db.query(
      `INSERT INTO $schema.queue_leases (item_id, token, owner, started_at, lease_until)
       VALUES ($1, 't', 'w', now() - interval '1 minute', now() - interval '30 seconds')`,
      [item.id]
    )
    await db.query(`UPDATE $schema.queue_items SET status = 'processing', in_flight = 1 WHERE id = $1`, [item.id])
    const expired = await enqueue("f", 1, 1)
    await db.query(`UPDATE $schema.queue_items SET status = 'processing', in_flight = 1 WHERE id = $1`, [expired.id])
    expect((await checkInvariants(db, { enqueued: [item, expired], leaseSlackMs: 5000 })).violations).toEqual([
      expect.stringMatching(/^slots that succeeded more than once \(1\)/),
      expect.stringMatching(/^job runs that overlapped another run of their slot or job \(1\)/),
      expect.stringMatching(/^slots lost: cut short by a lost owner and never retried \(1\)/),
      expect.stringMatching(/^executions left running past their lease \(1\)/),
      expect.stringMatching(/^queue items whose status or in_flight disagree with their leases \(1\).*"leases":0/)
    ])
  })
})
