/**
 * Many processes (issue 34, part 4): 20 `kairos worker` processes, run as a user runs them (the real CLI, a plain
 * JavaScript tasks module), reach the database through one PgBouncer in transaction mode whose server pool is 10
 * connections, each with a direct URL (`--direct-url`) for its listener. They drain 100,000 queue items enqueued by
 * one INSERT: every item runs exactly once, every process takes a fair share, `kairos workers` (through the pooler)
 * lists all 20 while they run, and SIGTERM stops each one cleanly.
 *
 * The connection budget, as docs/operations.md "Sizing connections" gives it: each process holds at most
 * `--max-connections` (here 4) through the pooler plus one direct connection for its LISTEN. PgBouncer keeps its own
 * default `max_client_conn` (100): 20 × 4 = 80 clients fit under it, where 20 × the default pool of 10 might not.
 * Its server pool (`default_pool_size`) is 10, as the issue says. Nothing else in it is configured but an admin user
 * (the test reads `SHOW POOLS`: how many clients it had, how many waited for a server connection, and how long).
 *
 * Integration: real processes, a real PgBouncer, wall time (no speed is asserted; the figures are printed). On 2
 * cores a worker takes ~1.5 s of CPU to start, ~2 s with 19 others starting beside it (almost all of it loading
 * modules): 20 s or more of wall time before the drain begins. The file took 2 to 4.5 minutes on a 2-core machine
 * loaded by other test runs (start 46–80 s, drain 44–181 s). At nice 10 (below) the fleet yields the cores to the
 * other files: in a whole run beside three spinning processes it took 6 minutes (start 187 s, drain 156 s), so its
 * bounds are wide. Skipped, saying so, where pgbouncer is not installed; failing instead with
 * KAIROS_REQUIRE_PGBOUNCER=1 (CI).
 */
import os from "node:os"
import { afterAll, beforeAll, expect, it } from "vitest"
import { channel } from "../../src/adapters/postgres/PgSchema.js"
import { kairos, live } from "../support/cli.js"
import { databaseUrl } from "../support/database.js"
import { type PgBouncer, startPgBouncer } from "../support/pgbouncer.js"
import { pgbouncerTests } from "../support/pgbouncerTests.js"
import { migratedSchema, sleep, type TestDb, until } from "../support/workers.js"

const PROCESSES = 20
const ITEMS = 100_000
/** PgBouncer's server pool: the most connections it opens to Postgres for the workers' database and user. */
const SERVER_POOL = 10
/** Each worker's pool (`--max-connections`): its clients on PgBouncer. */
const POOL = 4
/** PgBouncer's own default, left as it is. */
const MAX_CLIENT_CONN = 100
/**
 * No process starved: each executes at least a quarter of the even share (5,000). Measured on 2 cores shared with
 * other work, in four runs: 3,704 to 6,614 per process. A process that got nothing, or one that claimed only after
 * the others had drained most of the queue, fails it.
 */
const LEAST_SHARE = ITEMS / PROCESSES / 4

type Live = ReturnType<typeof live>

