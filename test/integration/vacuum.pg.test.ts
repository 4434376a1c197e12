/**
 * The queue's vacuum on Postgres (migration 0019's table settings, PgVacuum, the runner's round): past the dead-row
 * threshold the queue table is vacuumed and the claim's index walk is short again; one instance at a time, through
 * the lease row; a role that does not own the tables is refused without trying, and its runner drains on and says
 * so once; the owner's runner vacuums while it drains.
 * Integration: a real Postgres, its statistics (which reach other sessions within a second) and wall time. In a
 * database of the file's own: a vacuum removes only rows no open transaction may still see, and other test files'
 * transactions in the run's database would keep them (Postgres's horizon for a table counts only its own database's
 * sessions).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Logger, LogLevel, ManagedRuntime } from "effect"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { grant } from "../../src/adapters/postgres/PgGrants.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { QueueStore, Runner, type VacuumOutcome, type VacuumRequest } from "../../src/index.js"
import { onServer, type TestDatabase, testDatabase, uniqueSchemaName } from "../support/database.js"
import { startProxy } from "../support/proxy.js"

const suffix = randomBytes(4).toString("hex")
const app = `kt_vacuum_app_${suffix}`
const schema = uniqueSchemaName("vacuum")
const q = `"${schema}"`

/** This file's database (created before the tests). */
let db: TestDatabase
/** The test run's server, in this file's database, as `role`. */
const as = (role?: string): string => db.url(role)

let admin: pg.Client
const query = async <T = Record<string, unknown>>(text: string, params: ReadonlyArray<unknown> = []) =>
  (await admin.query(text, [...params])).rows as Array<T>

/** Postgres's counts for a queue table, as another session sees them: its dead rows, and the VACUUMs run on it by a
 * session (kairos's are; autovacuum's, off on these tables here, would not be). */
const stats = async (table = "queue_items") =>
  (
    await query<{ dead: number; vacuums: number }>(
      `SELECT pg_stat_get_dead_tuples(c.oid)::int AS dead,
         pg_stat_get_vacuum_count(c.oid)::int AS vacuums
       FROM pg_class c WHERE c.oid = $1::regclass`,
      [`${schema}.${table}`]
    )
  )[0]!

/** `n` dead rows at the head of the claim's index: `n` items queued first, then deleted; `live` more after them. */
const deadAtHead = async (n: number, live = 0) => {
  await query(`INSERT INTO ${q}.queue_items (task_type, thread) SELECT 'work', 1 FROM generate_series(1, $1::int)`, [n])
  await query(`INSERT INTO ${q}.queue_items (task_type, thread) SELECT 'work', 1 FROM generate_series(1, $1::int)`, [
    live
  ])
  await query(`DELETE FROM ${q}.queue_items WHERE id IN (SELECT id FROM ${q}.queue_items ORDER BY seq LIMIT $1::int)`, [
    n
  ])
  // This session's counts reach the shared statistics at its next transaction's end, not up to a second later.
  await query("SELECT pg_stat_force_next_flush()")
  await query("SELECT 1")
}

/** The claim's scan plan (EXPLAIN ANALYZE, BUFFERS) as it ran, for a failure's message. */
let lastPlan: unknown

/**
 * Pages one claim's scan of the claimable index reads (with the heap pages it visits). Planned as the claim is
 * (`kairos_claim` runs with `enable_seqscan = off`): left to itself, the planner may read a table of 30 live rows
 * whole (~186 pages here, dead or not) once a vacuum has said how few they are, which says nothing of the index.
 */
const claimScanPages = async (): Promise<number> => {
  await query("BEGIN")
  await query("SET LOCAL enable_seqscan = off")
  const [row] = await query<{ "QUERY PLAN": Array<{ Plan: Record<string, number> }> }>(
    `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
     SELECT i.id FROM ${q}.queue_items i
     WHERE i.task_type = 'work' AND i.thread = 1
       AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
       AND coalesce(i.run_after, '-infinity'::timestamptz) <= now()
     ORDER BY i.priority DESC, i.seq LIMIT 20`
  )
  await query("COMMIT")
  const plan = row!["QUERY PLAN"][0]!.Plan
  lastPlan = plan
  return (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0)
}

