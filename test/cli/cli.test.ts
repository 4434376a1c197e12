/**
 * The kairos command line, spawned as a real process against a real Postgres, checked by exit code and output.
 * Integration: real processes, signals and wall time.
 */
import { spawn } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"
import { startEmbedded } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { exited, firstLine, projectRoot, run as runCommand, spawnTs } from "../support/process.js"
import { migratedSchema, until } from "../support/workers.js"
import pg from "pg"

const bin = path.join(projectRoot, "bin/kairos.js")
let url = ""
const schema = uniqueSchemaName("cli")

// Without blocking the test file's event loop (see `run` in test/support/process.ts): independent commands run side
// by side.
const kairos = async (args: ReadonlyArray<string>, options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) => {
  const run = await runCommand(process.execPath, [bin, ...args], {
    cwd: options.cwd ?? projectRoot,
    env: options.env ?? process.env,
    timeout: 60_000
  })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}
/** A long-running `kairos` process whose output can be awaited line by line. */
const live = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env) => {
  const child = spawn(process.execPath, [bin, ...args], { cwd: projectRoot, env, stdio: ["ignore", "pipe", "pipe"] })
  let out = ""
  let err = ""
  const waiters: Array<() => void> = []
  const notify = () => {
    for (const w of waiters.splice(0)) w()
  }
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString()
    notify()
  })
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString()
    notify()
  })
  child.on("exit", notify)
  /** Resolves once stdout (or stderr) matches `pattern`; fails when the process exits first or after `ms`. */
  const waitFor = (pattern: RegExp, stream: "out" | "err" = "out", ms = 30_000) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${pattern} in ${ms} ms:\n${out}\n${err}`)), ms)
      const check = () => {
        const match = (stream === "out" ? out : err).match(pattern)
        if (match !== null) {
          clearTimeout(timer)
          resolve(match)
        } else if (child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer)
          reject(new Error(`exited (${child.exitCode ?? child.signalCode}) without ${pattern}:\n${out}\n${err}`))
        } else waiters.push(check)
      }
      check()
    })
  /** The JSON lines printed so far. */
  const events = () =>
    out
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
  return { child, out: () => out, err: () => err, waitFor, events }
}

const db = (args: ReadonlyArray<string>, inSchema = schema) =>
  kairos([...args, "--database-url", url, "--schema", inSchema])
const json = async (args: ReadonlyArray<string>, inSchema = schema) => {
  const r = await db([...args, "--json"], inSchema)
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
      expect(await json(["migrate"])).toEqual({
        schema,
        applied: [
          "0001_scheduled_jobs",
          "0002_queue",
          "0003_pipeline",
          "0004_lean_leases",
          "0005_bad_rows",
          "0006_unfinished_runs",
          "0007_delayed_unique_items",
          "0008_retention",
          "0009_item_retries",
          "0010_claim_by_index",
          "0011_record_and_claim_next",
          "0012_normalize_when_needed",
          "0013_lighter_claims_and_records",
          "0014_row_leases",
          "0015_lighter_row_lease_records",
          "0016_sequential_row_leases",
          "0017_record_successes_first"
        ]
      })
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
      expect(await json(["truncate", "--yes"])).toEqual({ truncated: ["queue_items", "processed_items", "job_runs"] })
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
      try {
        await until(
          async () =>
            (await query(`SELECT count(*)::int AS n FROM $schema.processed_items WHERE status = 'ok'`))[0]!["n"] === 1,
          20_000,
          "the third attempt succeeds"
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

  it(
    "worker runs SQL-inserted items and a schedule from its tasks module, and stops on SIGTERM with nothing processing",
    { timeout: 120_000 },
    async () => {
      await json(["migrate"])
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
          "--json",
          "--quiet"
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
        // The heartbeat's first slot is 10 s after the worker starts, and a cold worker loading its TypeScript tasks
        // module takes ~2.5 s alone: 20 s left too little on a loaded machine (CI's second pass timed out once).
        40_000,
        "five processed items and a successful heartbeat run"
      )
      const processed = (await json(["processed", "10"])) as Array<Record<string, unknown>>
      expect(processed.length).toBe(5)
      expect(processed.every((p) => p["status"] === "ok" && p["task_type"] === "send_email")).toBe(true)
      const human = await db(["processed", "1"])
      expect(human.stdout.split("\n")[0]!.split(/\s+/)).toEqual([
        "id",
        "item",
        "task_type",
        "status",
        "duration_ms",
        "started_at",
        "error"
      ])
      const jobs = (await json(["jobs"])) as Array<Record<string, unknown>>
      expect(jobs.map((j) => j["name"])).toEqual(["heartbeat", "nightly-cleanup"])
      const runs = (await json(["runs"])) as Array<Record<string, unknown>>
      expect(runs.some((r) => r["job"] === "heartbeat" && r["status"] === "success")).toBe(true)
      const workers = (await json(["workers"])) as Array<Record<string, unknown>>
      expect(workers.length).toBe(1)
      expect([...(workers[0]!["task_types"] as Array<string>)].sort()).toEqual(["cleanup", "send_email"])
      expect(JSON.parse(out.split("\n")[0]!)).toMatchObject({ event: "started" })
      worker.kill("SIGTERM")
      const exit = await exited(worker)
      expect(exit.code).toBe(0)
      expect(err).toBe("")
      // --quiet: no line per execution, no handler logs (the heartbeat job's Effect.log); the rest stays.
      const events = out
        .trimEnd()
        .split("\n")
        .map((l) => (JSON.parse(l) as { event: string }).event)
      expect(events).not.toContain("execution")
      expect(events).not.toContain("log")
      expect(events).toContain("stopped")
      expect(await query(`SELECT 1 FROM $schema.queue_items WHERE status = 'processing'`)).toEqual([])
      expect(await json(["workers"])).toEqual([])
    }
  )

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
      "a zero --grace",
      ["worker", "--tasks", "examples/tasks.ts", "--grace", "0ms"],
      /^kairos: --grace: "0ms" is not a positive duration/
    ]
  ])("%s: one clear line, non-zero exit, no stack trace", { timeout: 60_000 }, async (_name, args, pattern) => {
    const r = await kairos(args.includes("--database-url") ? args : [...args, "--database-url", url])
    expect(r.code).not.toBe(0)
    expect(r.stdout + r.stderr).toMatch(pattern)
    expect(r.stdout + r.stderr).not.toMatch(/\n\s+at /)
  })

  it(
    "worker: a line per execution and handler logs; the first SIGINT says what it waits for, the second forces",
    { timeout: 90_000 },
    async () => {
      const own = await migratedSchema("cli_sigint")
      const [ok, boom] = (
        await own.query<{ id: string }>(
          `INSERT INTO $schema.queue_items (task_type) VALUES ('ok'), ('boom') RETURNING id::text AS id`
        )
      ).map((r) => r.id)
      const worker = live([
        "worker",
        "--tasks",
        "test/fixtures/cli-tasks.ts",
        "--database-url",
        url,
        "--schema",
        own.schema
      ])
      try {
        await worker.waitFor(new RegExp(`^Completed ok item ${ok} \\(attempt 1\\) in \\d+ms$`, "m"))
        await worker.waitFor(new RegExp(`^Failed boom item ${boom} \\(attempt 1\\) after \\d+ms: kaboom$`, "m"))
        // The handler's Effect.log, at info level, with the execution it belongs to.
        expect(worker.out()).toMatch(new RegExp(`^info: \\[ok ${ok}\\] hello from the handler$`, "m"))
        await own.query(`INSERT INTO $schema.queue_items (task_type) VALUES ('slow')`)
        await worker.waitFor(/^slow: started$/m)
        worker.child.kill("SIGINT")
        // Said at once, not after the grace period (30 s).
        await worker.waitFor(/^stopping: waiting for 1 running \(Ctrl-C again forces\)$/m, "out", 10_000)
        expect(worker.child.exitCode).toBeNull()
        const forcedAt = Date.now()
        worker.child.kill("SIGINT")
        const exit = await exited(worker.child)
        expect(Date.now() - forcedAt).toBeLessThan(10_000)
        expect(exit.code).toBe(130)
        expect(worker.err()).toContain("kairos: forced stop")
      } finally {
        worker.child.kill("SIGKILL")
        await own.close()
      }
    }
  )

  it(
    "worker --json: one event per execution and per handler log, snake_case; --timeout, --lease and --grace apply",
    { timeout: 90_000 },
    async () => {
      const own = await migratedSchema("cli_events")
      const ids = (
        await own.query<{ id: string }>(
          `INSERT INTO $schema.queue_items (task_type) VALUES ('ok'), ('boom'), ('slow') RETURNING id::text AS id`
        )
      ).map((r) => r.id)
      const worker = live([
        "worker",
        "--tasks",
        "test/fixtures/cli-tasks.ts",
        "--database-url",
        url,
        "--schema",
        own.schema,
        "--json",
        "--timeout",
        "3s",
        "--lease",
        "7s",
        "--grace",
        "1s"
      ])
      try {
        // The slow item runs into --timeout 3s.
        await worker.waitFor(/"event":"execution"[^\n]*"task_type":"slow"/)
        const started = worker.events().find((e) => e["event"] === "started")
        expect(started).toMatchObject({
          task_types: ["ok", "boom", "slow"],
          timeout_ms: 3000,
          lease_ms: 7000,
          grace_ms: 1000
        })
        const executions = worker.events().filter((e) => e["event"] === "execution")
        const byType = (t: string) => executions.find((e) => e["task_type"] === t)
        expect(byType("ok")).toEqual({
          event: "execution",
          kind: "queue",
          task_type: "ok",
          id: ids[0],
          name: "ok",
          attempt: 1,
          outcome: "ok",
          duration_ms: expect.any(Number),
          error: null,
          at: expect.any(String)
        })
        expect(byType("boom")).toMatchObject({ id: ids[1], outcome: "failed", error: "kaboom" })
        expect(byType("slow")).toMatchObject({
          id: ids[2],
          outcome: "failed",
          error: "timed out after 3s: the handler was interrupted"
        })
        expect(worker.events()).toContainEqual(
          expect.objectContaining({
            event: "log",
            level: "info",
            message: "hello from the handler",
            task_type: "ok",
            job_id: ids[0]
          })
        )
        // --lease 7s: the lease written for a running item.
        await own.query(`INSERT INTO $schema.queue_items (task_type) VALUES ('slow')`)
        let leaseSeconds = 0
        await until(
          async () => {
            const rows = await own.query<{ s: number }>(
              // A run-once item's lease is on its row (a run more than once holds a lease row).
              `SELECT extract(epoch FROM lease_until - now())::float8 AS s FROM $schema.queue_items
               WHERE lease_token IS NOT NULL
               UNION ALL SELECT extract(epoch FROM lease_until - now())::float8 FROM $schema.queue_leases`
            )
            leaseSeconds = rows[0]?.s ?? 0
            return rows.length > 0
          },
          20_000,
          "the second slow item to start"
        )
        await worker.waitFor(/slow: started[\s\S]*slow: started/)
        expect(leaseSeconds).toBeGreaterThan(4)
        expect(leaseSeconds).toBeLessThanOrEqual(7.5)
        // --grace 1s: the stop interrupts the slow handler after a second (not 30), and hands it back.
        const stopAt = Date.now()
        worker.child.kill("SIGINT")
        const exit = await exited(worker.child)
        expect(Date.now() - stopAt).toBeLessThan(2900)
        expect(exit.code).toBe(0)
        // Logs (the grace period's warning) and status lines aside.
        const tail = worker
          .events()
          .filter((e) => e["event"] !== "log" && e["event"] !== "status")
          .slice(-3)
        expect(tail.map((e) => e["event"])).toEqual(["stopping", "execution", "stopped"])
        expect(tail[0]).toMatchObject({ signal: "SIGINT", running: 1 })
        expect(tail[1]).toMatchObject({ task_type: "slow", outcome: "interrupted", duration_ms: null })
        // An interrupted execution counts as failed.
        expect(tail[2]).toMatchObject({ claimed: 4, ok: 1, failed: 3 })
        expect(worker.err()).toBe("")
      } finally {
        worker.child.kill("SIGKILL")
        await own.close()
      }
    }
  )

  it(
    "a password server: no password, a wrong one, a missing database, missing tables; a worker's queue=? when it goes",
    { timeout: 90_000 },
    async () => {
      const server = await startEmbedded({ password: "right horse battery" })
      const secret = encodeURIComponent("right horse battery")
      try {
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
        // The login without a password ends at once: the server's authentication_timeout (a minute) is not waited
        // for (node-postgres left that socket open; see EndingClient).
        expect(Date.now() - started).toBeLessThan(30_000)
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

describe("kairos jobs and workers: a worker is live while its live_until lies ahead", () => {
  // A schema of their own: the tests above expect exactly their own jobs and workers.
  const liveSchema = uniqueSchemaName("cli_live")
  const header = (r: { stdout: string }) => r.stdout.split("\n")[0]!.split(/\s+/)
  /** The row whose second column (after the id) is `name`. */
  const line = (r: { stdout: string }, name: string) =>
    r.stdout.split("\n").find((l) => l.split(/\s+/)[1] === name) ?? ""

  beforeAll(async () => {
    await json(["migrate"], liveSchema)
  })
  afterAll(async () => {
    await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, liveSchema)
  })

  it("jobs: unhandled until a live worker lists the job's task type; a bad stored schedule still lists", async () => {
    await query(
      `INSERT INTO $schema.scheduled_jobs (name, task_type, schedule) VALUES
         ('report', 'make_report', '{"_tag":"Interval","everyMillis":60000}'),
         ('broken', 'make_report', '{"_tag":"Hourly"}'),
         ('weekdays', 'make_report', '{"_tag":"Cron","expression":"0 9 * * MON-FRI","tz":"Europe/Paris"}')`,
      liveSchema
    )
    const jobs = async () => (await json(["jobs"], liveSchema)) as Array<Record<string, unknown>>
    expect(await jobs()).toEqual([
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
      },
      {
        id: expect.any(String),
        name: "weekdays",
        task_type: "make_report",
        schedule: { _tag: "Cron", expression: "0 9 * * MON-FRI", tz: "Europe/Paris" },
        enabled: true,
        next_run_at: null,
        handled: false
      }
    ])
    const unhandled = await db(["jobs"], liveSchema)
    expect(unhandled.code).toBe(0)
    expect(header(unhandled)).toEqual(["id", "name", "task_type", "schedule", "enabled", "next_run_at", "handled"])
    expect(line(unhandled, "report")).toMatch(/every 1m.*\sno \(no live worker\)$/)
    expect(line(unhandled, "broken")).toMatch(/invalid: \{"_tag":"Hourly"\}.*\sno \(no live worker\)$/)
    expect(line(unhandled, "weekdays")).toMatch(/cron "0 9 \* \* MON-FRI" \(Europe\/Paris\).*\sno \(no live worker\)$/)
    // A fresh heartbeat does not make a worker live once its live_until has passed.
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, heartbeat_at, live_until)
       VALUES ('gone', '{make_report}', now(), now() - interval '1 second')`,
      liveSchema
    )
    expect((await jobs()).map((j) => j["handled"])).toEqual([false, false, false])
    // A live worker that lacks the task type: the table says so, apart from "no live worker" at all.
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, live_until)
       VALUES ('other-only', '{other}', now() + interval '5 minutes')`,
      liveSchema
    )
    expect(line(await db(["jobs"], liveSchema), "report")).toMatch(/\sno \(no live worker handles it\)$/)
    await query(`DELETE FROM $schema.scheduler_workers WHERE id = 'other-only'`, liveSchema)
    await query(
      `INSERT INTO $schema.scheduler_workers (id, task_types, live_until)
       VALUES ('live', '{other,make_report}', now() + interval '5 minutes')`,
      liveSchema
    )
    expect((await jobs()).map((j) => j["handled"])).toEqual([true, true, true])
    const handled = await db(["jobs"], liveSchema)
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
    expect(await json(["workers"], liveSchema)).toEqual([
      {
        id: "w-live",
        task_types: ["send_email", "cleanup"],
        started_at: expect.any(String),
        heartbeat_at: expect.any(String)
      }
    ])
    const human = await db(["workers"], liveSchema)
    expect(human.code).toBe(0)
    expect(header(human)).toEqual(["id", "task_types", "started_at", "heartbeat_at"])
    expect(human.stdout).toContain("w-live  send_email,cleanup")
    expect(human.stdout).not.toContain("w-gone")
    // The queue judges "handled" by the same rule.
    await query(`INSERT INTO $schema.queue_items (task_type) VALUES ('send_email')`, liveSchema)
    expect(((await json(["queue"], liveSchema)) as Array<Record<string, unknown>>).map((i) => i["handled"])).toEqual([
      true
    ])
    await query(`INSERT INTO $schema.queue_items (task_type) VALUES ('nobody')`, liveSchema)
    const rows = (await db(["queue"], liveSchema)).stdout.split("\n")
    expect(rows.find((r) => r.includes(" nobody "))).toMatch(/\sno \(no live worker handles it\)$/)
    expect(rows.find((r) => r.includes(" send_email "))).toMatch(/\syes$/)
    await query(`DELETE FROM $schema.queue_items WHERE task_type = 'nobody'`, liveSchema)
    await query(`UPDATE $schema.scheduler_workers SET live_until = now() - interval '1 second'`, liveSchema)
    expect(await json(["workers"], liveSchema)).toEqual([])
    expect(((await json(["queue"], liveSchema)) as Array<Record<string, unknown>>).map((i) => i["handled"])).toEqual([
      false
    ])
  })
})

describe("kairos tables: what any program wrote reaches the terminal escaped", () => {
  const hostileSchema = uniqueSchemaName("cli_hostile")
  // ESC sequences that would clear the screen and retitle the terminal, a newline, a C1 CSI, a bidi override.
  const evil = "evil\u001b[2J\u001b]0;pwned\u0007\nnext\u009b31m\u202e"
  beforeAll(async () => {
    await json(["migrate"], hostileSchema)
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

  it.each(["queue", "jobs", "processed"])(
    "%s: control characters escaped, long cells cut; --json exact",
    async (command) => {
      const human = await db([command], hostileSchema)
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
      const doc = await db([command, "--json"], hostileSchema)
      expect(doc.stdout.trimEnd()).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202e]/)
      const rows = JSON.parse(doc.stdout) as Array<Record<string, unknown>>
      expect(rows[0]!["task_type"] ?? rows[0]!["taskType"]).toBe(evil)
    }
  )
})

describe("kairos db (the embedded development database)", () => {
  it(
    "starts on first use in the project's .kairos, found from a subfolder too; `db start` prints its URL, `db stop` stops it",
    { timeout: 120_000 },
    async () => {
      const cwd = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-cli-dev-"))
      await fs.chmod(cwd, 0o755)
      await fs.writeFile(path.join(cwd, "package.json"), "{}\n")
      const sub = path.join(cwd, "src", "deep")
      await fs.mkdir(sub, { recursive: true })
      const env = { ...process.env }
      delete env["DATABASE_URL"]
      const dataDir = path.join(cwd, ".kairos")
      try {
        const first = await kairos(["migrate", "--json"], { cwd, env })
        expect(first.code).toBe(0)
        expect(first.stderr).toContain("started the development database")
        // From a subfolder: the project's database, not a second one in src/deep/.kairos.
        const [status, second] = await Promise.all([
          kairos(["db", "status", "--json"], { cwd: sub, env }),
          kairos(["enqueue", "t", "--json"], { cwd: sub, env })
        ])
        expect(JSON.parse(status.stdout)).toMatchObject({ running: true, data_dir: dataDir })
        expect(second.code).toBe(0)
        expect(second.stderr).toBe("")
        expect(JSON.parse((await kairos(["db", "stop", "--json"], { cwd: sub, env })).stdout)).toEqual({
          stopped: true
        })
        expect(JSON.parse((await kairos(["db", "status", "--json"], { cwd, env })).stdout)).toMatchObject({
          running: false
        })
        const started = await kairos(["db", "start", "--json"], { cwd: sub, env })
        expect(JSON.parse(started.stdout)).toEqual({
          running: true,
          started: true,
          url: expect.stringMatching(/^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/),
          data_dir: dataDir
        })
        // Data is kept: the item enqueued before the stop is there.
        expect(JSON.parse((await kairos(["queue", "--json"], { cwd, env })).stdout)).toHaveLength(1)
        await expect(fs.stat(path.join(sub, ".kairos"))).rejects.toThrow()
      } finally {
        await kairos(["db", "stop"], { cwd, env })
        await fs.rm(cwd, { recursive: true, force: true })
      }
    }
  )
})

describe("kairos --help", () => {
  /** The description lines under each option (`--name ...`) of a help text. */
  const descriptions = (help: string): Map<string, Array<string>> => {
    const out = new Map<string, Array<string>>()
    let current: Array<string> | undefined
    for (const line of help.split("\n")) {
      const header = /^(--[\w-]+)/.exec(line)
      if (header !== null) out.set(header[1]!, (current = []))
      else if (/^\S/.test(line)) current = undefined
      else if (current !== undefined && line.trim() !== "") current.push(line.trim())
    }
    return out
  }
  // What @effect/cli says of any option: not a description of this one.
  const generic =
    /^(A user-defined piece of text\.|An integer\.|A true or false value\.|This setting is optional\.|One of the following: .*)$/

  it("plain text when piped, usage with the whole command, every option described", { timeout: 60_000 }, async () => {
    const [top, enqueue, worker, dbStatus, other] = await Promise.all([
      kairos(["--help"]),
      kairos(["enqueue", "--help"]),
      kairos(["worker", "--help"]),
      kairos(["db", "status", "--help"]),
      kairos(["processed", "--help"])
    ])
    for (const r of [top, enqueue, worker, dbStatus, other]) {
      expect(r.code).toBe(0)
      expect(r.stdout + r.stderr).not.toContain("\u001b")
    }
    expect(top.stdout).toMatch(/^\$ kairos$/m)
    for (const command of ["migrate", "worker", "enqueue", "queue", "processed", "jobs", "runs", "semaphore"])
      expect(top.stdout).toMatch(new RegExp(`^  - ${command} `, "m"))
    for (const command of ["db status", "db start", "db stop"]) expect(top.stdout).toContain(`  - ${command} `)
    expect(enqueue.stdout).toMatch(/^\$ kairos enqueue \[--database-url URL\]/m)
    expect(dbStatus.stdout).toMatch(/^\$ kairos db status \[--json\] \[--verbose\]$/m)
    expect(other.stdout).toMatch(/^\$ kairos processed /m)
    const expected: ReadonlyArray<[string, ReadonlyArray<string>]> = [
      [enqueue.stdout, ["--database-url", "--schema", "--json", "--verbose", "--priority", "--max-runs", "--thread"]],
      [
        worker.stdout,
        [
          "--tasks",
          "--concurrency",
          "--interval",
          "--batch",
          "--rate-limit",
          "--timeout",
          "--lease",
          "--grace",
          "--quiet",
          "--verbose"
        ]
      ],
      [dbStatus.stdout, ["--json", "--verbose"]]
    ]
    for (const [help, flags] of expected) {
      const described = descriptions(help)
      for (const flag of flags) {
        expect(
          (described.get(flag) ?? []).filter((l) => !generic.test(l)),
          flag
        ).not.toEqual([])
      }
    }
    // Each option says what it is, once: its own line, none of @effect/cli's filler under it (nor under arguments).
    for (const help of [enqueue.stdout, worker.stdout, dbStatus.stdout, other.stdout]) {
      for (const [flag, lines] of descriptions(help)) expect([flag, lines.length]).toEqual([flag, 1])
      for (const line of help.split("\n")) expect(line.trim()).not.toMatch(generic)
    }
  })

  it(
    "kairos enqueue --help piped into a file: one description per argument and option",
    { timeout: 60_000 },
    async () => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-help-"))
      try {
        const file = path.join(dir, "help.txt")
        const out = await fs.open(file, "w")
        const child = spawn(process.execPath, [bin, "enqueue", "--help"], {
          cwd: projectRoot,
          stdio: ["ignore", out.fd, "inherit"]
        })
        expect((await exited(child)).code).toBe(0)
        await out.close()
        const help = await fs.readFile(file, "utf8")
        const options = help.slice(help.indexOf("\nOPTIONS\n"))
        expect(options).toContain("--priority N\n\n  higher runs first (default 0)\n\n--max-runs N\n")
        expect(help).toContain("<taskType>\n\n  the task type: which handler runs the item\n\n<payload>\n")
        expect(help).not.toMatch(
          /A user-defined piece of text|This setting is optional|An integer\.|A true or false value/
        )
      } finally {
        await fs.rm(dir, { recursive: true, force: true })
      }
    }
  )
})

describe("a tasks module outside any project", () => {
  it.each(["tasks.ts", "tasks.mjs"])(
    "%s imports kairos and effect, which it never installed: they resolve from the CLI's package and it runs",
    { timeout: 60_000 },
    async (file) => {
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-outside-"))
      const inSchema = uniqueSchemaName("outside")
      try {
        const typed = file.endsWith(".ts")
        await fs.writeFile(
          path.join(dir, file),
          `import { Effect } from "effect"
