/**
 * The examples run as a newcomer runs them (integration: real processes): the quickstart through tsx, as `npm start`
 * does; the others from the same esbuild transform under plain node (see `example`).
 */
import { describe, expect, it } from "@effect/vitest"
import net from "node:net"
import fs from "node:fs"
import os from "node:os"
import { pathToFileURL } from "node:url"
import path from "node:path"
import pg from "pg"
import { testDatabase } from "./support/database.js"
import { fixtureArgs, PROCESS_LIMITS, projectRoot, run as runCommand } from "./support/process.js"
import { migratedSchema } from "./support/workers.js"

/**
 * Runs `body` with the URL of a database of its own on the run's server, dropped after. An example given it works as
 * on a user's DATABASE_URL (the examples use its `public` schema or one of their own). Without DATABASE_URL each
 * would start a throwaway embedded server of its own (initdb, start, stop: ~2 s of CPU each); that path is the
 * quickstart's, tested below as a newcomer meets it.
 */
const withDatabase = async <A>(body: (url: string) => Promise<A>): Promise<A> => {
  const db = await testDatabase("example")
  try {
    return await body(db.url())
  } finally {
    await db.drop()
  }
}

/**
 * The bounds of an example's run (PROCESS_LIMITS). The examples run side by side (below), each a process (under tsx
 * ~1.5 s of CPU to start), beside the other files: in CI's loaded first pass on a 2-core machine, schedules.ts took
 * 37 s and the quickstart against a closed port 38 s; with this file alone, 8 s and 9 s (the others 3-14 s).
 */
const { processMs: PROCESS_MS, testMs: TEST_MS } = PROCESS_LIMITS

/**
 * Runs an example as `npm run example` does, compiled: the global setup bundles it with the esbuild transform tsx
 * applies (test/support/compiledFixtures.ts), and plain node runs it, without tsx's loader hooks on every module it
 * loads (~1 s of CPU an example). The quickstart's `npm start` test, below, runs it through tsx, exactly as a newcomer
 * types it.
 */
const runExample = (file: string, env: Record<string, string> = {}) =>
  runCommand(process.execPath, fixtureArgs(file), {
    cwd: projectRoot,
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: PROCESS_MS
  })

/** Runs an example (`runExample`) on a database of its own. */
const example = (file: string, env: Record<string, string> = {}) =>
  withDatabase((url) => runExample(file, { ...env, DATABASE_URL: url }))

