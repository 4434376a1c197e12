/**
 * The dashboard under test: served in-process on a free port over a migrated schema of the test file's own, with
 * rows written by plain SQL (as any program may write them), hostile values included.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import { Dashboard } from "../../src/dashboard.js"
import { type TestDb, until } from "../support/workers.js"

/** Values a user or a SQL writer can put in a row, which pages must show as text and never as markup. */
export const hostile = {
  script: "<script>alert(1)</script>",
  attribute: `"'><img src=x onerror=alert(1)>`,
  ansi: "\u001b[31mred\u001b[0m",
  long: "L".repeat(100_000)
} as const

/** A running dashboard: its base URL, and `stop`. */
export interface RunningDashboard {
  readonly url: string
  readonly stop: () => Promise<void>
}

/**
 * The application name of a test dashboard's connections over `schema`: a test that cuts them cuts its own only, not
 * those of another file's dashboard running meanwhile (the browser test's, the PgBouncer test's).
 */
export const dashboardApplicationName = (schema: string): string => `kdash:${schema}`

/**
 * Serves the dashboard over `db`'s schema on 127.0.0.1 (or the `host` given) and a free port, until `stop`. Its URL
 * names 127.0.0.1 when it listens on every address.
 */
export const startDashboard = async (
  db: Pick<TestDb, "schema" | "url">,
  options: Partial<Dashboard.ServeOptions> = {}
): Promise<RunningDashboard> => {
  const scope = Effect.runSync(Scope.make())
  const served = await Effect.runPromise(
    Effect.gen(function* () {
      const client = yield* Layer.build(
        PgClient.layer({
          url: Redacted.make(db.url),
          maxConnections: 4,
          applicationName: dashboardApplicationName(db.schema)
        })
      )
      return yield* Dashboard.serve({ schema: db.schema, port: 0, ...options }).pipe(Effect.provide(client))
    }).pipe(Scope.extend(scope))
  )
  return {
    url: served.url.replace(/\/$/, "").replace("//0.0.0.0:", "//127.0.0.1:"),
    stop: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/**
 * Rows for every page: queue items of several types and priorities (one processing, some delayed), 120 executions
 * over the last hour, oldest first (every fifth an error), jobs with runs, a live worker, and the hostile values everywhere a row
 * carries text.
 */
export const seed = async (db: TestDb): Promise<void> => {
  await db.query(`
    INSERT INTO $schema.queue_items (task_type, payload, priority)
    SELECT 'send_email', '{"to":"user' || g || '@example.com"}', 0 FROM generate_series(1, 12) g`)
  await db.query(`
    INSERT INTO $schema.queue_items (task_type, payload, priority, run_after)
    SELECT 'resize', '{"image":' || g || '}', 5, now() + (g || ' hours')::interval FROM generate_series(1, 3) g`)
  await db.query(
    `UPDATE $schema.queue_items SET status = 'processing' WHERE id = (SELECT min(id) FROM $schema.queue_items)`
  )
  await db.query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ($1, $2), ($3, $4), ('big', $5)`, [
    hostile.script,
    hostile.attribute,
    hostile.ansi,
    hostile.script,
    hostile.long
  ])
  await db.query(`
    INSERT INTO $schema.processed_items
      (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms, created_at)
    SELECT 1000 + g, 'send_email', '{"n":' || g || '}', CASE WHEN g % 5 = 0 THEN 'error' ELSE 'ok' END,
           CASE WHEN g % 5 = 0 THEN 'SMTP timeout #' || g ELSE '' END,
           now() - ((121 - g) * 25 || ' seconds')::interval, now() - ((121 - g) * 25 || ' seconds')::interval, 40 + g,
           now() - ((121 - g) * 25 || ' seconds')::interval
    FROM generate_series(1, 120) g`)
  await db.query(
    `INSERT INTO $schema.processed_items
       (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
     VALUES (5000, $1, $2, 'error', $3, now(), now(), 1), (5001, 'big', $4, 'error', $4, now(), now(), 2)`,
    [hostile.script, hostile.attribute, `${hostile.ansi} ${hostile.script}`, hostile.long]
  )
  await db.query(
    `INSERT INTO $schema.scheduled_jobs (name, task_type, payload, schedule, enabled, next_run_at) VALUES
       ('nightly-report', 'report', '{}', '{"_tag":"Daily","hour":2,"minute":30,"tz":"Europe/Berlin"}', true, now() + interval '5 hours'),
       ('every-5-min', 'sync', NULL, '{"_tag":"Interval","everyMillis":300000}', true, now() + interval '2 minutes'),
       ($1, $2, $3, '{"_tag":"Weekly","weekday":1,"hour":9,"minute":0}', true, now() + interval '3 days'),
       ($4, 'long', NULL, '{"_tag":"Daily","hour":0,"minute":0}', false, NULL)`,
    [hostile.script, hostile.attribute, hostile.ansi, hostile.long]
  )
  await db.query(`
    INSERT INTO $schema.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
    SELECT j.id, date_trunc('day', now()) - (g || ' days')::interval, 1,
           CASE WHEN g % 4 = 0 THEN 'failed' ELSE 'success' END,
           date_trunc('day', now()) - (g || ' days')::interval, date_trunc('day', now()) - (g || ' days')::interval + interval '3 seconds',
           CASE WHEN g % 4 = 0 THEN 'report failed on day ' || g ELSE NULL END
    FROM $schema.scheduled_jobs j, generate_series(1, 30) g WHERE j.name = 'nightly-report'`)
  await db.query(
    `INSERT INTO $schema.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
     SELECT id, now() - interval '1 day', 1, 'failed', now() - interval '1 day', now() - interval '1 day', $2
     FROM $schema.scheduled_jobs WHERE name = $1`,
    [hostile.script, `${hostile.ansi}${hostile.attribute}`]
  )
  await db.query(
    `INSERT INTO $schema.scheduler_workers (id, task_types, started_at, heartbeat_at, live_until)
     VALUES ('worker-a', ARRAY['send_email', 'resize'], now() - interval '1 hour', now(), now() + interval '1 day')`
  )
}

/**
 * Makes a page's read of the schema's queue table take `ms` or more, as a read of a long queue does: the table is
 * locked, `reading` starts, and once a statement matching `waiting` (a fragment of the page's SQL: the dashboard's
 * change poll waits for the lock too) waits for the lock, the lock is kept `ms` longer, then let go. Resolves with
 * what `reading` returned.
 */
export const slowQueueRead = async <A>(
  db: TestDb,
  ms: number,
  waiting: string,
  reading: () => Promise<A>
): Promise<A> => {
  // One implicit transaction (a single query string): cancelling its sleep ends it, and the lock with it.
  const locked = db
    .query(`LOCK TABLE $schema.queue_items IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120)`)
    .catch(() => undefined)
  const holders = () =>
    db.query<{ pid: number }>(
      `SELECT pid FROM pg_locks
       WHERE relation = '$schema.queue_items'::regclass AND mode = 'AccessExclusiveLock' AND granted`
    )
  await until(async () => (await holders()).length > 0, 10_000, "the lock on queue_items")
  const [{ pid }] = (await holders()) as [{ pid: number }]
  let result: Promise<A> | undefined
  try {
    result = reading()
    result.catch(() => undefined)
    await until(
      async () =>
        (
          await db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
            [`%${waiting}%`]
          )
        )[0]!.n > 0,
      30_000,
      `a read (${waiting}) waiting for the lock`
    )
    await new Promise((resolve) => setTimeout(resolve, ms))
  } finally {
    await db.query(`SELECT pg_cancel_backend($1)`, [pid])
    await locked
  }
  return await result
}
