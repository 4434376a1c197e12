/**
 * kairos run by a role that owns nothing: the schema's owner migrates and runs `kairos grant`; a worker, the CLI's
 * read and control commands and the dashboard then run as the granted role, which cannot change the schema, touch
 * the log's rows or read another schema. Roles are the cluster's: each run makes its own and drops them after.
 * Integration: real processes against a real Postgres.
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import pg from "pg"
import { migrationNames } from "../../src/adapters/postgres/migrations.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"
import { exited, projectRoot } from "../support/process.js"
import { bin, kairos, kairosHere, live } from "../support/cli.js"

const suffix = randomBytes(4).toString("hex")
const owner = `kt_owner_${suffix}`
const app = `kt_app_${suffix}`
const schema = uniqueSchemaName("least_priv")
const other = uniqueSchemaName("least_priv_other")

/** The test run's URL with another user (the test servers trust local connections). */
const as = (role: string): string => {
  const url = new URL(databaseUrl())
  url.username = role
  url.password = ""
  return url.toString()
}
const database = () => new URL(databaseUrl()).pathname.slice(1)

const sqlAs = async <T = Record<string, unknown>>(
  role: string | undefined,
  text: string,
  params: ReadonlyArray<unknown> = []
) => {
  const client = new pg.Client({ connectionString: role === undefined ? databaseUrl() : as(role) })
  await client.connect()
  try {
    return (await client.query(text, [...params])).rows as Array<T>
  } finally {
    await client.end()
  }
}
/** The SQLSTATE a statement fails with, as `role`. */
const refusal = (role: string, text: string): Promise<string> =>
  sqlAs(role, text).then(
    () => "succeeded",
    (e: { code?: string }) => e.code ?? "no code"
  )

/** The newest migration, and the one before it. */
const newest = migrationNames[migrationNames.length - 1]!
const previous = migrationNames[migrationNames.length - 2]!

/**
 * A command as `role`. What the role may do is the database's answer, the same from any process: the commands run
 * in this one (kairosHere), a worker's start by a real process.
 */
const cli = (role: string, args: ReadonlyArray<string>) =>
  (args[0] === "worker" ? kairos : kairosHere)([...args, "--database-url", as(role), "--schema", schema])

beforeAll(async () => {
  await sqlAs(undefined, `CREATE ROLE ${owner} LOGIN`)
  await sqlAs(undefined, `CREATE ROLE ${app} LOGIN`)
  await sqlAs(undefined, `GRANT CREATE ON DATABASE "${database()}" TO ${owner}`)
  // Another schema of the owner's, with a table the app role must not read.
  await sqlAs(
    owner,
    `CREATE SCHEMA ${other}; CREATE TABLE ${other}.secrets (v text); INSERT INTO ${other}.secrets VALUES ('x')`
  )
}, 60_000)