// Side by side: each example is a process of its own on a database of its own, and mostly waits (for its seconds of
// running); one after another they took ~50 s.
describe.concurrent("examples", () => {
  it("schedules.ts (npm run schedules) prints the DST-aware fire times and exits 0", { timeout: TEST_MS }, async () => {
    const run = await runExample("examples/schedules.ts")
    expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
    expect(run.status).toBe(0)
    expect(run.stdout).toContain("Sun 2026-03-08 03:30 -04:00")
    expect(run.stdout).toContain("2026-03-08T07:30:00Z  02:30 did not exist: shifted by the gap")
    expect(run.stdout).toContain("2026-11-01T05:30:00Z  occurs twice: fired once, at the earlier")
    expect(run.stdout).not.toContain("2026-11-01T06:30:00Z")
    // Cron: the spring gap's 02:00 and 03:00 are one fire; the repeated hour fires on its first pass only.
    expect(run.stdout).toContain(`cron "*/30 1-3 * * *" (America/New_York)`)
    expect(run.stdout).toMatch(/Sun 2026-03-08 03:00 -04:00 +2026-03-08T07:00:00Z\n +Sun 2026-03-08 03:30 -04:00/)
    expect(run.stdout).toMatch(/Sun 2026-11-01 01:30 -04:00 +2026-11-01T05:30:00Z .*\n +Sun 2026-11-01 02:00 -05:00/)
  })

  it("effect-program.ts composes the runner on Postgres and prints its runs", { timeout: TEST_MS }, async () => {
    const run = await example("examples/effect-program.ts", { KAIROS_EXAMPLE_SECONDS: "3" })
    expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
    expect(run.status).toBe(0)
    // A warning may come first (a loaded machine misses a heartbeat slot and says so).
    expect(run.stdout).toMatch(/^\d+ runs:/m)
    expect(run.stdout).toMatch(/heartbeat +\S+ +attempt 1 +success +\{"beat":/)
    expect(run.stdout).toContain("next morning-report: ")
  })

  it(
    "opentelemetry.ts exports a span per execution and the execution counters through OpenTelemetry",
    { timeout: TEST_MS },
    async () => {
      const run = await example("examples/opentelemetry.ts")
      expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
      expect(run.status).toBe(0)
      expect(run.stdout.match(/kairos\.execute {2}kind=queue {2}task_type=send_email .* outcome=ok/g)?.length).toBe(2)
      expect(run.stdout).toMatch(/kairos\.execute .* outcome=failed \(not an address\)/)
      expect(run.stdout).toContain('kairos_executions_total {"kind":"queue","task_type":"send_email","outcome":"ok"} 2')
      expect(run.stdout).toContain(
        'kairos_executions_total {"kind":"queue","task_type":"send_email","outcome":"failed"} 1'
      )
    }
  )

  it(
    "quickstart.ts against a port where nothing listens: one line that says what to fix, exit 1",
    { timeout: TEST_MS },
    async () => {
      const port = await new Promise<number>((resolve) => {
        const server = net.createServer().listen(0, "127.0.0.1", () => {
          const { port } = server.address() as net.AddressInfo
          server.close(() => resolve(port))
        })
      })
      const run = await runExample("examples/quickstart.ts", {
        DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/app`
      })
      expect(run.status).toBe(1)
      expect(run.stderr).toBe(
        `quickstart: cannot reach the database at 127.0.0.1:${port}/app: connection refused (is Postgres running there? check the URL's host and port)\n`
      )
    }
  )

  it(
    "quickstart.ts (npm start) runs on the development database, prints what ran, and the CLI sees it after",
    { timeout: 240_000 },
    async () => {
      // A project folder of its own, so its development database (.kairos) is this test's, stopped at the end.
      const project = fs.mkdtempSync(path.join(os.tmpdir(), "kairos-quickstart-"))
      fs.chmodSync(project, 0o755)
      fs.writeFileSync(path.join(project, "package.json"), `{ "name": "scratch", "private": true }\n`)
      const tsx = pathToFileURL(path.join(projectRoot, "node_modules/tsx/dist/loader.mjs")).href
      const quickstart = () =>
        runCommand(
          process.execPath,
          ["--conditions=kairos-source", "--import", tsx, path.join(projectRoot, "examples/quickstart.ts")],
          {
            cwd: project,
            encoding: "utf8",
            env: { ...process.env, KAIROS_QUICKSTART_SECONDS: "4", DATABASE_URL: "" },
            timeout: 100_000
          }
        )
      const kairos = (args: ReadonlyArray<string>) =>
        runCommand(process.execPath, [path.join(projectRoot, "bin/kairos.js"), ...args], {
          cwd: project,
          encoding: "utf8",
          env: { ...process.env, DATABASE_URL: "" },
          timeout: 60_000
        })
      try {
        const first = await quickstart()
        expect(first.stderr).toBe("")
        expect(first.status).toBe(0)
        expect(first.stdout).toMatch(/^started the development database in \S+ \(set DATABASE_URL to use your own\)\n/)
        expect(first.stdout).toContain("processed queue items (6):")
        expect(first.stdout).toMatch(/send_email +\{"to":"from-sql@example\.com"\} +ok/)
        expect(first.stdout).toMatch(/error +\d+ +not an address: nobody/)
        expect(first.stdout).toMatch(/heartbeat +\S+ +1 +success/)
        expect(first.stdout).toMatch(/daily-report +\d{4}-\d\d-\d\dT\d\d:00:00\.000Z/)
        expect(first.stdout).toContain("stopped gracefully.\n\nsee it in a browser: npx kairos dashboard\n")
        // Again: the same database, and the report shows this run's work only.
        const second = await quickstart()
        expect(second.status).toBe(0)
        expect(second.stdout).toMatch(/^using the development database in /)
        expect(second.stdout).toContain("processed queue items (6):")
        // What the dashboard and the other commands read: both runs, from the same database.
        const processed = await kairos(["processed", "50", "--json"])
        expect(processed.stderr).toBe("")
        expect((JSON.parse(processed.stdout) as Array<unknown>).length).toBe(12)
      } finally {
        expect((await kairos(["db", "stop"])).status).toBe(0)
        fs.rmSync(project, { recursive: true, force: true })
      }
    }
  )

  it("plain-async.ts runs handlers written as async functions", { timeout: TEST_MS }, async () => {
    // Five seconds, not two: beside five heavy test files on two cores, two seconds ran one of its two handlers.
    const run = await example("examples/plain-async.ts", { KAIROS_EXAMPLE_SECONDS: "5" })
    expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
    expect(run.status).toBe(0)
    expect(run.stdout).toContain("hello, Ada (attempt 1)")
    expect(run.stdout).toContain("hello, clock (attempt 1)")
  })

  it(
    "transactional.ts: a failed attempt's ledger row is rolled back with it; one row per successful charge",
    { timeout: TEST_MS },
    async () => {
      const run = await example("examples/transactional.ts")
      expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
      expect(run.status).toBe(0)
      // The README shows this output.
      expect(run.stdout).toBe(
        [
          "charged A-1: 1200 cents (attempt 1)",
          "charged B-2: 800 cents (attempt 2)",
          "executions:",
          "  A-1  ok",
          "  B-2  error  card network timeout",
          "  B-2  ok",
          "  C-3  error  refused: -500 cents",
          "  C-3  error  refused: -500 cents",
          "ledger:",
          "  A-1  1200",
          "  B-2  800",
          ""
        ].join("\n")
      )
    }
  )

  it(
    "workflow.ts: the invoice waits for its PDF and payment and reads their outputs; a declined one is not sent",
    { timeout: TEST_MS },
    async () => {
      const run = await example("examples/workflow.ts")
      expect(run.stderr, `its stdout:\n${run.stdout}`).toBe("")
      expect(run.status).toBe(0)
      // The README and docs/workflows.md show this output.
      expect(run.stdout).toBe(
        [
          `order A-1: {"render":"1","capture":"2","send":"3"}`,
          `order B-2: {"render":"4","capture":"5","send":"6"}`,
          "send_invoice A-1: invoices/A-1.pdf for ch_A-1 (1200 cents)",
          "executions:",
          `  1   render_pdf       ok     {"pdf":"invoices/A-1.pdf","pages":2}`,
          `  2   capture_payment  ok     {"cents":1200,"charge":"ch_A-1"}`,
          `  3   send_invoice     ok     {"sent":true}`,
          `  4   render_pdf       ok     {"pdf":"invoices/B-2.pdf","pages":2}`,
          "  5   capture_payment  error  card declined: -1 cents",
          "  6   send_invoice     error  not run: it waited for item 5, which failed",
          ""
        ].join("\n")
      )
    }
  )

  it("enqueue.sql runs as written against the tables", { timeout: 60_000 }, async () => {
    const db = await migratedSchema("enqueuesql")
    try {
      const client = new pg.Client({ connectionString: db.url })
      await client.connect()
      await client.query(`SET search_path TO "${db.schema}"`)
      await client.query(fs.readFileSync(path.join(projectRoot, "examples/enqueue.sql"), "utf8"))
      await client.end()
      const items = await db.query<{ task_type: string; max_runs: number; thread: number }>(
        `SELECT task_type, max_runs, thread FROM $schema.queue_items ORDER BY id`
      )
      expect(items).toEqual([
        { task_type: "send_email", max_runs: 1, thread: 0 },
        { task_type: "resize", max_runs: 3, thread: 1 },
        { task_type: "confirm_order", max_runs: 1, thread: 0 }
      ])
      expect(await db.query(`SELECT value FROM $schema.scheduler_meta WHERE key = 'semaphore'`)).toEqual([
        { value: "green" }
      ])
    } finally {
      await db.close()
    }
  })
})
