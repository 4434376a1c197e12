/**
 * The kairos command line, spawned as a real process against a real Postgres, checked by exit code and output:
 * the queue commands, bad input and unreachable databases. The worker command, the listings and the control
 * commands have files of their own (worker.test.ts, admin.test.ts). Integration: real processes and wall time.
 */
import { spawn } from "node:child_process"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { uniqueSchemaName } from "../support/database.js"
import { startEmbedded } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { exited, firstLine, PROCESS_LIMITS, projectRoot, spawnTs } from "../support/process.js"
import { until } from "../support/workers.js"
import { migrationNames } from "../../src/adapters/postgres/migrations.js"
import { bin, db, json, kairos, kairosHere, live, query, schema, url, useCli } from "../support/cli.js"

useCli()

describe("kairos commands", () => {
  it(
    "migrate, enqueue, queue, semaphore, workers, jobs, runs, truncate: exit codes and --json documents",
    { timeout: 120_000 },
    async () => {
      // Every shipped migration, in order, the first time; none the second.
      expect(await json(["migrate"])).toEqual({ schema, applied: [...migrationNames] })
      expect(await json(["migrate"])).toEqual({ schema, applied: [] })
      const item = (await json([
        "enqueue",
        "send_email",
        `{"to":"a@b.c"}`,
        "--priority",
        "3",
        "--max-runs",
        "0",
        "--thread",
        "1"
      ])) as Record<string, unknown>
      // JSON keys are snake_case, like the tables (and like queue, runs, processed and the worker's events).
      expect(item).toMatchObject({
        task_type: "send_email",
        payload: `{"to":"a@b.c"}`,
        priority: 3,
        max_runs: 1,
        thread: 1,
        status: "pending",
        created_at: expect.any(String)
      })
      const queue = (await json(["queue"])) as Array<Record<string, unknown>>
      expect(queue).toEqual([
        expect.objectContaining({ id: item["id"], task_type: "send_email", runs_left: 1, handled: false })
      ])
      const human = await db(["queue"])
      expect(human.code).toBe(0)
      expect(human.stdout.split("\n")[0]!.split(/\s+/)).toEqual([
        "id",
        "task_type",
        "status",
        "priority",
        "runs_left",
        "thread",
        "created_at",
        "run_after",
        "unique_key",
        "failures",
        "handled"
      ])
      expect(await json(["semaphore"])).toEqual({ semaphore: "green" })
      expect(await json(["semaphore", "red"])).toEqual({ semaphore: "red" })
      expect((await query(`SELECT value FROM $schema.scheduler_meta WHERE key = 'semaphore'`))[0]!["value"]).toBe("red")
      expect(await json(["semaphore", "green"])).toEqual({ semaphore: "green" })
      expect(await json(["workers"])).toEqual([])
      expect(await json(["jobs"])).toEqual([])
      expect(await json(["runs", "5"])).toEqual([])
      expect(await json(["processed"])).toEqual([])
      // Twelve executions: the newest three by number (12, 11, 10), not by text ("9" sorts after "12").
      await query(
        `INSERT INTO $schema.processed_items
           (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
         SELECT i, 'send_email', '', 'ok', '', now(), now(), i FROM generate_series(1, 12) i`
      )
      const newest = (await query(`SELECT id FROM $schema.processed_items ORDER BY id DESC LIMIT 3`)).map(
        (r) => r["id"]
      )
      const processed = (await json(["processed", "3"])) as Array<Record<string, unknown>>
      expect(processed.map((p) => p["id"])).toEqual(newest)
      expect(processed[0]).toMatchObject({ queue_item_id: "12", task_type: "send_email", duration_ms: 12 })
      const refused = await db(["truncate"])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toBe(
        "kairos: truncate deletes every queue item, execution and run: add --yes to confirm\n"
      )
      expect(await json(["truncate", "--yes"])).toEqual({
        truncated: ["queue_items", "queue_leases", "queue_waiting", "flow_steps", "processed_items", "job_runs"]
      })
      expect(await json(["queue"])).toEqual([])
    }
  )

  // Eleven cold kairos processes one after another: ~11 s alone, over 30 s beside the suite's other files.
  it(
    "enqueue --run-after (a delay or an ISO time) and --unique-key; queue shows both; bad values are one line",
    { timeout: 90_000 },
    async () => {
      await json(["migrate"])
      const before = Date.now()
      const delayed = (await json(["enqueue", "report", "--run-after", "10m"])) as Record<string, unknown>
      const after = Date.now()
      const due = new Date(String(delayed["run_after"])).getTime()
      expect(due).toBeGreaterThanOrEqual(before + 600_000)
      expect(due).toBeLessThanOrEqual(after + 600_000)
      expect(delayed["existing"]).toBe(false)
      const at = (await json(["enqueue", "report", "--run-after", "2030-01-02T03:04:05Z"])) as Record<string, unknown>
      expect(at["run_after"]).toBe("2030-01-02T03:04:05.000Z")
      const first = await db(["enqueue", "sync", `{"id":42}`, "--unique-key", "account:42"])
      expect(first.code).toBe(0)
      expect(first.stdout).toMatch(/^enqueued (\d+) \(sync, .*unique key account:42\)\n$/)
      const id = /^enqueued (\d+)/.exec(first.stdout)![1]
      const again = await db(["enqueue", "sync", `{"id":43}`, "--unique-key", "account:42"])
      expect(again.code).toBe(0)
      expect(again.stdout).toMatch(new RegExp(`^already queued ${id} \\(sync, `))
      expect(await json(["enqueue", "sync", "--unique-key", "account:42"])).toMatchObject({
        id,
        payload: `{"id":42}`,
        unique_key: "account:42",
        existing: true
      })
      const queue = (await json(["queue"])) as Array<Record<string, unknown>>
      expect(queue.map((i) => [i["task_type"], i["run_after"], i["unique_key"]])).toEqual([
        ["report", delayed["run_after"], null],
        ["report", "2030-01-02T03:04:05.000Z", null],
        ["sync", null, "account:42"]
      ])
      const human = (await db(["queue"])).stdout.split("\n")
      expect(human[2]).toContain("2030-01-02T03:04:05.000Z")
      expect(human[3]).toMatch(/ - +account:42 /)
      for (const bad of ["soon", "0s", "2030-13-45"]) {
        const r = await db(["enqueue", "report", "--run-after", bad])
        expect(r.code).toBe(1)
        expect(r.stdout).toBe("")
        expect(r.stderr).toMatch(/^kairos: --run-after: "[^"]+" is (neither a delay|not a positive duration)[^\n]*\n$/)
      }
      await json(["truncate", "--yes"])
    }
  )

  it(
    "enqueue --retry/--backoff stores the item's policy; a tasks module's { handler, retry } retries items without one",
    { timeout: 120_000 },
    async () => {
      await json(["migrate"])
      const item = await db(["enqueue", "report", "--retry", "3", "--backoff", "exp:1s:1m"])
      expect(item.code).toBe(0)
      expect(item.stdout).toMatch(/^enqueued \d+ \(report, .*retry 3 attempts, backoff 1s doubling to 1m\)\n$/)
      const stored = await query(
        `SELECT retry_attempts, retry_backoff_ms::int AS b, retry_exponential AS e, retry_max_backoff_ms::int AS m
         FROM $schema.queue_items WHERE task_type = 'report'`
      )
      expect(stored).toEqual([{ retry_attempts: 3, b: 1000, e: true, m: 60000 }])
      expect(await json(["queue"])).toEqual([expect.objectContaining({ failures: 0, retry_attempts: 3 })])
      await json(["truncate", "--yes"])
      await query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ('flaky', 'sql')`)
      const worker = spawn(
        process.execPath,
        [
          bin,
          "worker",
          "--tasks",
          "test/fixtures/retry-tasks.ts",
          "--database-url",
          url,
          "--schema",
          schema,
          "--quiet"
        ],
        { cwd: projectRoot, stdio: ["ignore", "pipe", "pipe"] }
      )
      let output = ""
      worker.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
      worker.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
      try {
        // A cold worker loading a TypeScript tasks module takes seconds of CPU before its first claim; beside other
        // test files on two cores it once took more than 20 s to the third attempt.
        await until(
          async () =>
            (await query(`SELECT count(*)::int AS n FROM $schema.processed_items WHERE status = 'ok'`))[0]!["n"] === 1,
          60_000,
          "the third attempt succeeds",
          async () => {
            const log = await query(`SELECT status, error_msg, started_at, finished_at FROM $schema.processed_items`)
            return `the log: ${JSON.stringify(log)}; the worker said: ${output}`
          }
        )
        const log = (await json(["processed", "5"])) as Array<Record<string, unknown>>
        expect(log.map((p) => [p["status"], p["error_msg"]]).reverse()).toEqual([
          ["error", "attempt 1 failed"],
          ["error", "attempt 2 failed"],
          ["ok", ""]
        ])
        expect(await json(["queue"])).toEqual([])
      } finally {
        worker.kill("SIGTERM")
        await exited(worker)
      }
      // The tests after this one count the log's rows from empty.
      await json(["truncate", "--yes"])
    }
  )

  /** The cases run by a real process: each that loads a tasks module, and three flag errors. */
  const asProcess = new Set([
    "an unknown command",
    "a bad flag value",
    "a missing tasks module",
    "a tasks module without handlers",
    "a tasks module whose schedule does not validate",
    "a --tasks module with an invalid retry policy",
    "a --tasks module whose transactional is not a boolean",
    "a --tasks module with an invalid cron schedule",
    "a bad --interval"
  ])

  it.concurrent.each([
    ["an unknown command", ["frobnicate"], /Invalid subcommand/],
    ["a bad flag value", ["enqueue", "t", "--priority", "abc"], /'abc' is not a integer/],
    [
      "a priority beyond its integer column",
      ["enqueue", "t", "--priority", "99999999999"],
      /^--priority: 99999999999 is out of range: a whole number from -2147483648 to 2147483647\n/
    ],
    [
      "a max-runs beyond its integer column",
      ["enqueue", "t", "--max-runs", "-2147483649"],
      /^--max-runs: -2147483649 is out of range: a whole number from -2147483648 to 2147483647\n/
    ],
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
      "a --tasks module with an invalid retry policy",
      ["worker", "--tasks", "test/fixtures/bad-retry-tasks.ts"],
      /^kairos: --tasks test\/fixtures\/bad-retry-tasks\.ts: "t": invalid retry: attempts must be a whole number from 1 to 1000, got 0\n$/
    ],
    [
      "a --tasks module whose transactional is not a boolean",
      ["worker", "--tasks", "test/fixtures/bad-transactional-tasks.ts"],
      /^kairos: --tasks test\/fixtures\/bad-transactional-tasks\.ts: "t": transactional must be true or false\n$/
    ],
    [
      "--backoff without --retry",
      ["enqueue", "t", "--backoff", "30s"],
      /^kairos: --backoff needs --retry: how many attempts a run may take\n$/
    ],
    [
      "a bad --retry",
      ["enqueue", "t", "--retry", "0"],
      /^kairos: --retry: attempts must be a whole number from 1 to 1000, got 0\n$/
    ],
    [
      "a bad --backoff",
      ["enqueue", "t", "--retry", "3", "--backoff", "exp:1m:1s"],
      /^kairos: --backoff: max must be at least the first delay, got "1s"\n$/
    ],
    [
      "a --tasks module with an invalid cron schedule",
      ["worker", "--tasks", "test/fixtures/bad-cron-tasks.ts"],
      /^kairos: --tasks test\/fixtures\/bad-cron-tasks\.ts: schedule "broken": expression: cron "61 \* \* \* \*": minute: 61 is out of range 0-59\n$/
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
    ],
    [
      "a --database-url that is not a URL",
      ["queue", "--database-url", "foo"],
      /^kairos: --database-url: "foo" is not a postgres:\/\/ URL \(e\.g\. postgres:\/\/user:password@localhost:5432\/mydb\)\n$/
    ],
    [
      "a bad --timeout",
      ["worker", "--tasks", "examples/tasks.ts", "--timeout", "soon"],
      /^kairos: --timeout: "soon" is not a duration \(use e\.g\. "30 seconds" or "30s"\)\n$/
    ],
    [
      "a bad --lease",
      ["worker", "--tasks", "examples/tasks.ts", "--lease", "-5s"],
      /^kairos: --lease: "-5s" is not a positive duration/
    ],
    [
      "a zero --concurrency",
      ["worker", "--tasks", "examples/tasks.ts", "--concurrency", "0"],
      /^--concurrency: 0 is out of range: a whole number of at least 1\n/
    ],
    [
      "a zero --batch",
      ["worker", "--tasks", "examples/tasks.ts", "--batch", "0"],
      /^--batch: 0 is out of range: a whole number of at least 1\n/
    ],
    [
      "a negative --rate-limit",
      ["worker", "--tasks", "examples/tasks.ts", "--rate-limit", "-1"],
      /^--rate-limit: -1 is out of range: a whole number of at least 0\n/
    ],
    [
      "a zero --grace",
      ["worker", "--tasks", "examples/tasks.ts", "--grace", "0ms"],
      /^kairos: --grace: "0ms" is not a positive duration/
    ]
  ])(
    "%s: one clear line, non-zero exit, no stack trace",
    { timeout: PROCESS_LIMITS.testMs },
    async (name, args, pattern) => {
      const withUrl = args.includes("--database-url") ? args : [...args, "--database-url", url]
      // A flag's error comes from the CLI's program alone: run here (kairosHere), without a process start each (a
      // worker's start alone is ~1.4 s of CPU). A tasks module is loaded (through tsx) by a real process, which alone
      // shows what Node or tsx would print besides; and three flag errors go through the binary as a user meets them.
      // Those processes start side by side (vitest runs five of these tests at once) beside the other files: in CI's
      // loaded first pass one took 31 s (alone ~2 s), and with twenty workers at full priority beside it one ran past
      // 60 s. Each is killed before its test's limit (PROCESS_LIMITS), so a hang fails with what the process was doing.
      const r = asProcess.has(name)
        ? await kairos(withUrl, { timeoutMs: PROCESS_LIMITS.processMs })
        : await kairosHere(withUrl)
      expect(r.code).not.toBe(0)
      expect(r.stdout + r.stderr).toMatch(pattern)
      expect(r.stdout + r.stderr).not.toMatch(/\n\s+at /)
    }
  )

  it(
    "a password server: no password, a wrong one, a missing database, missing tables; a worker's queue=? when it goes",
    { timeout: 240_000 },
    async () => {
      const server = await startEmbedded({ password: "right horse battery" })
      const secret = encodeURIComponent("right horse battery")
      try {
        // The login without a password must end at once, not at the server's authentication_timeout: ten minutes
        // here (a minute by default), so that the bound below can be wide for a loaded machine and still tell them
        // apart (beside four other test files on two cores it took 36 s).
        const admin = new pg.Client({ connectionString: server.url })
        await admin.connect()
        await admin.query("ALTER SYSTEM SET authentication_timeout = '10min'")
        await admin.query("SELECT pg_reload_conf()")
        await admin.end()
        const noPassword = server.url.replace(`:${secret}@`, "@")
        const wrong = server.url.replace(secret, "wrong")
        const noDatabase = server.url.replace(/\/postgres$/, "/shop")
        const quickstart = async () => {
          const child = spawnTs("examples/quickstart.ts", [], {
            env: { ...process.env, DATABASE_URL: server.url, KAIROS_QUICKSTART_SECONDS: "1" }
          })
          try {
            return await firstLine(child)
          } finally {
            child.kill("SIGKILL")
          }
        }
        const started = Date.now()
        const [said, none, bad, missing, tables] = await Promise.all([
          quickstart(),
          kairos(["queue", "--database-url", noPassword]),
          kairos(["queue", "--database-url", wrong]),
          kairos(["queue", "--database-url", noDatabase]),
          kairos(["queue", "--database-url", server.url, "--schema", "nosuch"])
        ])
        // The login without a password ends at once: the server's authentication_timeout is not waited for
        // (node-postgres left that socket open; see EndingClient).
        expect(Date.now() - started).toBeLessThan(120_000)
        const at = `127\\.0\\.0\\.1:${server.port}`
        expect(none.stderr).toMatch(
          new RegExp(
            `^kairos: the server at ${at}/postgres asks for a password: put it in the URL \\(postgres://user:password@host/db\\)\\n$`
          )
        )
        expect(bad.stderr).toMatch(
          new RegExp(`^kairos: cannot log in to ${at}/postgres: password authentication failed for user "postgres"\\n$`)
        )
        expect(missing.stderr).toMatch(
          new RegExp(
            `^kairos: database "shop" does not exist on ${at}: create it with \`createdb shop\` \\(or CREATE DATABASE "shop"\\), or name another database in the URL\\n$`
          )
        )
        // The suggested command repeats the schema and the URL, its password hidden.
        expect(tables.stderr).toBe(
          `kairos: kairos's tables are missing in schema "nosuch": run \`kairos migrate --schema nosuch --database-url postgres://postgres:***@127.0.0.1:${server.port}/postgres\`\n`
        )
        for (const r of [none, bad, missing, tables]) expect(r.code).toBe(1)
        // `npm start` with DATABASE_URL says which database and schema it writes into, its password hidden.
        expect(said).toBe(
          `quickstart: database postgres://postgres:***@127.0.0.1:${server.port}/postgres, schema "public"`
        )
        // A worker whose database goes away shows the queue depth as unknown, not -1.
        const worker = live(["worker", "--tasks", "test/fixtures/cli-tasks.ts", "--database-url", server.url, "--json"])
        try {
          await worker.waitFor(/"event":"status"[^\n]*"queue":0/)
          await server.stop()
          await worker.waitFor(/"event":"status"[^\n]*"queue":null/, "out", 20_000)
        } finally {
          worker.child.kill("SIGKILL")
        }
      } finally {
        await server.stop()
      }
    }
  )

  it("a failed migration: one line naming the migration and the database's reason", { timeout: 60_000 }, async () => {
    const conflicted = uniqueSchemaName("cli_conflict")
    await query(`CREATE SCHEMA $schema; CREATE TABLE $schema.queue_items (x int)`, conflicted)
    try {
      const r = await db(["migrate"], conflicted)
      expect(r.code).toBe(1)
      expect(r.stderr).toBe(
        `kairos: migration 0002_queue failed: relation "queue_items" already exists (SQLSTATE 42P07)\n`
      )
    } finally {
      await query(`DROP SCHEMA $schema CASCADE`, conflicted)
    }
  })

  it("an unreachable database: one line naming the fix (--verbose shows the cause)", { timeout: 60_000 }, async () => {
    const [unreachable, verbose] = await Promise.all([
      kairos(["queue", "--database-url", "postgres://postgres@127.0.0.1:1/x"]),
      kairos(["queue", "--database-url", "postgres://postgres@127.0.0.1:1/x", "--verbose"])
    ])
    expect(unreachable.code).toBe(1)
    expect(unreachable.stderr).toBe(
      "kairos: cannot reach the database at 127.0.0.1:1/x (connection refused): is Postgres running? set DATABASE_URL or --database-url\n"
    )
    expect(verbose.stderr.split("\n").length).toBeGreaterThan(2)
  })
})