import { Schedule } from "kairos"
export const schedules = [
  { name: "hourly", taskType: "hello", schedule: Schedule.interval({ every: "1 hour" }) },
  { name: "weekdays", taskType: "hello", schedule: Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" }) }
]
export default { hello: (job${typed ? ": { payload: string }" : ""}) => Effect.log("hello " + job.payload) }
`
        )
        expect((await db(["migrate"], inSchema)).code).toBe(0)
        expect((await db(["enqueue", "hello", "outside"], inSchema)).code).toBe(0)
        const worker = live(["worker", "--tasks", path.join(dir, file), "--database-url", url, "--schema", inSchema])
        try {
          // The handler's Effect.log line: effect resolved, and the module's handler ran the item.
          await worker.waitFor(/hello outside/)
          await worker.waitFor(/Completed hello item \d+/)
        } finally {
          worker.child.kill("SIGTERM")
        }
        expect((await exited(worker.child)).code).toBe(0)
        expect(worker.err()).toBe("")
        // Its schedules (built with kairos's Schedule, a cron one among them) were defined.
        const defined = (await json(["jobs"], inSchema)) as Array<{ name: string; schedule: unknown }>
        expect(defined.map((j) => [j.name, j.schedule])).toEqual([
          ["hourly", { _tag: "Interval", everyMillis: 3_600_000 }],
          ["weekdays", { _tag: "Cron", expression: "0 9 * * MON-FRI", tz: "Europe/Paris" }]
        ])
      } finally {
        await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, inSchema)
        await fs.rm(dir, { recursive: true, force: true })
      }
    }
  )
})

describe("kairos jobs run|pause|resume", () => {
  it(
    "a live worker polling every 30 s runs a fired job at once; pause keeps its slots from starting, resume lets them",
    { timeout: 90_000 },
    async () => {
      const inSchema = uniqueSchemaName("jobctl")
      try {
        expect((await db(["migrate"], inSchema)).code).toBe(0)
        // examples/tasks.ts defines nightly-cleanup (daily at 03:00 Berlin) and heartbeat (every 10 s).
        const worker = live([
          "worker",
          "--tasks",
          "examples/tasks.ts",
          "--interval",
          "30s",
          "--database-url",
          url,
          "--schema",
          inSchema
        ])
        try {
          await worker.waitFor(/kairos worker /)
          // Pause the heartbeat before its first slot is due (10 s after the worker defined it).
          const paused = await db(["jobs", "pause", "heartbeat"], inSchema)
          expect(paused.stderr).toBe("")
          expect(paused.stdout).toMatch(/^paused heartbeat: /)
          const listed = (await json(["jobs"], inSchema)) as Array<{ name: string; enabled: boolean }>
          expect(listed.map((j) => [j.name, j.enabled]).sort()).toEqual([
            ["heartbeat", false],
            ["nightly-cleanup", true]
          ])
          // Fired now: the worker is woken (NOTIFY), long before its next 30 s poll.
          const fired = (await json(["jobs", "run", "nightly-cleanup"], inSchema)) as { run_id: string; status: string }
          expect(fired.status).toBe("pending")
          const firedAt = Date.now()
          await worker.waitFor(/Completed cleanup job nightly-cleanup \(attempt 1\)/, "out", 20_000)
          expect(Date.now() - firedAt).toBeLessThan(10_000)
          // The heartbeat stays paused: no run of it, though its 10 s slot has passed.
          await until(async () => Date.now() - firedAt > 11_000, 15_000, "the heartbeat's first slot to pass")
          const before = (await query(
            `SELECT count(*)::int AS n FROM $schema.job_runs r JOIN $schema.scheduled_jobs j ON j.id = r.job_id WHERE j.name = 'heartbeat'`,
            inSchema
          )) as Array<{ n: number }>
          expect(before[0]!.n).toBe(0)
          expect((await db(["jobs", "resume", "heartbeat"], inSchema)).stdout).toMatch(/^resumed heartbeat: next slot /)
          await worker.waitFor(/Completed cleanup job heartbeat/, "out", 20_000)
        } finally {
          worker.child.kill("SIGTERM")
        }
        expect((await exited(worker.child)).code).toBe(0)
        const unknown = await db(["jobs", "run", "no-such-job"], inSchema)
        expect(unknown.code).toBe(1)
        expect(unknown.stderr).toBe('kairos: no job named "no-such-job": `kairos jobs` lists them\n')
      } finally {
        await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, inSchema)
      }
    }
  )
})

describe("kairos cancel and retry", () => {
  it("cancel removes a pending item; retry enqueues an execution's task type and payload again; bad ids", async () => {
    const inSchema = uniqueSchemaName("cancel")
    try {
      expect((await db(["migrate"], inSchema)).code).toBe(0)
      const item = (await json(["enqueue", "mail", '{"to":"ada"}'], inSchema)) as { id: string }
      const cancelled = await db(["cancel", item.id], inSchema)
      expect([cancelled.code, cancelled.stderr, cancelled.stdout]).toEqual([
        0,
        "",
        `cancelled item ${item.id} (it was pending)\n`
      ])
      expect(await json(["queue"], inSchema)).toEqual([])
      const again = await db(["cancel", item.id], inSchema)
      expect([again.code, again.stderr]).toEqual([
        1,
        `kairos: no queue item ${item.id}: \`kairos queue\` lists the pending and processing ones\n`
      ])
      // An execution, written as a worker would have; retry makes a new item of it.
      await query(
        `INSERT INTO $schema.processed_items (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
         VALUES (41, 'mail', '{"to":"grace"}', 'error', 'smtp down', now(), now(), 3)`,
        inSchema
      )
      const [execution] = (await query(`SELECT id::text AS id FROM $schema.processed_items`, inSchema)) as Array<{
        id: string
      }>
      const retried = (await json(["retry", execution!.id], inSchema)) as {
        id: string
        task_type: string
        payload: string
      }
      expect([retried.task_type, retried.payload]).toEqual(["mail", '{"to":"grace"}'])
      expect(((await json(["queue"], inSchema)) as Array<{ id: string }>).map((i) => i.id)).toEqual([retried.id])
      const missing = await db(["retry", "999999"], inSchema)
      expect([missing.code, missing.stderr]).toEqual([
        1,
        "kairos: no execution 999999: `kairos processed` lists them\n"
      ])
      const notANumber = await db(["cancel", "abc"], inSchema)
      expect(notANumber.code).toBe(1)
      expect(notANumber.stderr).toContain('<item> must be a number (an id), not "abc"')
    } finally {
      await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, inSchema)
    }
  })
})

