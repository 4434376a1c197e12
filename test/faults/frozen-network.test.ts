/**
 * A frozen network: a TCP proxy in front of one worker stops forwarding (without closing anything) for longer than
 * a lease. That worker aborts what it runs before its lease runs out, the other worker takes the work over after
 * the lease, the frozen one's late results are refused, and no two sequential executions overlap. A statement left
 * without an answer is closed after its timeout and cancel; a worker told to stop while frozen stops within seconds.
 * Integration: real processes, a real Postgres, wall time.
 */
import { spawn } from "node:child_process"
import net from "node:net"
import path from "node:path"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { afterEach, describe, expect, it } from "vitest"
import { Kairos } from "../../src/index.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { exited, projectRoot } from "../support/process.js"
import { killAll, migratedSchema, sleep, startWorker, type TestDb, until, type Worker } from "../support/workers.js"

// What a test opened (see `schemaBehindProxy`), closed after it.
let openDb: TestDb | undefined
let workers: Array<Worker> = []
let openProxy: FreezableProxy | undefined

afterEach(async () => {
  killAll(workers)
  workers = []
  openProxy?.close()
  openProxy = undefined
  await openDb?.close()
  openDb = undefined
})

interface FreezableProxy {
  readonly port: number
  /** Stops forwarding in both directions; the bytes wait, the sockets stay open. */
  readonly freeze: () => void
  /** Forwards what waited, and everything after. */
  readonly thaw: () => void
  readonly close: () => void
}

const freezableProxy = (host: string, port: number): Promise<FreezableProxy> =>
  new Promise((resolve) => {
    let frozen = false
    const held: Array<() => void> = []
    const sockets = new Set<net.Socket>()
    const pipe = (from: net.Socket, to: net.Socket) =>
      from.on("data", (chunk) => {
        if (frozen) held.push(() => to.write(chunk))
        else to.write(chunk)
      })
    const server = net.createServer((client) => {
      const upstream = net.connect(port, host)
      sockets.add(client).add(upstream)
      pipe(client, upstream)
      pipe(upstream, client)
      const end = () => {
        client.destroy()
        upstream.destroy()
      }
      client.on("error", end).on("close", end)
      upstream.on("error", end).on("close", end)
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        freeze: () => {
          frozen = true
        },
        thaw: () => {
          frozen = false
          for (const send of held.splice(0)) send()
        },
        close: () => {
          for (const s of sockets) s.destroy()
          server.close()
        }
      })
    )
  })

/**
 * A fresh schema and a freezable proxy in front of its server, with the schema's URL through the proxy; both are
 * closed after the test.
 */
const schemaBehindProxy = async (label: string) => {
  const db = await migratedSchema(label)
  openDb = db
  const url = new URL(db.url)
  const proxy = await freezableProxy(url.hostname, Number(url.port || 5432))
  openProxy = proxy
  const viaProxy = new URL(db.url)
  viaProxy.hostname = "127.0.0.1"
  viaProxy.port = String(proxy.port)
  return { db, proxy, viaProxy }
}

/**
 * A schema behind a freezable proxy with an `effects` table, and a `Kairos.create` instance on it through the proxy
 * (`url` adjusts its URL), whose log lines are kept; `locks` counts the locks held on `effects` (an open transaction
 * that wrote to it holds one).
 */
