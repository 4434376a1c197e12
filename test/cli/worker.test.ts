/**
 * `kairos worker`, spawned as a real process against a real Postgres: tasks modules, its output, signals, jobs
 * fired and paused while it runs. Integration: real processes, signals and wall time.
 */
import { spawn } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { describe, expect, it } from "vitest"
import { uniqueSchemaName } from "../support/database.js"
import { exited, projectRoot } from "../support/process.js"
import { migratedSchema, until } from "../support/workers.js"
import { bin, db, json, live, query, schema, url, useCli } from "../support/cli.js"

useCli()

describe("kairos worker", () => {
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
      // The heartbeat's first slot is 10 s after the worker defined it: brought forward to now once it is defined (the
      // worker polls every 500 ms), so that the test does not wait for it.
      await until(
        async () =>
          (await query(`UPDATE $schema.scheduled_jobs SET next_run_at = now() WHERE name = 'heartbeat' RETURNING 1`))
            .length === 1,
        30_000,
        "the worker to define the heartbeat"
      )
      await until(
        async () => {
          const done = await query(`SELECT count(*)::int AS n FROM $schema.processed_items`)
          const runs = await query(`SELECT count(*)::int AS n FROM $schema.job_runs WHERE status = 'success'`)
          return done[0]!["n"] === 5 && Number(runs[0]!["n"]) >= 1
        },
        // A cold worker loading its TypeScript tasks module takes ~2.5 s alone, far more on a loaded machine.
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
        "error",
        "output"
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
      // The status line's queue depth, exact for a queue this short (estimated past EXACT_DEPTH_UP_TO items).
      const status = out
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((e) => e["event"] === "status")
      expect(status).toMatchObject({ queue_exact: true })
      expect(typeof status?.["queue"]).toBe("number")
      expect(await query(`SELECT 1 FROM $schema.queue_items WHERE status = 'processing'`)).toEqual([])
      expect(await json(["workers"])).toEqual([])
    }
  )

  it(
    "worker: a tasks module's { handler, transactional: true } writes through tx, committed with its record or not at all",
    { timeout: 90_000 },
    async () => {
      const own = await migratedSchema("cli_tx")
      await own.query(`CREATE TABLE $schema.ledger (note text)`)
      const table = `"${own.schema}".ledger`
      const [ok, failed] = (
        await own.query<{ id: string }>(
          `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('ledger', $1), ('ledger', $2)
           RETURNING id::text AS id`,
          [JSON.stringify({ table, note: "kept" }), JSON.stringify({ table, note: "rolled back", fail: true })]
        )
      ).map((r) => r.id)
      const worker = live([
        "worker",
        "--tasks",
        "test/fixtures/tx-tasks.ts",
        "--database-url",
        url,
        "--schema",
        own.schema
      ])
      try {
        await worker.waitFor(new RegExp(`^Completed ledger item ${ok} \\(attempt 1\\) in \\d+ms$`, "m"))
        await worker.waitFor(
          new RegExp(
            `^Failed ledger item ${failed} \\(attempt 1\\) after \\d+ms: failed after writing rolled back$`,
            "m"
          )
        )
        // A failure is recorded with the other results, a moment after its line.
        await until(
          async () => (await own.query(`SELECT 1 FROM $schema.processed_items`)).length === 2,
          10_000,
          "both executions recorded"
        )
        expect(await own.query(`SELECT note FROM $schema.ledger`)).toEqual([{ note: "kept" }])
        expect(
          await own.query(`SELECT queue_item_id::text AS item, status FROM $schema.processed_items ORDER BY id`)
        ).toEqual(
          expect.arrayContaining([
            { item: ok, status: "ok" },
            { item: failed, status: "error" }
          ])
        )
      } finally {
        worker.child.kill("SIGKILL")
        await own.close()
      }
    }
  )

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
})

describe("a tasks module outside any project", () => {
  it.each(["tasks.ts", "tasks.mjs"])(
    "%s imports kairos and effect, which it never installed: they resolve from the CLI's package and it runs",
    { timeout: 120_000 },
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
          // A cold worker loading a .ts module through tsx: seconds alone, far more on a loaded or slow machine.
          await worker.waitFor(/hello outside/, "out", 60_000)
          await worker.waitFor(/Completed hello item \d+/, "out", 30_000)
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
    { timeout: 120_000 },
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
          // A cold start beside other tests' twenty starting workers took over 30 s on a 2-core machine (five files a time).
          await worker.waitFor(/kairos worker /, "out", 60_000)
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