describe("kairos prune", () => {
  it("deletes the oldest executions beyond --log-keep (the log refuses any other DELETE); needs a policy", async () => {
    const inSchema = uniqueSchemaName("prune")
    try {
      expect((await db(["migrate"], inSchema)).code).toBe(0)
      await query(
        `INSERT INTO $schema.processed_items (queue_item_id, task_type, payload, status, started_at, finished_at, duration_ms)
         SELECT n, 'mail', 'p' || n, 'ok', now(), now(), 1 FROM generate_series(1, 5) AS n`,
        inSchema
      )
      await expect(query(`DELETE FROM $schema.processed_items`, inSchema)).rejects.toThrow(/insert-only/)
      expect(await json(["prune", "--log-keep", "2"], inSchema)).toEqual({ executions: 3, job_runs: 0 })
      expect(((await json(["processed"], inSchema)) as Array<{ payload: string }>).map((p) => p.payload)).toEqual([
        "p5",
        "p4"
      ])
      const none = await db(["prune"], inSchema)
      expect([none.code, none.stderr]).toEqual([
        1,
        "kairos: nothing to prune: give --log-age, --log-keep, --runs-age or --runs-keep\n"
      ])
      const bad = await db(["prune", "--runs-age", "soon"], inSchema)
      expect([bad.code, bad.stderr]).toEqual([
        1,
        'kairos: --runs-age: "soon" is not a duration (use e.g. "30 seconds" or "30s")\n'
      ])
    } finally {
      await query(`DROP SCHEMA IF EXISTS $schema CASCADE`, inSchema)
    }
  })
})
