/**
 * The kairos command line, spawned as a real process against a real Postgres, checked by exit code and output.
 * Integration: real processes, signals and wall time.
 */
import { spawn, spawnSync } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"
import { startEmbedded } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { exited, projectRoot } from "../support/process.js"
import { sleep, until } from "../support/workers.js"
import pg from "pg"

const bin = path.join(projectRoot, "bin/kairos.js")
let url = ""
const schema = uniqueSchemaName("cli")

const kairos = (args: ReadonlyArray<string>, options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) => {
  const run = spawnSync(process.execPath, [bin, ...args], {
    cwd: options.cwd ?? projectRoot,
    env: options.env ?? process.env,
    encoding: "utf8",
    timeout: 60_000
  })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}
const db = (args: ReadonlyArray<string>, inSchema = schema) =>
  kairos([...args, "--database-url", url, "--schema", inSchema])
const json = (args: ReadonlyArray<string>, inSchema = schema) => {
  const r = db([...args, "--json"], inSchema)
  expect(r.stderr).toBe("")
  expect(r.code).toBe(0)
  return JSON.parse(r.stdout) as unknown
}

const query = async (text: string, inSchema = schema, params: ReadonlyArray<unknown> = []) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text.replaceAll("$schema", `"${inSchema}"`), [...params])).rows as Array<
      Record<string, unknown>
    >
  } finally {
    await client.end()
  }
}

beforeAll(() => {
  url = databaseUrl()
})

afterAll(async () => {
  await query(`DROP SCHEMA IF EXISTS $schema CASCADE`)
})