pgbouncerTests(`${PROCESSES} kairos worker processes through one PgBouncer (server pool ${SERVER_POOL})`, () => {
  let bouncer: PgBouncer | undefined
  let db: TestDb | undefined
  let workers: Array<Live> = []
  beforeAll(async () => {
    bouncer = await startPgBouncer(databaseUrl(), { poolSize: SERVER_POOL, maxClientConn: MAX_CLIENT_CONN })
    // Migrated beforehand, as `kairos migrate` would: each worker then only checks the schema's version at start.
    db = await migratedSchema("many")
  }, 60_000)
  afterAll(async () => {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL")
    await db?.close()
    await bouncer?.stop()
  })

  it(
    `drain ${ITEMS.toLocaleString("en")} items exactly once, each process executing at least ${LEAST_SHARE}; \`kairos workers\` lists all ${PROCESSES}; SIGTERM stops each cleanly`,
    { timeout: 900_000 },
    async () => {
      const pooled = bouncer!.url
      const schema = db!.schema
      const clients = { peak: 0, maxWaiting: 0, maxWaitMs: 0 }
      let sampling = true
      // PgBouncer's view, four times a second: its clients (connected: active or waiting for a server connection) and how
      // long the longest waiter has waited.
      const sampler = (async () => {
        while (sampling) {
          const pool = (await bouncer!.show("POOLS")).find((p) => p["database"] !== "pgbouncer")
          if (pool !== undefined) {
            const waiting = Number(pool["cl_waiting"])
            clients.peak = Math.max(clients.peak, Number(pool["cl_active"]) + waiting)
            clients.maxWaiting = Math.max(clients.maxWaiting, waiting)
            clients.maxWaitMs = Math.max(
              clients.maxWaitMs,
              Number(pool["maxwait"]) * 1000 + Math.round(Number(pool["maxwait_us"]) / 1000)
            )
          }
          await sleep(250)
        }
      })()

      const t0 = Date.now()
      workers = Array.from({ length: PROCESSES }, () =>
        live([
          "worker",
          "--database-url",
          pooled,
          "--direct-url",
          databaseUrl(),
          "--schema",
          schema,
          "--tasks",
          "test/fixtures/many-tasks.js",
          "--max-connections",
          String(POOL),
          "--json",
          "--quiet"
        ])
      )
      // The fleet runs at a lower CPU priority (nice 10): what it proves is twenty processes sharing one database through
      // one pooler, not their share of the machine. At the other files' priority, twenty busy workers starved them: on
      // CI's 2-core machine, beside this drain, a `kairos worker` failing at start took 49-58 s (about 1 s alone), a
      // CLI test timed out at 60 s and two browser tests at 30 s.
      for (const w of workers) os.setPriority(w.child.pid!, 10)
      await Promise.all(workers.map((w) => w.waitFor(/"event":"started"/, "out", 480_000)))
      const startedMs = Date.now() - t0
      const owners = workers.map((w) => String(w.events().find((e) => e["event"] === "started")!["owner"]))
      expect(new Set(owners).size).toBe(PROCESSES)

      // Every process is listed, through the pooler as a user would ask.
      const listed = await kairos(["workers", "--database-url", pooled, "--schema", schema, "--json"])
      expect(listed.stderr).toBe("")
      const rows = JSON.parse(listed.stdout) as Array<{ id: string; task_types: Array<string> }>
      expect(rows.map((r) => r.id).sort()).toEqual([...owners].sort())
      expect(rows.map((r) => r.task_types)).toEqual(owners.map(() => ["noop"]))
      // Each holds one direct connection: its LISTEN.
      const listeners = await db!.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`,
        [`kairos-listener:${channel(schema)}`.slice(0, 63)]
      )
      expect(listeners[0]!.n).toBe(PROCESSES)

      const t1 = Date.now()
      await db!.query(
        `INSERT INTO $schema.queue_items (task_type, payload, thread)
         SELECT 'noop', i::text, 1 FROM generate_series(1, ${ITEMS}) i`
      )
      const enqueuedMs = Date.now() - t1
      const t2 = Date.now()
      const left = async () =>
        (await db!.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n
      // Mid-drain, with the pooler busy: the table `kairos workers` prints still has all of them.
      await until(async () => (await left()) < ITEMS * 0.8, 300_000, "a fifth of the items to drain")
      const busy = await kairos(["workers", "--database-url", pooled, "--schema", schema])
      expect(busy.stderr).toBe("")
      for (const owner of owners) expect(busy.stdout).toContain(owner)
      const busyRows = busy.stdout.split("\n").filter((l) => owners.some((o) => l.startsWith(o)))
      expect(busyRows).toHaveLength(PROCESSES)
      await until(async () => (await left()) === 0, 300_000, "the queue to drain")
      const drainMs = Date.now() - t2

      const t3 = Date.now()
      for (const w of workers) w.child.kill("SIGTERM")
      const exits = await Promise.all(
        workers.map(
          (w) =>
            new Promise<number | null>((resolve) => {
              if (w.child.exitCode !== null || w.child.signalCode !== null) resolve(w.child.exitCode)
              else w.child.once("exit", (code) => resolve(code))
            })
        )
      )
      const stopMs = Date.now() - t3
      sampling = false
      await sampler
      const executed = workers.map((w) => Number(w.events().find((e) => e["event"] === "stopped")?.["ok"]))
      console.log(
        `${PROCESSES} workers through PgBouncer: ${JSON.stringify({
          startedMs,
          enqueuedMs,
          drainMs,
          itemsPerSecond: Math.round((ITEMS * 1000) / drainMs),
          stopMs,
          executed,
          pooledClients: clients
        })}\n$ kairos workers (mid-drain, through PgBouncer)\n${busy.stdout.split("\n").slice(0, 4).join("\n")}\n...`
      )
      expect(exits).toEqual(workers.map(() => 0))
      // Nothing went wrong on the way: no warning or error from any worker (--quiet prints only those), nothing on
      // stderr, no client refused by PgBouncer. But one: a renewal that waited its turn for one of PgBouncer's server
      // connections past half a renewal period is retried at the next round, and says so (CI's loaded second pass on
      // a slow machine saw one); harmless while no lease was lost, which would say so in a line of its own.
      const retried = /^lease renewal failed; retrying next round: no answer within half a renewal period$/
      expect(
        workers.flatMap((w) => w.events().filter((e) => e["event"] === "log" && !retried.test(String(e["message"]))))
      ).toEqual([])
      expect(workers.map((w) => w.err())).toEqual(workers.map(() => ""))
      expect(bouncer!.log()).not.toContain("no more connections allowed")
      // The budget held: at most POOL clients each on PgBouncer, beside the test's own `kairos workers` (a pool of 3,
      // one command at a time; a CI run saw 81 while it listed the workers).
      expect(clients.peak).toBeLessThanOrEqual(PROCESSES * POOL + 3)

      // Exactly once: one success per item, none twice, nothing left.
      const log = await db!.query<{ runs: number; items: number; ok: number }>(
        `SELECT count(*)::int AS runs, count(DISTINCT queue_item_id)::int AS items,
                count(*) FILTER (WHERE status = 'ok')::int AS ok
         FROM $schema.processed_items`
      )
      expect(log[0]).toEqual({ runs: ITEMS, items: ITEMS, ok: ITEMS })
      expect(await left()).toBe(0)
      // What each process says it executed adds up to the log, and none was starved.
      expect(executed.reduce((a, b) => a + b, 0)).toBe(ITEMS)
      expect(Math.min(...executed)).toBeGreaterThanOrEqual(LEAST_SHARE)
      // And they left the registry as they stopped.
      expect(
        JSON.parse((await kairos(["workers", "--database-url", pooled, "--schema", schema, "--json"])).stdout)
      ).toEqual([])
    }
  )
})