const transactionalBehindProxy = async (
  label: string,
  options: {
    readonly leaseDuration?: Parameters<typeof Kairos.create>[0]["leaseDuration"]
    readonly maxConnections?: number
    readonly workers?: number
    readonly url?: (url: URL) => void
  } = {}
) => {
  const { db, proxy, viaProxy } = await schemaBehindProxy(label)
  await db.query(`CREATE TABLE $schema.effects (item text NOT NULL, run int NOT NULL)`)
  options.url?.(viaProxy)
  const lines: Array<string> = []
  const kairos = await Kairos.create({
    url: viaProxy.toString(),
    schema: db.schema,
    ...(options.leaseDuration === undefined ? {} : { leaseDuration: options.leaseDuration }),
    ...(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }),
    ...(options.workers === undefined ? {} : { workers: options.workers }),
    interval: "1 second",
    gracePeriod: "1 second",
    logger: { info: (m) => void lines.push(m), error: (m) => void lines.push(m) }
  })
  const locks = async () =>
    (
      await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE relation = '"${db.schema}".effects'::regclass`
      )
    )[0]!.n
  return { db, frozen: proxy, kairos, lines, locks }
}

describe("a frozen network", () => {
  it(
    "one worker's network freezes longer than a lease: it aborts, its work is taken over and recorded once, no sequential overlap",
    { timeout: 90_000 },
    async () => {
      const { db, proxy, viaProxy } = await schemaBehindProxy("frozen")
      const config = { workers: 4, batchSize: 10, interval: "1 second", leaseDuration: "3 seconds" }
      // The frozen worker starts alone, so it (not the other one) holds a sequential item when the network freezes;
      // the other worker starts during the freeze and takes the work over.
      const frozenOne = startWorker({ ...db, url: viaProxy.toString() }, { config })
      workers = [frozenOne]
      await frozenOne.waitFor((e) => e.event === "ready")
      // Sequential items of 4 s (longer than a lease: renewed while they run) and concurrent ones of 2 s.
      await db.query(
        `INSERT INTO $schema.queue_items (task_type, payload, thread)
         SELECT 'sleepy', '4000', 0 FROM generate_series(1, 3)
         UNION ALL SELECT 'sleepy', '2000', 1 FROM generate_series(1, 8)`
      )
      const sequentialIds = new Set(
        (await db.query<{ id: string }>(`SELECT id::text AS id FROM $schema.queue_items WHERE payload = '4000'`)).map(
          (r) => r.id
        )
      )
      await frozenOne.waitFor((e) => e.event === "start" && sequentialIds.has(String(e.item)), 20_000)
      await sleep(300)
      // Freeze it mid-execution, for more than two leases.
      proxy.freeze()
      const frozenAt = Date.now()
      const other = startWorker(db, { config })
      workers = [frozenOne, other]
      await other.waitFor((e) => e.event === "ready")
      await sleep(Math.max(0, frozenAt + 8000 - Date.now()))
      proxy.thaw()

      await until(
        async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
        45_000,
        "the queue to drain"
      )
      // Every item recorded exactly once.
      const [log] = await db.query<{ rows: number; items: number }>(
        `SELECT count(*)::int AS rows, count(DISTINCT queue_item_id)::int AS items FROM $schema.processed_items`
      )
      expect(log).toEqual({ rows: 11, items: 11 })
      // The frozen worker aborted what it ran (it could not confirm its leases) and said so.
      const interrupted = frozenOne.events.filter((e) => e.event === "interrupted")
      expect(interrupted.length).toBeGreaterThan(0)
      const frozenLogs = frozenOne.events.filter((e) => e.event === "log").map((e) => String(e.message))
      expect(frozenLogs.some((m) => /not renewed in time/.test(m))).toBe(true)
      // Executions of sequential items, from both workers' start / end / interrupted events (one machine, one
      // clock): never two at once.
      const spans: Array<{ from: number; to: number }> = []
      for (const w of workers) {
        const open = new Map<string, number>()
        for (const e of w.events) {
          const item = String(e.item)
          if (!sequentialIds.has(item)) continue
          if (e.event === "start") open.set(item, Number(e.at))
          else if (e.event === "end" || e.event === "interrupted") {
            spans.push({ from: open.get(item)!, to: Number(e.at) })
            open.delete(item)
          }
        }
        // Nothing left running without an end.
        expect([...open.keys()]).toEqual([])
      }
      spans.sort((a, b) => a.from - b.from)
      for (let i = 1; i < spans.length; i++) expect(spans[i]!.from).toBeGreaterThanOrEqual(spans[i - 1]!.to)
      // Both thawed and alive; both stop cleanly.
      for (const w of workers) expect((await w.stop()).code).toBe(0)
    }
  )

  it(
    "SIGTERM while its database is frozen: the worker stops within seconds, says what it could not write, loses nothing",
    { timeout: 90_000 },
    async () => {
      const { db, proxy, viaProxy } = await schemaBehindProxy("frozenstop")
      // Everything through the proxy, the listener too; a lease of 3 s: a stop's step waits 1 s at most.
      const config = { workers: 2, interval: "1 second", leaseDuration: "3 seconds", gracePeriod: "1 second" }
      const frozenOne = startWorker({ ...db, url: viaProxy.toString() }, { config })
      workers = [frozenOne]
      await frozenOne.waitFor((e) => e.event === "ready")
      await db.query(`INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('sleepy', '3000', 1)`)
      await frozenOne.waitFor((e) => e.event === "start", 20_000)
      proxy.freeze()
      await sleep(500)
      // Its handler outlasts the grace period; the interruption, the hand-back and leaving scheduler_workers all wait
      // on statements that get no answer. Before, the stop waited on them (and on the listener's UNLISTEN) forever.
      const stoppedAt = Date.now()
      const exit = await frozenOne.stop()
      const took = Date.now() - stoppedAt
      const logs = frozenOne.events.filter((e) => e.event === "log").map((e) => String(e.message))
      expect(exit.code, logs.join("\n")).toBe(0)
      expect(took, logs.join("\n")).toBeLessThan(20_000)
      expect(
        logs.some((m) => /^stopping: .* had no answer within 1s; the stop goes on/.test(m)),
        logs.join("\n")
      ).toBe(true)
      // What it held is taken over once its lease expires, and recorded once.
      proxy.thaw()
      const other = startWorker(db, { config, sleepFactor: 0 })
      workers = [frozenOne, other]
      await until(
        async () => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.queue_items`))[0]!.n === 0,
        30_000,
        "the item to be taken over"
      )
      expect(
        await db.query(`SELECT status, count(*)::int AS n FROM $schema.processed_items GROUP BY status ORDER BY status`)
      ).toEqual([{ status: "ok", n: 1 }])
      expect((await other.stop()).code).toBe(0)
    }
  )

  it(
    "a statement whose connection stops answering is closed once it and its cancel went unanswered: ticks fail and say so, and after the thaw the work runs",
    { timeout: 90_000 },
    async () => {
      const { db, proxy, viaProxy } = await schemaBehindProxy("frozentick")
      // A statement timeout of 2 s: the client cancels at 2 s, gives the cancel 5 s and the statement 5 s more.
      viaProxy.searchParams.set("statement_timeout", "2000")
      const frozenOne = startWorker(
        { ...db, url: viaProxy.toString() },
        { config: { workers: 2, interval: "1 second", leaseDuration: "3 seconds" } }
      )
      workers = [frozenOne]
      await frozenOne.waitFor((e) => e.event === "ready")
      await sleep(1500)
      const from = frozenOne.events.length
      proxy.freeze()
      const frozenAt = Date.now()
      // Before, the tick in progress waited for an answer that never came: no line, no tick, until the thaw.
      await frozenOne.waitFor((e) => e.event === "log" && /^tick failed/.test(String(e.message)), 40_000, from)
      expect(Date.now() - frozenAt).toBeLessThan(30_000)
      proxy.thaw()
      await db.query(`INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('sleepy', '100', 1)`)
      await until(
        async () =>
          (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.processed_items`))[0]!.n === 1,
        30_000,
        "the item enqueued after the thaw to run"
      )
      expect((await frozenOne.stop()).code).toBe(0)
    }
  )

  it(
    "inside a transaction: a statement unanswered 5 s past the transaction's limit closes its connection, so does a COMMIT 5 s past the statement timeout whatever that limit, and a ROLLBACK unanswered 5 s; a statement without a limit (a migration's lock wait) is not cut short",
    { timeout: 90_000 },
    async () => {
      const { proxy: frozen, viaProxy } = await schemaBehindProxy("frozentx")
      // kairos's own client through the proxy; its transactions begin with SET LOCAL statement_timeout = 2000.
      const client = PgKairos.clientLayer({ url: viaProxy.toString(), statementTimeout: "2 seconds" })
      const timed = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
        Effect.gen(function* () {
          const started = Date.now()
          // Before, each of these waited for an answer that never came (no client timing inside a transaction).
          const exit = yield* Effect.exit(
            effect.pipe(Effect.timeoutFail({ duration: "40 seconds", onTimeout: () => "hung" as const }))
          )
          return {
            exit,
            ms: Date.now() - started,
            hung: Exit.isFailure(exit) && String(Cause.squash(exit.cause)) === "hung"
          }
        })
      const result = await Effect.runPromise(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          // A statement in a transaction of kairos's own: the server would cancel it at 2 s; no answer by 7 s
          // means none will come, and the connection is closed.
          const statement = yield* timed(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`SELECT 1`
                frozen.freeze()
                yield* sql`SELECT 2`
              })
            )
          )
          frozen.thaw()
          // A ROLLBACK: after 5 s whatever the limit (here none), since a closed connection rolls back too.
          const rollback = yield* timed(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`SET LOCAL statement_timeout = 0`
                frozen.freeze()
                return yield* Effect.fail("the handler failed" as const)
              })
            )
          )
          frozen.thaw()
          // A COMMIT: 5 s past the connection's statement timeout (2 s), whatever the transaction's own limit — a
          // transactional handler's long one (30 s here, its timeout by default 15 minutes) or none. Before, the
          // first waited 35 s and the second for good.
          const commit = (limitMs: number) =>
            timed(
              sql.withTransaction(
                Effect.gen(function* () {
                  yield* sql.unsafe(`SET LOCAL statement_timeout = ${limitMs}`)
                  yield* sql`SELECT 1`
                  frozen.freeze()
                })
              )
            )
          const commitLong = yield* commit(30_000)
          frozen.thaw()
          const commitUnlimited = yield* commit(0)
          frozen.thaw()
          // No limit (a migration waiting for its lock sets 0): a statement answered only after 9 s still succeeds.
          const unlimited = yield* timed(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`SET LOCAL statement_timeout = 0`
                frozen.freeze()
                setTimeout(() => frozen.thaw(), 9_000)
                return yield* sql<{ n: number }>`SELECT 3 AS n`
              })
            )
          )
          return { statement, rollback, commitLong, commitUnlimited, unlimited }
        }).pipe(Effect.provide(client), Effect.scoped)
      )
      const { statement, rollback, commitLong, commitUnlimited, unlimited } = result
      // Failed as a lost connection, after the 2 s limit and its 5 s, well before the 40 s.
      expect(statement.hung).toBe(false)
      expect(Exit.isFailure(statement.exit)).toBe(true)
      expect(statement.ms).toBeGreaterThanOrEqual(6_500)
      expect(statement.ms).toBeLessThan(25_000)
      // The rollback's failure (a lost connection) is a defect of @effect/sql's; it ended, after ~5 s.
      expect(rollback.hung).toBe(false)
      expect(Exit.isFailure(rollback.exit)).toBe(true)
      expect(rollback.ms).toBeGreaterThanOrEqual(4_500)
      expect(rollback.ms).toBeLessThan(25_000)
      for (const commit of [commitLong, commitUnlimited]) {
        expect(commit.hung).toBe(false)
        expect(Exit.isFailure(commit.exit)).toBe(true)
        expect(commit.ms).toBeGreaterThanOrEqual(6_500)
        expect(commit.ms).toBeLessThan(25_000)
      }
      expect(unlimited.exit).toEqual(Exit.succeed([{ n: 3 }]))
      expect(unlimited.ms).toBeGreaterThanOrEqual(8_500)
    }
  )

  it(
    "a transactional handler that returns as the network freezes: its record and COMMIT are timed by the statement timeout, not the handler's; the transaction ends within seconds, its writes rolled back; let go unrecorded, the item runs again after the thaw and commits once",
    { timeout: 90_000 },
    async () => {
      // kairos's statements: 2 s (a URL setting wins over the default minute). The handler's: ten minutes.
      const { db, frozen, kairos, lines, locks } = await transactionalBehindProxy("frozenrecord", {
        leaseDuration: "3 seconds",
        url: (url) => url.searchParams.set("statement_timeout", "2000")
      })
      try {
        let runs = 0
        let returned!: () => void
        const returning = new Promise<void>((resolve) => (returned = resolve))
        await kairos.register(
          "tx-record-frozen",
          async (job, tx) => {
            const run = ++runs
            await tx.query(`INSERT INTO "${db.schema}".effects (item, run) VALUES ($1, $2)`, [job.id, run])
            // The network freezes as the first run returns: its record and COMMIT get no answer.
            if (run === 1) {
              frozen.freeze()
              returned()
            }
          },
          { transactional: true, timeout: "10 minutes" }
        )
        await kairos.start()
        const item = await kairos.enqueue({ taskType: "tx-record-frozen", payload: "" })
        await returning
        const frozenAt = Date.now()
        // The open transaction holds its lock on the table until its connection is closed: 2 s and 5 s after the
        // first statement of kairos's went unanswered. Before, the record waited out the handler's limit (ten minutes
        // and 10 s), and with no timeout for good.
        expect(await locks()).toBe(1)
        await until(
          async () => (await locks()) === 0,
          40_000,
          "the frozen transaction to end",
          async () => lines.join("\n")
        )
        expect(Date.now() - frozenAt).toBeGreaterThanOrEqual(6_000)
        expect(Date.now() - frozenAt).toBeLessThan(30_000)
        // Its COMMIT unanswered, whether it committed is not known: the execution is let go, nothing recorded, and
        // its lease decides. It did not commit (its writes were rolled back with the connection).
        await until(
          async () => lines.some((l) => l.includes("record or COMMIT went unanswered")),
          10_000,
          "the execution to be let go",
          async () => lines.join("\n")
        )
        expect(await db.query(`SELECT item, run FROM $schema.effects`)).toEqual([])
        frozen.thaw()
        // After the thaw its lease is taken back, and the item runs again and commits: one record, one write.
        await until(
          async () =>
            (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM $schema.processed_items`))[0]!.n === 1,
          30_000,
          "the item to run again after the thaw",
          async () => lines.join("\n")
        )
        expect(
          await db.query(`SELECT status, error_msg FROM $schema.processed_items WHERE queue_item_id = $1`, [item.id])
        ).toEqual([{ status: "ok", error_msg: "" }])
        expect(await db.query(`SELECT item, run FROM $schema.effects`)).toEqual([{ item: item.id, run: 2 }])
        expect(runs).toBe(2)
        expect(lines.filter((l) => l.includes("record or COMMIT went unanswered"))).toHaveLength(1)
      } finally {
        frozen.thaw()
        await kairos.stop()
      }
    }
  )

  it(
    "a transactional item whose transaction cannot begin (the network froze while it waited for a connection) is let go unrun, nothing recorded, and runs once after the thaw",
    { timeout: 120_000 },
    async () => {
      // Three connections: one for transactional executions (kairos leaves two to everything else), so of two items
      // claimed together the second waits for the first's connection. kairos's statements: 2 s.
      const { db, frozen, kairos, lines } = await transactionalBehindProxy("unbegun", {
        maxConnections: 3,
        workers: 2,
        leaseDuration: "3 seconds",
        url: (url) => url.searchParams.set("statement_timeout", "2000")
      })
      try {
        const runs = new Map<string, number>()
        let total = 0
        await kairos.register(
          "tx-unbegun",
          async (job, tx) => {
            runs.set(job.id, (runs.get(job.id) ?? 0) + 1)
            await tx.query(`INSERT INTO "${db.schema}".effects (item, run) VALUES ($1, $2)`, [job.id, runs.get(job.id)])
            // The first execution freezes the network and fails: its ROLLBACK goes unanswered, its connection is
            // closed, and the other item, waiting for that connection, cannot begin (no BEGIN or connection answers).
            if (++total === 1) {
              frozen.freeze()
              throw new Error("the first execution gives up")
            }
          },
          { transactional: true, timeout: "10 minutes" }
        )
        const [first, second] = await kairos.enqueueMany([
          { taskType: "tx-unbegun", payload: "", thread: 1 },
          { taskType: "tx-unbegun", payload: "", thread: 1 }
        ])
        await kairos.start()
        await until(
          async () => lines.some((l) => l.includes("could not begin its transaction")),
          60_000,
          "the waiting execution to fail to begin",
          async () =>
            `runs ${JSON.stringify([...runs])}; items ${JSON.stringify(
              await db.query(`SELECT id, status, in_flight, lease_until FROM $schema.queue_items`)
            )}\n${lines.join("\n")}`
        )
        // One item ran (the one that froze the network); the other did not.
        expect([...runs.values()]).toEqual([1])
        const unrun = runs.has(first!) ? second! : first!
        frozen.thaw()
        await until(
          async () =>
            (
              await db.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM $schema.processed_items WHERE queue_item_id = $1`,
                [unrun]
              )
            )[0]!.n === 1,
          45_000,
          "the let-go item to run after the thaw",
          async () => lines.join("\n")
        )
        // It ran once, after the thaw, and committed: one success, one write. No failure was recorded for the
        // attempt that could not begin, and no run of the item was used up by it.
        expect(runs.get(unrun)).toBe(1)
        expect(
          await db.query(`SELECT status, error_msg FROM $schema.processed_items WHERE queue_item_id = $1`, [unrun])
        ).toEqual([{ status: "ok", error_msg: "" }])
        expect(await db.query(`SELECT run FROM $schema.effects WHERE item = $1`, [unrun])).toEqual([{ run: 1 }])
        expect(lines.filter((l) => l.includes("could not begin its transaction"))).toHaveLength(1)
      } finally {
        frozen.thaw()
        await kairos.stop()
      }
    }
  )

  it(
    "a transactional handler frozen mid-transaction: its transaction ends within seconds, not with the freeze; after the thaw the item commits once",
    { timeout: 90_000 },
    async () => {
      const { db, frozen, kairos, lines, locks } = await transactionalBehindProxy("frozenhandler", {
        leaseDuration: "3 seconds"
      })
      try {
        let runs = 0
        let wrote!: () => void
        const inTransaction = new Promise<void>((resolve) => (wrote = resolve))
        let release!: () => void
        const released = new Promise<void>((resolve) => (release = resolve))
        await kairos.register(
          "tx-frozen",
          async (job, tx) => {
            const run = ++runs
            await tx.query(`INSERT INTO "${db.schema}".effects (item, run) VALUES ($1, $2)`, [job.id, run])
            if (run === 1) {
              wrote()
              await released
              await tx.query("SELECT 1")
            }
          },
          { transactional: true }
        )
        await kairos.start()
        const item = await kairos.enqueue({ taskType: "tx-frozen", payload: "" })
        await inTransaction
        frozen.freeze()
        const frozenAt = Date.now()
        release()
        // The open transaction holds its lock on the table. Its lease is lost (3 s), its statement's cancel goes
        // unanswered (5 s), its ROLLBACK too (5 s): its connection is closed, which ends the transaction. Before, it
        // stayed open as long as the freeze (a handler without a timeout has no server-side limit).
        expect(await locks()).toBe(1)
        await until(
          async () => (await locks()) === 0,
          40_000,
          "the frozen transaction to end",
          async () => lines.join("\n")
        )
        expect(Date.now() - frozenAt).toBeLessThan(30_000)
        frozen.thaw()
        await until(
          async () =>
            (
              await db.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM $schema.processed_items WHERE status = 'ok'`
              )
            )[0]!.n === 1,
          30_000,
          "the item to run again and commit after the thaw",
          async () => lines.join("\n")
        )
        expect(await db.query(`SELECT item, run FROM $schema.effects`)).toEqual([{ item: item.id, run: 2 }])
      } finally {
        frozen.thaw()
        await kairos.stop()
      }
    }
  )

  it(
    "the Promise API's stop() returns while its database is frozen, and the process then ends by itself",
    { timeout: 60_000 },
    async () => {
      const { db, proxy, viaProxy } = await schemaBehindProxy("frozenpromise")
      const child = spawn(process.execPath, [path.join(projectRoot, "test/fixtures/promise-stop.mjs")], {
        env: { ...process.env, DATABASE_URL: viaProxy.toString(), KAIROS_SCHEMA: db.schema },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let out = ""
      child.stdout.on("data", (d: Buffer) => (out += d.toString()))
      child.stderr.on("data", (d: Buffer) => (out += d.toString()))
      try {
        await until(async () => out.includes("started\n"), 20_000, "the runner to start")
        await sleep(1500)
        proxy.freeze()
        await sleep(500)
        const stoppedAt = Date.now()
        child.kill("SIGHUP")
        // Before, stop() returned but the pool's frozen connections kept the process alive for good.
        const ended = await Promise.race([exited(child), sleep(30_000).then(() => undefined)])
        expect(ended, out).toEqual({ code: 0, signal: null })
        expect(out).toContain("stopped\n")
        expect(Date.now() - stoppedAt, out).toBeLessThan(30_000)
      } finally {
        child.kill("SIGKILL")
      }
    }
  )
})