afterAll(async () => {
  await sqlAs(undefined, `DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  await sqlAs(undefined, `DROP SCHEMA IF EXISTS ${other} CASCADE`)
  for (const role of [app, owner]) {
    await sqlAs(undefined, `DROP OWNED BY ${role}`).catch(() => undefined)
    await sqlAs(undefined, `DROP ROLE IF EXISTS ${role}`)
  }
}, 60_000)

describe("a least-privilege role", () => {
  it(
    "granted by the owner, runs a drain, schedules, the control commands and the dashboard, and can do nothing else",
    { timeout: 180_000 },
    async () => {
      // Before any migration the app role cannot create the schema: one line that names who must.
      const early = await cli(app, ["worker", "--tasks", "examples/tasks.ts"])
      expect(early.code).toBe(1)
      expect(early.stderr).toMatch(
        new RegExp(
          `^kairos: schema "${schema}" has no kairos tables and this kairos needs ${newest}, but role "${app}" may not migrate it: run \`kairos migrate\` as the schema's owner \\(.*permission denied.*\\)\\n$`
        )
      )

      // The owner migrates and grants.
      expect((await cli(owner, ["migrate"])).code).toBe(0)
      const granted = await cli(owner, ["grant", app])
      expect(granted.stderr).toBe("")
      expect(granted.stdout).toBe(
        `granted role "${app}" what workers, the CLI and the dashboard need in schema "${schema}"\n`
      )
      // Twice is the same (a deploy script may run it on every release).
      expect((await cli(owner, ["grant", app])).code).toBe(0)

      // The app role finds the schema up to date without migrating anything.
      expect(await cli(app, ["migrate"])).toMatchObject({ code: 0, stdout: `schema "${schema}" is up to date\n` })

      // A worker as the app role: its schedules are upserted, enqueued items drain, the heartbeat job runs.
      const worker = live([
        "worker",
        "--tasks",
        "examples/tasks.ts",
        "--interval",
        "1s",
        "--database-url",
        as(app),
        "--schema",
        schema
      ])
      try {
        await worker.waitFor(/kairos worker /)
        for (let i = 0; i < 5; i++) {
          const enqueued = await cli(app, ["enqueue", "send_email", JSON.stringify({ to: `user${i}@example.com` })])
          expect(enqueued.stderr).toBe("")
        }
        await worker.waitFor(/(Completed send_email.*[\s\S]*){5}/, "out", 30_000)
        // The control commands.
        expect((await cli(app, ["semaphore", "red"])).stdout).toBe("red (nothing new starts)\n")
        expect((await cli(app, ["semaphore", "green"])).stdout).toBe("green (work runs)\n")
        expect((await cli(app, ["jobs", "pause", "heartbeat"])).stdout).toMatch(/^paused heartbeat: /)
        expect((await cli(app, ["jobs", "resume", "heartbeat"])).stdout).toMatch(/^resumed heartbeat: /)
        expect((await cli(app, ["jobs", "run", "nightly-cleanup"])).code).toBe(0)
        await worker.waitFor(/Completed cleanup job nightly-cleanup/, "out", 30_000)
        const later = await cli(app, ["enqueue", "send_email", "{}", "--run-after", "1h"])
        const id = /^enqueued (\d+)/.exec(later.stdout)?.[1]
        expect(id).toBeDefined()
        // An item that waits for it (kept in flow_steps, 0023), not run once it is cancelled (its step marked).
        const waiter = await cli(app, ["enqueue", "send_email", "{}", "--after", id!])
        expect(waiter.stderr).toBe("")
        expect((await cli(app, ["cancel", id!])).code).toBe(0)
        const processed = JSON.parse((await cli(app, ["processed", "--json"])).stdout) as Array<{ id: string }>
        expect(processed.length).toBeGreaterThanOrEqual(5)
        expect((await cli(app, ["retry", processed[0]!.id])).code).toBe(0)
        // Retention prunes through the owner's functions (0018): the app role has no DELETE on the log.
        const pruned = await cli(app, ["prune", "--log-keep", "2"])
        expect(pruned.stderr).toBe("")
        expect(pruned.code).toBe(0)
        for (const listing of ["queue", "processed", "jobs", "runs", "workers", "stats"]) {
          const r = await cli(app, [listing])
          expect(r.stderr, listing).toBe("")
          expect(r.code, listing).toBe(0)
        }
        const listed = JSON.parse((await cli(app, ["workers", "--json"])).stdout) as Array<unknown>
        expect(listed).toHaveLength(1)
      } finally {
        worker.child.kill("SIGTERM")
      }
      expect((await exited(worker.child)).code).toBe(0)
      expect(
        (await sqlAs<{ n: number }>(undefined, `SELECT count(*)::int AS n FROM ${schema}.processed_items`))[0]!.n
      ).toBeLessThanOrEqual(3)

      // The dashboard, as the app role.
      const dashboard = spawn(
        process.execPath,
        [bin, "dashboard", "--database-url", as(app), "--schema", schema, "--port", "0"],
        { cwd: projectRoot, stdio: ["ignore", "pipe", "pipe"] }
      )
      try {
        const base = await new Promise<string>((resolve, reject) => {
          let out = ""
          dashboard.stdout.on("data", (d: Buffer) => {
            out += d.toString()
            const match = /kairos dashboard: (http:\/\/\S+)/.exec(out)
            if (match !== null) resolve(match[1]!)
          })
          dashboard.on("exit", (code) => reject(new Error(`dashboard exited (${code}):\n${out}`)))
        })
        for (const page of ["/", "/queue", "/processed", "/jobs", "/jobs/heartbeat"]) {
          const response = await fetch(new URL(page, base))
          expect(response.status, page).toBe(200)
        }
      } finally {
        dashboard.kill("SIGTERM")
        await exited(dashboard)
      }

      // And nothing else: no DDL, no way around the log's trigger, no other schema, no TRUNCATE.
      expect(await refusal(app, `ALTER TABLE ${schema}.queue_items ADD COLUMN x int`)).toBe("42501")
      expect(
        await refusal(app, `ALTER TABLE ${schema}.processed_items DISABLE TRIGGER processed_items_insert_only`)
      ).toBe("42501")
      expect(await refusal(app, `SET kairos.pruning = 'on'; DELETE FROM ${schema}.processed_items`)).toBe("42501")
      expect(await refusal(app, `UPDATE ${schema}.processed_items SET error_msg = 'x'`)).toBe("42501")
      expect(await refusal(app, `SET session_replication_role = replica`)).toBe("42501")
      expect(await refusal(app, `CREATE TABLE ${schema}.mine (x int)`)).toBe("42501")
      expect(await refusal(app, `DROP FUNCTION ${schema}.kairos_prune_processed(timestamptz, bigint, integer)`)).toBe(
        "42501"
      )
      expect(await refusal(app, `SELECT * FROM ${other}.secrets`)).toBe("42501")
      const truncate = await cli(app, ["truncate", "--yes"])
      expect(truncate.code).toBe(1)
      expect(truncate.stderr).toMatch(/^kairos: .*permission denied/)

      // A schema behind this kairos (its newest migration's row gone, as on an older release): one line, no loop.
      await sqlAs(
        undefined,
        `DELETE FROM ${schema}.kairos_migrations WHERE migration_id = ${Number.parseInt(newest, 10)}`
      )
      const behind = await cli(app, ["worker", "--tasks", "examples/tasks.ts"])
      expect(behind.code).toBe(1)
      expect(behind.stderr).toMatch(
        new RegExp(
          `^kairos: schema "${schema}" is at ${previous} and this kairos needs ${newest}, but role "${app}" may not migrate it: run \`kairos migrate\` as the schema's owner`
        )
      )
      expect(behind.stderr.split("\n")).toHaveLength(2)
      // Its owner can: what the role was granted on later objects comes from the owner's default privileges.
      expect((await cli(owner, ["migrate"])).stdout).toBe(`applied ${newest}\n`)
      expect((await cli(app, ["migrate"])).code).toBe(0)
    }
  )
})
