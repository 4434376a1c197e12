/**
 * The quickstart: `npm start`. A real Postgres (DATABASE_URL, else the development database: an embedded Postgres
 * in the project's `.kairos` folder that stays up, so `npx kairos dashboard` and the other commands see what ran),
 * the tables, two handlers, a daily, a weekly and an interval job, queue items from code and from plain SQL, a live
 * progress line for a few seconds, then what ran — and a graceful stop.
 *
 *   KAIROS_QUICKSTART_SECONDS=15 (default)  KAIROS_SCHEMA=public (default)
 */
import { SqlClient } from "@effect/sql"
import path from "node:path"
import { Cause, Effect, Exit, Logger, LogLevel } from "effect"
import { PgKairos, QueueStore, Runner, Schedule } from "kairos"
import { DevDatabase } from "kairos/dev"

const seconds = Number(process.env["KAIROS_QUICKSTART_SECONDS"] ?? 15)
const schema = process.env["KAIROS_SCHEMA"] ?? "public"

const program = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  const queue = yield* QueueStore
  const sql = yield* SqlClient.SqlClient
  // The development database keeps earlier runs: what this run did is what comes after these ids.
  const [before] = yield* sql<{ processed: string; runs: string }>`
    SELECT (SELECT coalesce(max(id), 0) FROM ${sql(`${schema}.processed_items`)})::text AS processed,
           (SELECT coalesce(max(id), 0) FROM ${sql(`${schema}.job_runs`)})::text AS runs`

  // 1. Handlers: a plain async function and an Effect. A thrown error is recorded, never a crash.
  yield* runner.register("send_email", async (job) => {
    const { to } = JSON.parse(job.payload) as { to: string }
    if (!to.includes("@")) throw new Error(`not an address: ${to}`)
    return { sentTo: to }
  })
  yield* runner.register("report", (job) =>
    Effect.succeed({ report: job.name, slot: job.scheduledFor.toISOString(), attempt: job.attempt })
  )

  // 2. Recurring jobs, upserted by name: daily and weekly in a time zone, and a fixed interval.
  yield* runner.defineJobs([
    { name: "daily-report", taskType: "report", schedule: Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" }) },
    {
      name: "weekly-digest",
      taskType: "report",
      schedule: Schedule.weekly({ weekday: 1, hour: 8, minute: 0, tz: "America/New_York" })
    },
    { name: "heartbeat", taskType: "report", schedule: Schedule.interval({ every: "3 seconds" }) }
  ])

  // 3. Queue items from code: priorities, one that runs twice, one that fails.
  const now = new Date()
  yield* queue.enqueue({ taskType: "send_email", payload: JSON.stringify({ to: "ada@example.com" }) }, now)
  yield* queue.enqueue(
    { taskType: "send_email", payload: JSON.stringify({ to: "vip@example.com" }), priority: 10 },
    now
  )
  yield* queue.enqueue(
    { taskType: "send_email", payload: JSON.stringify({ to: "twice@example.com" }), maxRuns: 2 },
    now
  )
  yield* queue.enqueue({ taskType: "send_email", payload: JSON.stringify({ to: "nobody" }) }, now)
  // ... and one by plain SQL, as any other program would.
  yield* sql`INSERT INTO ${sql(`${schema}.queue_items`)} (task_type, payload, priority, max_runs, thread)
             VALUES ('send_email', '{"to":"from-sql@example.com"}', 0, 1, 0)`

  // 4. Run, with a progress line.
  yield* runner.start
  const tty = process.stdout.isTTY === true
  for (let s = 1; s <= seconds; s++) {
    yield* Effect.sleep("1 second")
    const stats = yield* runner.stats
    const line = `[${String(s).padStart(2)}s] started ${stats.started}  ok ${stats.ok}  failed ${stats.failed}  queue ${yield* queue.pendingCount()}`
    if (tty) process.stdout.write(`\r${line}`)
    else if (s % 5 === 0 || s === seconds) console.log(line)
  }
  if (tty) process.stdout.write("\n")

  // 5. A graceful stop: running handlers finish within the grace period.
  yield* runner.stop

  // 6. What happened.
  const runs = yield* sql<{ job: string; scheduled_for: Date; attempt: number; status: string; output: unknown }>`
    SELECT j.name AS job, r.scheduled_for, r.attempt, r.status, r.output
    FROM ${sql(`${schema}.job_runs`)} r JOIN ${sql(`${schema}.scheduled_jobs`)} j ON j.id = r.job_id
    WHERE r.id > ${before!.runs}::bigint ORDER BY r.id`
  const processed = yield* sql<{
    item: string
    task_type: string
    payload: string
    status: string
    duration_ms: number
    error_msg: string
  }>`
    SELECT queue_item_id::text AS item, task_type, payload, status, duration_ms, error_msg
    FROM ${sql(`${schema}.processed_items`)} WHERE id > ${before!.processed}::bigint ORDER BY id`
  const jobs = yield* sql<{ name: string; next_run_at: Date }>`
    SELECT name, next_run_at FROM ${sql(`${schema}.scheduled_jobs`)} ORDER BY next_run_at`
  console.log(`\njob runs (${runs.length}):`)
  printTable(
    ["job", "scheduled_for", "attempt", "status", "output"],
    runs.map((r) => [
      r.job,
      new Date(r.scheduled_for).toISOString(),
      String(r.attempt),
      r.status,
      JSON.stringify(r.output)
    ])
  )
  console.log(`\nprocessed queue items (${processed.length}):`)
  printTable(
    ["item", "task_type", "payload", "status", "duration_ms", "error"],
    processed.map((p) => [p.item, p.task_type, p.payload, p.status, String(p.duration_ms), p.error_msg])
  )
  console.log(`\nnext slots:`)
  printTable(
    ["job", "next_run_at"],
    jobs.map((j) => [j.name, new Date(j.next_run_at).toISOString()])
  )
})