type Client = ManagedRuntime.ManagedRuntime<QueueStore, unknown>
/** A QueueStore over its own client, connected as `url`'s role. */
const storeAt = (url: string, applicationName = "kairos-test"): Client =>
  ManagedRuntime.make(
    PgQueueStore.layerOverClient({ schema }).pipe(
      Layer.provide(PgKairos.clientLayer({ url, maxConnections: 2, applicationName }))
    )
  )
let owner: Client
let other: Client
let appStore: Client

const at = new Date("2030-01-01T00:00:00Z")
const request = (who: string, now = at, deadRows = 1_000, gapFactor = 4): VacuumRequest => ({
  owner: who,
  now,
  deadRows,
  leaseMs: 120_000,
  gapMs: 1_000,
  gapFactor
})
const vacuum = (client: Client, r: VacuumRequest): Promise<VacuumOutcome> =>
  client.runPromise(Effect.flatMap(QueueStore, (store) => store.vacuum(r)))

beforeAll(async () => {
  db = await testDatabase("vacuum")
  await onServer(`CREATE ROLE ${app} LOGIN`)
  admin = new pg.Client({ connectionString: as() })
  await admin.connect()
  const migrated = ManagedRuntime.make(
    PgKairos.clientLayer({ url: as(), maxConnections: 2, applicationName: "kairos-test" })
  )
  await migrated.runPromise(Effect.zipRight(migrate({ schema }), grant(app, { schema })))
  await migrated.dispose()
  // What this file measures is kairos's vacuum, on the dead rows each test makes: autovacuum is off on the queue's
  // tables here. Left on, the inserts that make them may call it (Postgres vacuums after inserts too), and on a slow
  // machine it cleaned them between two steps of a test: `Clean` where `Busy` or `Vacuumed` was due (CI, twice).
  for (const table of ["queue_items", "queue_leases"])
    await query(`ALTER TABLE ${q}.${table} SET (autovacuum_enabled = off)`)
  owner = storeAt(as())
  other = storeAt(as(), "kairos-test-other")
  appStore = storeAt(as(app))
}, 60_000)

afterAll(async () => {
  for (const client of [owner, other, appStore]) await client?.dispose()
  await admin?.end()
  await db?.drop()
  await onServer(`DROP ROLE IF EXISTS ${app}`)
}, 60_000)

