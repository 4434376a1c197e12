/**
 * The test fixture itself: the run's database, one schema per file, servers that never collide and never outlive
 * their run. Integration tests: real servers, real processes and signals, wall time.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import pg from "pg"
import { spawn } from "node:child_process"
import {
  postmasterPid,
  removeOrphans,
  startEmbedded,
  stopDataDir
} from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { PgTest, TestSchema, TestSchemaLive } from "./database.js"
import { exited, firstLine, portOpen, projectRoot, run as runCommand, serverTempDir, spawnFixture } from "./process.js"

const query = async (url: string, text: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text)).rows as Array<Record<string, unknown>>
  } finally {
    await client.end()
  }
}

const exists = (p: string) =>
  fs.access(p).then(
    () => true,
    () => false
  )

layer(PgTest("fixture"), { timeout: "60 seconds", excludeTestServices: true })("the run's database", (it) => {
  it.effect("answers, in a schema of this file's own", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const rows = yield* sql<{ n: string }>`SELECT nspname AS n FROM pg_namespace WHERE nspname = ${schema}`
      expect(rows.map((r) => r.n)).toEqual([schema])
    })
  )

  it.effect("another schema layer gets another name and sees none of this one's tables", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const mine = yield* TestSchema
      yield* sql`CREATE TABLE ${sql(mine)}.marker (id int)`
      const other = yield* Effect.scoped(
        Layer.build(TestSchemaLive("other")).pipe(
          Effect.flatMap((ctx) =>
            Effect.gen(function* () {
              const name = ctx.unsafeMap.get(TestSchema.key) as string
              const tables = yield* sql<{ t: string }>`
                SELECT table_name AS t FROM information_schema.tables WHERE table_schema = ${name}`
              return { name, tables: tables.length }
            })
          )
        )
      )
      expect(other.name).not.toBe(mine)
      expect(other.tables).toBe(0)
      // Released with its scope: the other schema is gone.
      const left = yield* sql`SELECT 1 FROM pg_namespace WHERE nspname = ${other.name}`
      expect(left.length).toBe(0)
    })
  )
})

describe("embedded Postgres servers", () => {
  it("two servers started at once get different ports and both answer", { timeout: 60_000 }, async () => {
    const [a, b] = await Promise.all([startEmbedded(), startEmbedded()])
    try {
      expect(a.port).not.toBe(b.port)
      const [ra, rb] = await Promise.all([query(a.url, "SELECT 1 AS one"), query(b.url, "SELECT 1 AS one")])
      expect(ra).toEqual([{ one: 1 }])
      expect(rb).toEqual([{ one: 1 }])
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
    expect(await portOpen(a.port)).toBe(false)
    expect(await exists(a.dataDir)).toBe(false)
  })

  it("a server whose owner was killed with SIGKILL is removed by the next start", { timeout: 60_000 }, async () => {
    const child = spawnFixture("test/fixtures/orphan-server.ts")
    const info = JSON.parse(await firstLine(child)) as { port: number; dataDir: string }
    child.kill("SIGKILL")
    await exited(child)
    // The orphan is still up: nothing stopped it.
    expect(await portOpen(info.port)).toBe(true)
    expect(await removeOrphans()).toBeGreaterThanOrEqual(1)
    expect(await portOpen(info.port)).toBe(false)
    expect(await exists(path.dirname(info.dataDir))).toBe(false)
  })

  it(
    "a postmaster.pid whose pid another program has now (after a reboot): that program is left alone, the server starts",
    { timeout: 60_000 },
    async () => {
      const base = await serverTempDir("kairos-stale-")
      const dataDir = path.join(base, "data")
      // A program that has nothing to do with Postgres, with the pid the file will name.
      const other = spawn("sleep", ["120"], { stdio: "ignore" })
      try {
        let server = await startEmbedded({ dataDir, persistent: true })
        await server.stop()
        // What a reboot leaves: the file of a server that is gone, its pid another program's by now.
        await fs.writeFile(path.join(dataDir, "postmaster.pid"), `${other.pid}\n${dataDir}\n`)
        expect(await postmasterPid(dataDir)).toBeUndefined()
        expect(await stopDataDir(dataDir)).toBe(false)
        server = await startEmbedded({ dataDir, persistent: true })
        try {
          expect(await query(server.url, "SELECT 1 AS one")).toEqual([{ one: 1 }])
          // The folder's own postmaster now, which is.
          const pid = await postmasterPid(dataDir)
          expect(pid).toBeDefined()
          expect(pid).not.toBe(other.pid)
        } finally {
          await server.stop()
        }
        expect([other.exitCode, other.signalCode]).toEqual([null, null])
      } finally {
        other.kill("SIGKILL")
        await fs.rm(base, { recursive: true, force: true })
      }
    }
  )

  it("a failing test run leaves no server behind", { timeout: 120_000 }, async () => {
    const report = path.join(await fs.mkdtemp(path.join(os.tmpdir(), "kairos-report-")), "url")
    const env: NodeJS.ProcessEnv = { ...process.env, KAIROS_REPORT_FILE: report }
    delete env["DATABASE_URL"]
    delete env["VITEST"]
    delete env["VITEST_POOL_ID"]
    delete env["VITEST_WORKER_ID"]
    const run = await runCommand(
      process.execPath,
      [
        path.join(projectRoot, "node_modules/vitest/vitest.mjs"),
        "run",
        "--config",
        "test/fixtures/failing-run/vitest.config.ts"
      ],
      { cwd: projectRoot, env, timeout: 110_000 }
    )
    expect(run.status).not.toBe(0)
    expect(run.stdout + run.stderr).toContain("records the run's database, then fails")
    const url = new URL(await fs.readFile(report, "utf8"))
    expect(await portOpen(Number(url.port))).toBe(false)
    await fs.rm(path.dirname(report), { recursive: true, force: true })
  })
})