const printTable = (columns: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = columns.map((c, i) => Math.max(c.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    "  " +
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd()
  console.log(line(columns))
  for (const r of rows) console.log(line(r))
}

/** The URL with its password hidden, for the line that says where the quickstart writes. */
const redacted = (url: string): string => {
  try {
    const u = new URL(url)
    if (u.password !== "") u.password = "***"
    return u.toString()
  } catch {
    return "(a DATABASE_URL that is not a URL)"
  }
}

const main = (url: string) => {
  // Say where it writes: with DATABASE_URL set, that is your database (its `public` schema unless KAIROS_SCHEMA).
  console.log(`quickstart: database ${redacted(url)}, schema "${schema}"`)
  return Effect.runPromiseExit(
    program.pipe(
      Effect.provide(PgKairos.layer({ url, schema, workers: 4, interval: "1 second" })),
      Effect.scoped,
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  ).then((exit) => {
    // kairos's own error (it says what to fix), not Effect's FiberFailure wrapper and its stack.
    if (Exit.isFailure(exit)) throw Cause.squash(exit.cause)
    console.log("\nstopped gracefully.")
  })
}

/**
 * A folder as the reader knows it: `./.kairos` from the project, not the machine's absolute path (which would also
 * end up in pasted output). A folder outside the current one (root's fallback under the temporary directory) stays
 * absolute.
 */
const shownPath = (dir: string): string => {
  const relative = path.relative(process.cwd(), dir)
  return relative === "" || relative.startsWith("..") || path.isAbsolute(relative) ? dir : `./${relative}`
}

const fromEnv = process.env["DATABASE_URL"]
const database: Promise<{ url: string; dev: boolean }> =
  fromEnv !== undefined && fromEnv.length > 0
    ? Promise.resolve({ url: fromEnv, dev: false })
    : DevDatabase.ensure(process.cwd()).then((db) => {
        const where = shownPath(db.dataDir)
        console.log(
          db.started
            ? `started the development database in ${where} (set DATABASE_URL to use your own)`
            : `using the development database in ${where} (set DATABASE_URL to use your own)`
        )
        return { url: db.url, dev: true }
      })

database
  .then(({ dev, url }) =>
    main(url).then(() => {
      const where = schema === "public" ? "" : ` --schema ${schema}`
      if (dev) {
        console.log(`\nsee it in a browser: npx kairos dashboard${where}`)
        console.log("the development database keeps running; npx kairos db stop stops it")
      } else console.log(`\nsee it in a browser: npx kairos dashboard${where} (with DATABASE_URL set)`)
    })
  )
  .then(
    () => process.exit(0),
    (e: unknown) => {
      console.error(`quickstart: ${e instanceof Error ? e.message : String(e)}`)
      process.exit(1)
    }
  )