describe("the queue's vacuum on Postgres", () => {
  it("0019 gives the queue's tables their autovacuum settings; 0029 leaves half of each item page free", async () => {
    const rows = await query<{ t: string; options: Array<string> }>(
      `SELECT relname AS t, reloptions AS options FROM pg_class
       WHERE oid IN ($1::regclass, $2::regclass) ORDER BY relname`,
      [`${schema}.queue_items`, `${schema}.queue_leases`]
    )
    const autovacuum = [
      "autovacuum_vacuum_cost_delay=0",
      "autovacuum_vacuum_scale_factor=0",
      "autovacuum_vacuum_threshold=20000",
      "vacuum_index_cleanup=on"
    ]
    // Less the setting this file adds (beforeAll).
    const own = (options: Array<string>) => options.filter((o) => !o.startsWith("autovacuum_enabled=")).sort()
    expect(rows.map((row) => [row.t, own(row.options)])).toEqual([
      ["queue_items", [...autovacuum, "fillfactor=50"].sort()],
      ["queue_leases", autovacuum]
    ])
  })

  it("below the threshold nothing is vacuumed; past it the table is, and the claim's walk is short again", async () => {
    await query(`DELETE FROM ${q}.kairos_maintenance`)
    expect(await vacuum(owner, request("a"))).toEqual({ _tag: "Clean", deadRows: expect.any(Number) })
    await deadAtHead(12_000, 30)
    const before = await stats()
    expect(before.dead).toBeGreaterThanOrEqual(12_000)
    // The claim walks past the dead entries first (about 200 of them to a leaf page).
    expect(await claimScanPages()).toBeGreaterThan(40)
    expect(await vacuum(owner, request("a", at, 20_000))).toMatchObject({ _tag: "Clean" })
    const outcome = await vacuum(owner, request("a", at, 1_000, 100))
    expect(outcome).toMatchObject({
      _tag: "Vacuumed",
      tables: [{ table: "queue_items", deadRows: before.dead }]
    })
    const after = await stats()
    expect(after.vacuums).toBe(before.vacuums + 1)
    expect(after.dead).toBeLessThan(1_000)
    // If it is long again, the plan and the vacuum's own counts say which part of the walk was.
    const walk = await claimScanPages()
    const tables = await query(
      `SELECT n_dead_tup, n_live_tup, last_vacuum, last_autovacuum, last_autoanalyze, vacuum_count, autovacuum_count
       FROM pg_stat_user_tables WHERE relid = $1::regclass`,
      [`${schema}.queue_items`]
    )
    expect(walk, JSON.stringify({ plan: lastPlan, tables })).toBeLessThan(10)
    // The lease is given back, and no other vacuum may start within the gap: a second at least, and here a hundred
    // times as long as the vacuum took (its time, and its statements' around it).
    const [lease] = await query<{ holder: string | null; until: Date }>(
      `SELECT holder, until FROM ${q}.kairos_maintenance`
    )
    expect(lease!.holder).toBeNull()
    const took = outcome._tag === "Vacuumed" ? outcome.tables[0]!.ms : Number.NaN
    expect(lease!.until.getTime() - at.getTime()).toBeGreaterThanOrEqual(Math.max(1_000, 101 * took - 1))
  })

  it("one instance at a time: a held lease or the gap after a vacuum makes the others wait", async () => {
    await query(`DELETE FROM ${q}.kairos_maintenance`)
    await deadAtHead(3_000)
    const vacuums = (await stats()).vacuums
    // Two at once: one vacuums; the other finds the lease taken (Busy), or, once it is given back, no dead rows left
    // (Clean).
    const both = await Promise.all([vacuum(owner, request("a")), vacuum(other, request("b"))])
    expect(both.filter((o) => o._tag === "Vacuumed")).toHaveLength(1)
    expect(both.filter((o) => o._tag === "Busy" || o._tag === "Clean")).toHaveLength(1)
    expect((await stats()).vacuums).toBe(vacuums + 1)
    // Within the gap after it: busy, whatever the dead rows.
    await deadAtHead(3_000)
    expect(await vacuum(other, request("b"))).toEqual({ _tag: "Busy" })
    // A lease held by an instance that is vacuuming (or died doing it) holds until it expires.
    await query(`UPDATE ${q}.kairos_maintenance SET holder = 'gone', until = $1`, [new Date(at.getTime() + 60_000)])
    expect(await vacuum(other, request("b", new Date(at.getTime() + 30_000)))).toEqual({ _tag: "Busy" })
    expect((await stats()).vacuums).toBe(vacuums + 1)
    expect(await vacuum(other, request("b", new Date(at.getTime() + 60_000)))).toMatchObject({ _tag: "Vacuumed" })
    expect((await stats()).vacuums).toBe(vacuums + 2)
  })

  it("the database going away: each call fails with the store's error, and one vacuums once it is back", async () => {
    await query(`DELETE FROM ${q}.kairos_maintenance`)
    await deadAtHead(3_000)
    const real = Number(new URL(as()).port || 5432)
    const proxy = await startProxy(real)
    const url = new URL(as())
    url.hostname = "127.0.0.1"
    url.port = String(proxy.port)
    const through = storeAt(url.toString())
    try {
      const attempt = (deadRows = 1_000) =>
        through.runPromise(
          Effect.flatMap(QueueStore, (store) => Effect.either(store.vacuum(request("c", at, deadRows)))).pipe(
            Effect.map((e) => (e._tag === "Left" ? e.left : e.right))
          )
        )
      // Connected, below a threshold of a billion.
      expect(await attempt(1e9)).toMatchObject({ _tag: "Clean" })
      // Away: open connections cut, new ones refused.
      proxy.switchTo(1)
      proxy.cutAll()
      for (let i = 0; i < 3; i++) expect(await attempt()).toMatchObject({ _tag: "QueueStoreError" })
      proxy.switchTo(real)
      expect(await attempt()).toMatchObject({ _tag: "Vacuumed" })
    } finally {
      await through.dispose()
      await proxy.close()
    }
  })

  it("a role that does not own the tables is refused without trying", async () => {
    await query(`DELETE FROM ${q}.kairos_maintenance`)
    await deadAtHead(3_000)
    const vacuums = (await stats()).vacuums
    expect(await vacuum(appStore, request("app"))).toEqual({
      _tag: "NotPermitted",
      reason:
        `role "${app}" may not vacuum ${schema}.queue_items and ${schema}.queue_leases: only the table's owner ` +
        "may (or, on Postgres 17, a role granted MAINTAIN on it)"
    })
    expect((await stats()).vacuums).toBe(vacuums)
    expect(await query(`SELECT * FROM ${q}.kairos_maintenance`)).toEqual([])
    // The owner still may.
    expect(await vacuum(owner, request("a"))).toMatchObject({ _tag: "Vacuumed" })
  })
})

