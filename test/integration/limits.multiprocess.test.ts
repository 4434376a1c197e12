/**
 * Flow control across processes: three `kairos worker` processes (the built CLI) share one database; a sampler
 * reads the live leases from the database while they drain, and shows that each limit is never exceeded (a type's
 * concurrency, each group's), that ordered groups run in order, and that the shared rate holds. Then the faults: a
 * holder frozen (SIGSTOP) past its lease frees its slot, and only then. Integration: real processes, a real
 * Postgres, wall time.
 */
import { afterEach, describe, expect, it } from "vitest"
import { kairos, live } from "../support/cli.js"
import {
  killAll,
  migratedSchema,
  sleep,
  START_LAG_MS,
  startWorker,
  type TestDb,
  until,
  type Worker
} from "../support/workers.js"

let db: TestDb | undefined
let clis: Array<ReturnType<typeof live>> = []
let workers: Array<Worker> = []

afterEach(async () => {
  for (const w of clis) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL")
  clis = []
  killAll(workers)
  workers = []
  await db?.close()
  db = undefined
})

/**
 * How far two processes' clocks may disagree: each follows the database's clock within a round trip (PgClock), which
 * on a loaded 2-core machine can take most of a second. Only the fault test, where a slot frees by a lease's expiry,
 * depends on it.
 */
const SKEW_MS = 1000

/** Live leases now (with `marginMs`: those with more than that left), per task type and group (what limits count). */
const liveLeases = (db: TestDb, marginMs = 0) =>
  db.query<{ task_type: string; group_key: string | null; n: number }>(
    `SELECT x.task_type, x.group_key, count(*)::int AS n FROM (
       SELECT i.task_type, i.group_key FROM $schema.queue_items i WHERE i.lease_token IS NOT NULL AND i.lease_until >= now() + $1 * interval '1 millisecond'
       UNION ALL
       SELECT i.task_type, i.group_key FROM $schema.queue_leases q JOIN $schema.queue_items i ON i.id = q.item_id
       WHERE q.lease_until >= now() + $1 * interval '1 millisecond'
     ) x GROUP BY 1, 2`,
    [marginMs]
  )

const limitsCli = (db: TestDb, args: ReadonlyArray<string>) =>
  kairos(["limits", ...args, "--database-url", db.url, "--schema", db.schema])

