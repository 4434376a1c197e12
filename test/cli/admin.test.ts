/**
 * The kairos listings and control commands (jobs, workers, escaped tables, the embedded development database,
 * --help, cancel, retry, prune), spawned as real processes against a real Postgres. Integration: real processes.
 */
import { spawn } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { uniqueSchemaName } from "../support/database.js"
import { exited, projectRoot, serverTempDir } from "../support/process.js"
import { bin, db, json, kairos, query, useCli } from "../support/cli.js"

useCli()

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
  // Eight CLI processes one after another, two of them starting a server (initdb the first time): ~7 s alone, and 64 s
  // of the 120 s it had in CI's loaded second pass (the bounds report). 240 s; each process still has its own 60 s.
  it(
    "starts on first use in the project's .kairos, found from a subfolder too; `db start` prints its URL, `db stop` stops it",
    { timeout: 240_000 },
    async () => {
      const cwd = await serverTempDir("kairos-cli-dev-")
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
      // One newline at the end, no blank line after the text.
      expect(r.stdout).toMatch(/\S\n$/)
    }
    expect(top.stdout).toMatch(/^\$ kairos$/m)
    for (const command of ["migrate", "worker", "enqueue", "queue", "processed", "jobs", "runs", "semaphore"])
      expect(top.stdout).toMatch(new RegExp(`^  ${command} `, "m"))
    // One line per command: its words and arguments, not every option of it and of its group again, and its
    // description in a column a terminal shows (it was ~280 columns in, after the worker's options).
    const commands = top.stdout.slice(top.stdout.indexOf("\nCOMMANDS\n")).split("\n")
    expect(commands.find((l) => l.startsWith("  jobs run "))).toMatch(/^ {2}jobs run <name> +fire a job now, as an/)
    expect(commands.find((l) => l.startsWith("  semaphore "))).toMatch(/^ {2}semaphore \[<green\|red>\] +show or set/)
    expect(commands.find((l) => l.startsWith("  worker "))).toMatch(/^ {2}worker --tasks MODULE +run a worker/)
    for (const command of ["db status", "db start", "db stop"])
      expect(top.stdout).toMatch(new RegExp(`^  ${command} `, "m"))
    expect(commands.join("\n")).not.toContain("[--")
    expect(Math.max(...commands.map((l) => /^( {2}\S+(?: \S+)*) {2,}/.exec(l)?.[0].length ?? 0))).toBeLessThan(40)
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

  it("--version prints the version and nothing else", { timeout: 60_000 }, async () => {
    const version = await kairos(["--version"])
    expect([version.code, version.stdout, version.stderr]).toEqual([0, "0.1.0\n", ""])
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