/**
 * A runner of `url`'s role with a small threshold, fed 200 items every 200 ms until `until` holds of its log lines
 * (at most 30 s), then fed no more and left to drain; its log lines, and how many items it was fed.
 */
const drain = (url: string, until: (lines: ReadonlyArray<string>) => boolean) => {
  const lines: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  return Effect.gen(function* () {
    const runner = yield* Runner.Runner
    const queue = yield* QueueStore
    yield* runner.register("work", () => Effect.void)
    yield* runner.start
    let fed = 0
    const deadline = Date.now() + 30_000
    while (!until(lines) && Date.now() < deadline) {
      yield* queue.enqueueMany(
        Array.from({ length: 200 }, () => ({ taskType: "work", thread: 1 })),
        new Date()
      )
      fed += 200
      yield* Effect.sleep("200 millis")
    }
    const sql = yield* SqlClient.SqlClient
    for (let i = 0; i < 300; i++) {
      const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(`${schema}.queue_items`)}`
      if (row!.n === 0) break
      yield* Effect.sleep("100 millis")
    }
    return { lines, fed }
  }).pipe(
    Effect.provide(
      PgKairos.layer({ url, schema, migrate: false, workers: 20, vacuumDeadRows: 100, interval: "200 millis" })
    ),
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Logger.withMinimumLogLevel(LogLevel.Debug),
    Effect.scoped
  )
}

describe("a runner's queue vacuum", () => {
  it("as the tables' owner: vacuums the queue while it drains", { timeout: 60_000 }, async () => {
    await query(`DELETE FROM ${q}.kairos_maintenance`)
    const vacuums = (await stats()).vacuums
    const processed = (
      await query<{ n: number }>(
        `SELECT (SELECT count(*) FROM ${q}.processed_items) + (SELECT count(*) FROM ${q}.queue_items) AS n`
      )
    ).map((r) => Number(r.n))[0]!
    const { fed, lines } = await Effect.runPromise(
      drain(as(), (lines) => lines.some((l) => l.includes("queue vacuum: vacuumed")))
    )
    expect(lines.filter((l) => l.includes("queue vacuum")).length).toBeGreaterThan(0)
    expect(lines.find((l) => l.includes("queue vacuum"))).toMatch(
      /^DEBUG queue vacuum: vacuumed queue_items \([\d,]+ dead rows\) in \d+ ms$/
    )
    expect((await stats()).vacuums).toBeGreaterThan(vacuums)
    expect((await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${q}.processed_items`))[0]!.n).toBe(
      processed + fed
    )
  })

  it("as a role that may not: drains on, and says so once", { timeout: 60_000 }, async () => {
    const vacuums = (await stats()).vacuums
    const processed = (
      await query<{ n: number }>(
        `SELECT (SELECT count(*) FROM ${q}.processed_items) + (SELECT count(*) FROM ${q}.queue_items) AS n`
      )
    ).map((r) => Number(r.n))[0]!
    // Fed for 5 s after it said so: it says nothing more.
    let saidAt: number | undefined
    const { fed, lines } = await Effect.runPromise(
      drain(as(app), (lines) => {
        if (saidAt === undefined && lines.some((l) => l.includes("may not vacuum"))) saidAt = Date.now()
        return saidAt !== undefined && Date.now() - saidAt > 5_000
      })
    )
    expect(lines.filter((l) => l.includes("queue vacuum"))).toEqual([
      `WARN queue vacuum: role "${app}" may not vacuum ${schema}.queue_items and ${schema}.queue_leases: only the ` +
        "table's owner may (or, on Postgres 17, a role granted MAINTAIN on it); this worker leaves the queue's dead " +
        "rows to autovacuum (a long backlog then drains slower as it goes): run a worker as the owner, or see " +
        "docs/operations.md"
    ])
    expect((await stats()).vacuums).toBe(vacuums)
    expect((await query<{ n: number }>(`SELECT count(*)::int AS n FROM ${q}.processed_items`))[0]!.n).toBe(
      processed + fed
    )
  })
})