describe("kairos commands", () => {
  it(
    "migrate, enqueue, queue, semaphore, workers, jobs, runs, truncate: exit codes and --json documents",
    { timeout: 120_000 },
    async () => {
      expect(json(["migrate"])).toEqual({
        schema,
        applied: [
          "0001_scheduled_jobs",
          "0002_queue",
          "0003_pipeline",
          "0004_lean_leases",
          "0005_bad_rows",
          "0006_unfinished_runs"
        ]
      })
      expect(json(["migrate"])).toEqual({ schema, applied: [] })
      const item = json([
        "enqueue",
        "send_email",
        `{"to":"a@b.c"}`,
        "--priority",
        "3",
        "--max-runs",
        "0",
        "--thread",
        "1"
      ]) as Record<string, unknown>
      expect(item).toMatchObject({
        taskType: "send_email",
        payload: `{"to":"a@b.c"}`,
        priority: 3,
        maxRuns: 1,
        thread: 1,
        status: "pending"
      })
      const queue = json(["queue"]) as Array<Record<string, unknown>>
      expect(queue).toEqual([
        expect.objectContaining({ id: item["id"], task_type: "send_email", runs_left: 1, handled: false })
      ])
      const human = db(["queue"])
      expect(human.code).toBe(0)
      expect(human.stdout.split("\n")[0]!.split(/\s+/)).toEqual([
        "id",
        "task_type",
        "status",
        "priority",
        "runs_left",
        "thread",
        "created_at",
        "handled"
      ])
      expect(json(["semaphore"])).toEqual({ semaphore: "green" })
      expect(json(["semaphore", "red"])).toEqual({ semaphore: "red" })
      expect((await query(`SELECT value FROM $schema.scheduler_meta WHERE key = 'semaphore'`))[0]!["value"]).toBe("red")
      expect(json(["semaphore", "green"])).toEqual({ semaphore: "green" })
      expect(json(["workers"])).toEqual([])
      expect(json(["jobs"])).toEqual([])
      expect(json(["runs", "5"])).toEqual([])
      expect(json(["processed"])).toEqual([])
      const refused = db(["truncate"])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toBe(
        "kairos: truncate deletes every queue item, execution and run: add --yes to confirm\n"
      )
      expect(json(["truncate", "--yes"])).toEqual({ truncated: ["queue_items", "processed_items", "job_runs"] })
      expect(json(["queue"])).toEqual([])
    }
  )

  it(
    "worker runs SQL-inserted items and a schedule from its tasks module, and stops on SIGTERM with nothing processing",
    { timeout: 120_000 },
    async () => {
      json(["migrate"])
      await query(
        `INSERT INTO $schema.queue_items (task_type, payload) SELECT 'send_email', '{"to":"n' || i || '@x.y"}' FROM generate_series(1, 5) i`
      )
      const worker = spawn(
        process.execPath,
        [
          bin,
          "worker",
          "--tasks",
          "examples/tasks.ts",
          "--database-url",
          url,
          "--schema",
          schema,
          "--interval",
          "500ms",
          "--json"
        ],
        {
          cwd: projectRoot,
          stdio: ["ignore", "pipe", "pipe"]
        }
      )
      let out = ""
      let err = ""
      worker.stdout.on("data", (d: Buffer) => (out += d.toString()))
      worker.stderr.on("data", (d: Buffer) => (err += d.toString()))
      await until(
        async () => {
          const done = await query(`SELECT count(*)::int AS n FROM $schema.processed_items`)
          const runs = await query(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'success'`)
          return done[0]!["n"] === 5 && Number(runs[0]!["n"]) >= 1
        },
        20_000,
        "five processed items and a successful heartbeat run"
      )
      const processed = json(["processed", "10"]) as Array<Record<string, unknown>>
      expect(processed.length).toBe(5)
      expect(processed.every((p) => p["status"] === "ok" && p["taskType"] === "send_email")).toBe(true)
      const human = db(["processed", "1"])
      expect(human.stdout.split("\n")[0]!.split(/\s+/)).toEqual([
        "id",
        "item",
        "task_type",
        "status",
        "duration_ms",
        "started_at",
        "error"
      ])
      const jobs = json(["jobs"]) as Array<Record<string, unknown>>
      expect(jobs.map((j) => j["name"])).toEqual(["heartbeat", "nightly-cleanup"])
      const runs = json(["runs"]) as Array<Record<string, unknown>>
      expect(runs.some((r) => r["job"] === "heartbeat" && r["status"] === "success")).toBe(true)
      const workers = json(["workers"]) as Array<Record<string, unknown>>
      expect(workers.length).toBe(1)
      expect([...(workers[0]!["task_types"] as Array<string>)].sort()).toEqual(["cleanup", "send_email"])
      expect(JSON.parse(out.split("\n")[0]!)).toMatchObject({ event: "started" })
      worker.kill("SIGTERM")
      const exit = await exited(worker)
      expect(exit.code).toBe(0)
      expect(err).toBe("")
      expect(await query(`SELECT 1 FROM $schema.queue_items WHERE status = 'processing'`)).toEqual([])
      expect(json(["workers"])).toEqual([])
    }
  )

  it.each([
    ["an unknown command", ["frobnicate"], /Invalid subcommand/],
    ["a bad flag value", ["enqueue", "t", "--priority", "abc"], /'abc' is not a integer/],
    [
      "a missing tasks module",
      ["worker", "--tasks", "no/such/module.ts"],
      /^kairos: --tasks no\/such\/module\.ts: no such file\n$/
    ],
    [
      "a tasks module without handlers",
      ["worker", "--tasks", "test/fixtures/empty-tasks.ts"],
      /default export must be/
    ],
    ["an invalid schema name", ["queue", "--schema", "Bad.Name"], /^kairos: invalid schema name/],
    [
      "a tasks module whose schedule does not validate",
      ["worker", "--tasks", "test/fixtures/bad-schedule-tasks.ts"],
      /^kairos: --tasks test\/fixtures\/bad-schedule-tasks\.ts: schedule "broken": hour: hour must be an integer from 0 to 23\n$/
    ],
    [
      "a bad --interval",
      ["worker", "--tasks", "examples/tasks.ts", "--interval", "4 sekunds"],
      /^kairos: --interval: "4 sekunds" is not a duration \(use e\.g\. "30 seconds" or "30s"\)\n$/
    ],
    [
      "a zero --interval",
      ["worker", "--tasks", "examples/tasks.ts", "--interval", "0s"],
      /^kairos: --interval: "0s" is not a positive duration \(use e\.g\. "30 seconds" or "30s"\)\n$/
    ]
  ])("%s: one clear line, non-zero exit, no stack trace", { timeout: 60_000 }, (_name, args, pattern) => {
    const r = kairos([...args, "--database-url", url])
    expect(r.code).not.toBe(0)
    expect(r.stdout + r.stderr).toMatch(pattern)
    expect(r.stdout + r.stderr).not.toMatch(/\n\s+at /)
  })

  it("SIGINT waits for a running handler; a second SIGINT forces the stop", { timeout: 90_000 }, async () => {
    json(["migrate"])
    const worker = spawn(
      process.execPath,
      [
        bin,
        "worker",
        "--tasks",
        "test/fixtures/slow-tasks.ts",
        "--database-url",
        url,
        "--schema",
        schema,
        "--interval",
        "500ms"
      ],
      {
        cwd: projectRoot,
        stdio: ["ignore", "pipe", "pipe"]
      }
    )
    let err = ""
    worker.stderr.on("data", (d: Buffer) => (err += d.toString()))
    await query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ('slow', '')`)
    await until(
      async () => (await query(`SELECT 1 FROM $schema.queue_items WHERE status = 'processing'`)).length > 0,
      20_000,
      "the slow item to start"
    )
    worker.kill("SIGINT")
    await sleep(1500)
    // Still waiting for the handler (the grace period is 30 s).
    expect(worker.exitCode).toBeNull()
    const forcedAt = Date.now()
    worker.kill("SIGINT")
    const exit = await exited(worker)
    expect(Date.now() - forcedAt).toBeLessThan(10_000)
    expect(exit.code).toBe(130)
    expect(err).toContain("kairos: forced stop")
  })

  it("a wrong password: one clear line", { timeout: 60_000 }, async () => {
    const server = await startEmbedded({ password: "right horse battery" })
    try {
      const wrong = server.url.replace(encodeURIComponent("right horse battery"), "wrong")
      const r = kairos(["queue", "--database-url", wrong])
      expect(r.code).toBe(1)
      expect(r.stderr).toMatch(
        /^kairos: cannot log in to 127\.0\.0\.1:\d+\/postgres: password authentication failed for user "postgres"\n$/
      )
      // The right one gets through (to the next problem: no tables yet).
      const right = kairos(["queue", "--database-url", server.url])
      expect(right.stderr).toBe(`kairos: kairos's tables are missing in schema "public": run \`kairos migrate\`\n`)
    } finally {
      await server.stop()
    }
  })

  it("a failed migration: one line naming the migration and the database's reason", { timeout: 60_000 }, async () => {
    const conflicted = uniqueSchemaName("cli_conflict")
    await query(`CREATE SCHEMA $schema; CREATE TABLE $schema.queue_items (x int)`, conflicted)
    try {
      const r = db(["migrate"], conflicted)
      expect(r.code).toBe(1)
      expect(r.stderr).toBe(
        `kairos: migration 0002_queue failed: relation "queue_items" already exists (SQLSTATE 42P07)\n`
      )
    } finally {
      await query(`DROP SCHEMA $schema CASCADE`, conflicted)
    }
  })

  it("an unreachable database: one clear line (--verbose shows the cause)", { timeout: 60_000 }, () => {
    const unreachable = kairos(["queue", "--database-url", "postgres://postgres@127.0.0.1:1/x"])
    expect(unreachable.code).toBe(1)
    expect(unreachable.stderr).toMatch(/^kairos: cannot reach the database at 127\.0\.0\.1:1\/x: .+\n$/)
    const verbose = kairos(["queue", "--database-url", "postgres://postgres@127.0.0.1:1/x", "--verbose"])
    expect(verbose.stderr.split("\n").length).toBeGreaterThan(2)
  })
})

describe("kairos jobs and workers: a worker is live while its live_until lies ahead", () => {
  // A schema of their own: the tests above expect exactly their own jobs and workers.
  const liveSchema = uniqueSchemaName("cli_live")
  const header = (r: { stdout: string }) => r.stdout.split("\n")[0]!.split(/\s+/)
  /** The row whose second column (after the id) is `name`. */
  const line = (r: { stdout: string }, name: string) =>
    r.stdout.split("\n").find((l) => l.split(/\s+/)[1] === name) ?? ""

  beforeAll(() => {
    json(["migrate"], liveSchema)
  })
  afterAll(async () => {
    await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, liveSchema)
  })

  it("jobs: unhandled until a live worker lists the job's task type; a bad stored schedule still lists", async () => {
    await query(
      `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule) VALUES
         ('report', 'make_report', '{"_tag":"Interval","everyMillis":60000}'),
         ('broken', 'make_report', '{"_tag":"Hourly"}')`,
      liveSchema
    )
    const jobs = () => json(["jobs"], liveSchema) as Array<Record<string, unknown>>
    expect(jobs()).toEqual([
      {
        id: expect.any(String),
        name: "broken",
        task_type: "make_report",
        schedule: { _tag: "Hourly" },
        enabled: true,
        next_run_at: null,
        handled: false
      },
      {
        id: expect.any(String),
        name: "report",
        task_type: "make_report",
        schedule: { _tag: "Interval", everyMillis: 60000 },
        enabled: true,
        next_run_at: null,
        handled: false
      }
    ])
    const unhandled = db(["jobs"], liveSchema)
    expect(unhandled.code).toBe(0)
    expect(header(unhandled)).toEqual(["id", "name", "task_type", "schedule", "enabled", "next_run_at", "handled"])
    expect(line(unhandled, "report")).toMatch(/every 1m.*\sno \(no live worker\)$/)
    expect(line(unhandled, "broken")).toMatch(/invalid: \{"_tag":"Hourly"\}.*\sno \(no live worker\)$/)
    // A fresh heartbeat does not make a worker live once its live_until has passed.
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, heartbeat_at, live_until)
       VALUES ('gone', '{make_report}', now(), now() - interval '1 second')`,
      liveSchema
    )
    expect(jobs().map((j) => j["handled"])).toEqual([false, false])
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, live_until)
       VALUES ('live', '{other,make_report}', now() + interval '5 minutes')`,
      liveSchema
    )
    expect(jobs().map((j) => j["handled"])).toEqual([true, true])
    const handled = db(["jobs"], liveSchema)
    expect(line(handled, "report")).toMatch(/\syes$/)
    await query(`DELETE FROM $schema.scheduler_workers`, liveSchema)
  })

  it("workers: a worker whose live_until has passed is not listed, however recent its heartbeat", async () => {
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, heartbeat_at, live_until) VALUES
         ('w-gone', '{send_email}', now(), now() - interval '1 second'),
         ('w-live', '{send_email,cleanup}', now(), now() + interval '5 minutes')`,
      liveSchema
    )
    expect(json(["workers"], liveSchema)).toEqual([
      {
        id: "w-live",
        task_types: ["send_email", "cleanup"],
        started_at: expect.any(String),
        heartbeat_at: expect.any(String)
      }
    ])
    const human = db(["workers"], liveSchema)
    expect(human.code).toBe(0)
    expect(header(human)).toEqual(["id", "task_types", "started_at", "heartbeat_at"])
    expect(human.stdout).toContain("w-live  send_email,cleanup")
    expect(human.stdout).not.toContain("w-gone")
    // The queue judges "handled" by the same rule.
    await query(`INSERT INTO $schema.queue_items (task_type) VALUES ('send_email')`, liveSchema)
    expect((json(["queue"], liveSchema) as Array<Record<string, unknown>>).map((i) => i["handled"])).toEqual([true])
    await query(`UPDATE $schema.scheduler_workers SET live_until = now() - interval '1 second'`, liveSchema)
    expect(json(["workers"], liveSchema)).toEqual([])
    expect((json(["queue"], liveSchema) as Array<Record<string, unknown>>).map((i) => i["handled"])).toEqual([false])
  })
})

describe("kairos tables: what any program wrote reaches the terminal escaped", () => {
  const hostileSchema = uniqueSchemaName("cli_hostile")
  // ESC sequences that would clear the screen and retitle the terminal, a newline, a C1 CSI, a bidi override.
  const evil = "evil\u001b[2J\u001b]0;pwned\u0007\nnext\u009b31m\u202e"
  beforeAll(async () => {
    json(["migrate"], hostileSchema)
    await query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ($1, $1)`, hostileSchema, [evil])
    await query(
      `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule)
         VALUES ($1, $1, '{"_tag":"Interval","everyMillis":60000}')`,
      hostileSchema,
      [evil]
    )
    await query(
      `INSERT INTO $schema.processed_items
         (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
         VALUES (1, $1, $1, 'error', $2, now(), now(), 1)`,
      hostileSchema,
      [evil, evil + "x".repeat(500)]
    )
  })
  afterAll(async () => {
    await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, hostileSchema)
  })

  it.each(["queue", "jobs", "processed"])("%s: control characters escaped, long cells cut; --json exact", (command) => {
    const human = db([command], hostileSchema)
    expect(human.code).toBe(0)
    expect(human.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/)
    expect(human.stdout).toContain("evil\\x1b[2J\\x1b]0;pwned\\x07\\nnext\\x9b31m\\u202e")
    // A header and one row: the newline inside the value did not break the row.
    expect(human.stdout.trimEnd().split("\n")).toHaveLength(2)
    expect(
      Math.max(
        ...human.stdout
          .split("\n")[1]!
          .split(/\s{2,}/)
          .map((c) => c.length)
      )
    ).toBeLessThanOrEqual(60)
    const doc = db([command, "--json"], hostileSchema)
    expect(doc.stdout.trimEnd()).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202e]/)
    const rows = JSON.parse(doc.stdout) as Array<Record<string, unknown>>
    expect(rows[0]!["task_type"] ?? rows[0]!["taskType"]).toBe(evil)
  })
})