describe("flow control across processes", () => {
  it(
    "three CLI workers: a type's limit and each group's are never exceeded, ordered groups run in order, the rate holds",
    { timeout: 180_000 },
    async () => {
      db = await migratedSchema("limits3")
      for (const args of [
        ["set", "capped", "--concurrency", "3"],
        ["set", "ordered", "--concurrency", "1", "--per-group"],
        ["set", "grouped", "--concurrency", "2", "--per-group"],
        ["set", "rated", "--rate", "5", "--per", "1s"],
        ["set", "grouprated", "--rate", "2", "--per", "1s", "--rate-per-group"],
        // Each group in order, 4 starts a second for the whole type (the meaning of --per-group with a rate, kept).
        ["set", "orderedrated", "--concurrency", "1", "--per-group", "--rate", "4", "--per", "1s"]
      ]) {
        const r = await limitsCli(db, args)
        expect(r.stderr).toBe("")
        expect(r.code).toBe(0)
      }
      const listed = JSON.parse((await limitsCli(db, ["--json"])).stdout) as Array<Record<string, unknown>>
      expect(
        listed.map((l) => [l["task_type"], l["concurrency"], l["per_group"], l["rate"], l["rate_per_group"]])
      ).toEqual([
        ["capped", 3, false, null, false],
        ["grouped", 2, true, null, false],
        ["grouprated", null, false, 2, true],
        ["ordered", 1, true, null, false],
        ["orderedrated", 1, true, 4, false],
        ["rated", null, false, 5, false]
      ])
      clis = Array.from({ length: 3 }, () =>
        live([
          "worker",
          "--tasks",
          "test/fixtures/limit-tasks.mjs",
          "--database-url",
          db!.url,
          "--schema",
          db!.schema,
          "--concurrency",
          "8",
          "--interval",
          "1s",
          "--json",
          "--quiet"
        ])
      )
      await until(
        async () => (await db!.query(`SELECT 1 FROM $schema.scheduler_workers`)).length === 3,
        60_000,
        "three live workers"
      )
      // Inserted by plain SQL, in one statement: what the groups' order is judged against is their ids.
      const inserted = await db.query<{ id: string; task_type: string; group_key: string | null }>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread, group_key)
         SELECT 'capped', '40', 1, NULL FROM generate_series(1, 60)
         UNION ALL SELECT 'ordered', '15', 1, 'o' || (i % 6) FROM generate_series(1, 48) i
         UNION ALL SELECT 'grouped', '30', 1, 'g' || (i % 4) FROM generate_series(1, 40) i
         UNION ALL SELECT 'rated', '0', 1, NULL FROM generate_series(1, 20)
         UNION ALL SELECT 'grouprated', '0', 1, 'r' || (i % 3) FROM generate_series(1, 18) i
         UNION ALL SELECT 'orderedrated', '0', 1, 'q' || (i % 4) FROM generate_series(1, 12) i
         RETURNING id::text AS id, task_type, group_key`
      )
      expect(inserted).toHaveLength(198)
      const max = new Map<string, number>()
      let samples = 0
      for (;;) {
        const rows = await liveLeases(db)
        samples++
        const perType = new Map<string, number>()
        for (const r of rows) {
          perType.set(r.task_type, (perType.get(r.task_type) ?? 0) + r.n)
          if (r.group_key !== null) {
            const key = `${r.task_type}/group`
            max.set(key, Math.max(max.get(key) ?? 0, r.n))
          }
        }
        for (const [t, n] of perType) max.set(t, Math.max(max.get(t) ?? 0, n))
        // The rates as the database counts them, in the window its clock is in: a type's starts, each group's.
        for (const r of await db.query<{ key: string; n: number }>(
          `SELECT task_type || '/window' AS key, window_starts AS n FROM $schema.kairos_limit_state
           WHERE window_start IS NOT NULL
           UNION ALL SELECT task_type || '/group window', max(starts) FROM $schema.kairos_limit_group_windows
           GROUP BY task_type`
        ))
          max.set(r.key, Math.max(max.get(r.key) ?? 0, r.n))
        const [left] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`)
        if (left!.n === 0) break
        if (samples > 20_000) throw new Error("the queue did not drain")
        await sleep(10)
      }
      expect(samples).toBeGreaterThan(20)
      // Each bound held at every sample, and was reached (the sampler saw the work run).
      expect(max.get("capped")).toBe(3)
      expect(max.get("ordered/group")).toBe(1)
      expect(max.get("orderedrated/group") ?? 0).toBeLessThanOrEqual(1)
      expect(max.get("grouped/group")).toBe(2)
      expect(max.get("ordered")).toBeGreaterThan(1)
      // No window, by the database's clock, held more starts than its rate; each rate was reached.
      expect(max.get("rated/window")).toBe(5)
      expect(max.get("orderedrated/window")).toBe(4)
      expect(max.get("grouprated/group window")).toBe(2)

      const log = await db.query<{ id: string; item: string; started: Date; finished: Date }>(
        `SELECT id::text AS id, queue_item_id::text AS item, started_at AS started, finished_at AS finished
         FROM $schema.processed_items ORDER BY id`
      )
      expect(log).toHaveLength(198)
      expect(log.every((l) => l.item !== null)).toBe(true)
      const byItem = new Map(log.map((l) => [l.item, l]))
      // Ordered groups: in enqueue (id) order, each execution starting after the previous one finished.
      const groups = new Map<string, Array<string>>()
      for (const i of inserted)
        if (i.task_type === "ordered" || i.task_type === "orderedrated")
          groups.set(`${i.task_type}/${i.group_key!}`, [...(groups.get(`${i.task_type}/${i.group_key!}`) ?? []), i.id])
      expect(groups.size).toBe(10)
      for (const [, ids] of groups) {
        const runs = ids.map((id) => byItem.get(id)!)
        for (let k = 1; k < runs.length; k++) {
          expect(runs[k]!.started.getTime()).toBeGreaterThanOrEqual(runs[k - 1]!.finished.getTime())
          expect(Number(runs[k]!.id)).toBeGreaterThan(Number(runs[k - 1]!.id))
        }
      }
      // The same seen from the starts the workers recorded, each span less the lag of a start behind its claim (the
      // claims' own bounds are checked above).
      // The shared rate: 20 starts at 5 per second span at least four windows (two full seconds between the first and the last), whichever process claimed.
      const rated = inserted.filter((i) => i.task_type === "rated").map((i) => byItem.get(i.id)!.started.getTime())
      expect(Math.max(...rated) - Math.min(...rated)).toBeGreaterThanOrEqual(2000 - START_LAG_MS)
      // The shared rate per group: each group's 6 starts at 2 per second span at least three windows (more than one
      // full second between its first and its last), whichever process claimed.
      for (const g of ["r0", "r1", "r2"]) {
        const starts = inserted
          .filter((i) => i.task_type === "grouprated" && i.group_key === g)
          .map((i) => byItem.get(i.id)!.started.getTime())
        expect(starts).toHaveLength(6)
        expect(Math.max(...starts) - Math.min(...starts)).toBeGreaterThanOrEqual(1000 - START_LAG_MS)
      }
      // The rate of a type ordered per group is the type's: 12 starts at 4 per second span at least three windows (more
      // than one full second), though each group's 3 would fit in one.
      const orderedRated = inserted
        .filter((i) => i.task_type === "orderedrated")
        .map((i) => byItem.get(i.id)!.started.getTime())
      expect(Math.max(...orderedRated) - Math.min(...orderedRated)).toBeGreaterThanOrEqual(1000 - START_LAG_MS)
      // And the groups side by side: one rate of 2 per second for the whole type would need nine windows (more than 8 s).
      const groupRated = inserted
        .filter((i) => i.task_type === "grouprated")
        .map((i) => byItem.get(i.id)!.started.getTime())
      expect(Math.max(...groupRated) - Math.min(...groupRated)).toBeLessThan(8000)
      // And every worker took part.
      const owners = await db.query<{ n: number }>(`SELECT count(DISTINCT id)::int AS n FROM $schema.scheduler_workers`)
      expect(owners[0]!.n).toBe(3)
      for (const w of clis) w.child.kill("SIGTERM")
      await Promise.all(clis.map((w) => until(async () => w.child.exitCode !== null, 30_000, "the workers to stop")))
    }
  )

  it(
    "a holder frozen (SIGSTOP) past its lease frees its slot only then; its late result is refused",
    { timeout: 90_000 },
    async () => {
      db = await migratedSchema("limitsfrozen")
      await db.query(`INSERT INTO $schema.queue_limits (task_type, concurrency) VALUES ('sleepy', 1)`)
      const config = { interval: "300 millis", leaseDuration: "2 seconds" }
      const frozen = startWorker(db, { config })
      workers = [frozen]
      await frozen.waitFor((e) => e.event === "ready")
      const [first] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('sleepy', '4000', 1) RETURNING id::text AS id`
      )
      const start = await frozen.waitFor((e) => e.event === "start" && e.item === first!.id)
      frozen.child.kill("SIGSTOP")
      // Where its lease ends (read once a renewal already on its way has landed): no renewal comes after that.
      await sleep(300)
      const [lease] = await db.query<{ until: Date }>(
        `SELECT lease_until AS until FROM $schema.queue_items WHERE id = $1`,
        [first!.id]
      )
      const leaseEnd = lease!.until.getTime()
      const others = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) SELECT 'sleepy', '0', 1 FROM generate_series(1, 3)
         RETURNING id::text AS id`
      )
      const successor = startWorker(db, { config })
      workers.push(successor)
      await successor.waitFor((e) => e.event === "ready")
      // While the frozen holder's lease lives, the one slot is its: the successor starts nothing.
      let maxLive = 0
      const sampleUntil = async (done: () => Promise<boolean>, ms: number, what: string) =>
        until(
          async () => {
            const rows = await liveLeases(db!, SKEW_MS)
            maxLive = Math.max(
              maxLive,
              rows.reduce((n, r) => n + r.n, 0)
            )
            return done()
          },
          ms,
          what
        )
      await sampleUntil(
        async () => (await db!.query(`SELECT 1 FROM $schema.queue_items`)).length === 0,
        60_000,
        "the successor to run everything"
      )
      const starts = successor.events.filter((e) => e.event === "start")
      expect(starts.map((e) => e["item"]).sort()).toEqual([first!.id, ...others.map((o) => o.id)].sort())
      // Its first start came only once the frozen holder's lease had expired, as far as the processes' clocks agree
      // (each follows the database's within a round trip: up to a second on a loaded machine, SKEW_MS).
      expect(Number(starts[0]!["at"])).toBeGreaterThanOrEqual(leaseEnd - SKEW_MS)
      expect(Number(starts[0]!["at"])).toBeGreaterThan(Number(start["at"]))
      expect(maxLive).toBeLessThanOrEqual(1)
      frozen.child.kill("SIGCONT")
      await frozen.waitFor(
        (e) => e.event === "log" && /lease.*lost|not renewed in time|refused/.test(String(e.message)),
        15_000
      )
      await sleep(500)
      const [n] = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM $schema.processed_items WHERE queue_item_id = $1`,
        [first!.id]
      )
      expect(n!.n).toBe(1)
      await Promise.all(workers.map((w) => w.stop()))
    }
  )

  it(
    "a holder killed (SIGKILL) holds its slot until its lease expires; then everything runs, its item again once",
    { timeout: 90_000 },
    async () => {
      db = await migratedSchema("limitskilled")
      await db.query(`INSERT INTO $schema.queue_limits (task_type, concurrency) VALUES ('sleepy', 1)`)
      const config = { interval: "300 millis", leaseDuration: "2 seconds" }
      const victim = startWorker(db, { config })
      workers = [victim]
      await victim.waitFor((e) => e.event === "ready")
      const [first] = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('sleepy', '60000', 1) RETURNING id::text AS id`
      )
      await victim.waitFor((e) => e.event === "start" && e.item === first!.id)
      victim.child.kill("SIGKILL")
      await sleep(300)
      const [lease] = await db.query<{ until: Date }>(
        `SELECT lease_until AS until FROM $schema.queue_items WHERE id = $1`,
        [first!.id]
      )
      const others = await db.query<{ id: string }>(
        `INSERT INTO $schema.queue_items (task_type, payload, thread) SELECT 'sleepy', '0', 1 FROM generate_series(1, 3)
         RETURNING id::text AS id`
      )
      // The survivor finishes at once what the victim would have slept on for a minute.
      const survivor = startWorker(db, { config, sleepFactor: 0 })
      workers.push(survivor)
      let maxLive = 0
      await until(
        async () => {
          const rows = await liveLeases(db!, SKEW_MS)
          maxLive = Math.max(
            maxLive,
            rows.reduce((n, r) => n + r.n, 0)
          )
          return (await db!.query(`SELECT 1 FROM $schema.queue_items`)).length === 0
        },
        60_000,
        "the survivor to run everything"
      )
      const starts = survivor.events.filter((e) => e.event === "start")
      expect(starts.map((e) => e["item"]).sort()).toEqual([first!.id, ...others.map((o) => o.id)].sort())
      expect(Number(starts[0]!["at"])).toBeGreaterThanOrEqual(lease!.until.getTime() - SKEW_MS)
      expect(maxLive).toBeLessThanOrEqual(1)
      // The killed execution never counts: one row for its item, the survivor's.
      const [n] = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM $schema.processed_items WHERE queue_item_id = $1`,
        [first!.id]
      )
      expect(n!.n).toBe(1)
      await survivor.stop()
    }
  )
})