describe("kairos db (the embedded development database)", () => {
  it(
    "starts on first use in ./.kairos, is shared by later commands, and stops with `db stop`",
    { timeout: 120_000 },
    async () => {
      const cwd = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-cli-dev-"))
      await fs.chmod(cwd, 0o755)
      const env = { ...process.env }
      delete env["DATABASE_URL"]
      try {
        const first = kairos(["migrate", "--json"], { cwd, env })
        expect(first.code).toBe(0)
        expect(first.stderr).toContain("started the development database")
        const status = JSON.parse(kairos(["db", "status", "--json"], { cwd, env }).stdout) as {
          running: boolean
          dataDir: string
        }
        expect(status).toMatchObject({ running: true, dataDir: path.join(cwd, ".kairos") })
        const second = kairos(["enqueue", "t", "--json"], { cwd, env })
        expect(second.code).toBe(0)
        expect(second.stderr).toBe("")
        expect(JSON.parse(kairos(["queue", "--json"], { cwd, env }).stdout)).toHaveLength(1)
        expect(JSON.parse(kairos(["db", "stop", "--json"], { cwd, env }).stdout)).toEqual({ stopped: true })
        expect(JSON.parse(kairos(["db", "status", "--json"], { cwd, env }).stdout)).toMatchObject({ running: false })
        // Data is kept: the next command starts it again and finds the item.
        expect(JSON.parse(kairos(["queue", "--json"], { cwd, env }).stdout)).toHaveLength(1)
      } finally {
        kairos(["db", "stop"], { cwd, env })
        await fs.rm(cwd, { recursive: true, force: true })
      }
    }
  )
})
