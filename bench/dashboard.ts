/**
 * The dashboard's pages over a big execution log: fills `processed_items` with 1,000,000 rows (one INSERT … SELECT),
 * adds queue items, jobs and runs, then times each page over HTTP (median of 5 requests after one warm-up), first
 * pages, filtered pages and deep pages alike. Prints the figures; asserts nothing. The goal: every page under 200 ms.
 *
 *   npm run bench:dashboard      (BENCH_ROWS=1000000; DATABASE_URL, or a throwaway embedded Postgres)
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import pg from "pg"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../src/adapters/postgres/migrations.js"
import { Dashboard } from "../src/dashboard.js"
import { median, now } from "./lib/util.js"

const ROWS = Number(process.env["BENCH_ROWS"] ?? 1_000_000)
const SCHEMA = "kairos_bench_dashboard"
const RUNS = 5
const GOAL_MS = 200

const main = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  const q = (text: string, values: Array<unknown> = []) => client.query(text.replaceAll("$s", SCHEMA), values)
  try {
    let started = now()
    await q(`DROP SCHEMA IF EXISTS $s CASCADE`)
    await Effect.runPromise(
      migrate({ schema: SCHEMA }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
    )
    // 20 common task types, one rare one (1 in 10,000); 1 in 20 an error; spread over the last 30 days, newest last.
    await q(
      `
      INSERT INTO $s.processed_items
        (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms, created_at)
      SELECT g, CASE WHEN g % 10000 = 0 THEN 'rare' ELSE 'type_' || (g % 20) END, '{"n":' || g || '}',
             CASE WHEN g % 20 = 0 THEN 'error' ELSE 'ok' END,
             CASE WHEN g % 20 = 0 THEN 'failed: upstream said no (' || g || ')' ELSE '' END,
             t, t + interval '40 milliseconds', 40, t + interval '40 milliseconds'
      FROM generate_series(1, $1::int) g,
           LATERAL (SELECT now() - ((($1::int - g) * 2592000.0 / $1::int) || ' seconds')::interval AS t) at`,
      [ROWS]
    )
    await q(`
      INSERT INTO $s.queue_items (task_type, payload, priority, run_after)
      SELECT 'type_' || (g % 20), '{"n":' || g || '}', g % 3,
             CASE WHEN g % 4 = 0 THEN now() + (g || ' seconds')::interval END
      FROM generate_series(1, 10000) g`)
    await q(`
      INSERT INTO $s.scheduled_jobs (name, task_type, payload, schedule, enabled, next_run_at)
      SELECT 'job-' || g, 'type_' || (g % 20), '{}', '{"_tag":"Daily","hour":3,"minute":0,"tz":"Europe/Berlin"}', true,
             now() + interval '1 hour'
      FROM generate_series(1, 50) g`)
    await q(`
      INSERT INTO $s.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
      SELECT j.id, now() - (g || ' days')::interval, 1, CASE WHEN g % 7 = 0 THEN 'failed' ELSE 'success' END,
             now() - (g || ' days')::interval, now() - (g || ' days')::interval + interval '2 seconds',
             CASE WHEN g % 7 = 0 THEN 'no luck' END
      FROM $s.scheduled_jobs j, generate_series(1, 400) g`)
    await q(`ANALYZE $s.processed_items`)
    await q(`ANALYZE $s.queue_items`)
    await q(`ANALYZE $s.job_runs`)
    console.log(
      `seeded ${ROWS.toLocaleString("en")} executions, 10,000 items, 50 jobs × 400 runs in ${((now() - started) / 1000).toFixed(1)} s`
    )

    const { rows: ids } = await q(`SELECT min(id)::text AS first, max(id)::text AS last FROM $s.processed_items`)
    const { rows: items } = await q(`SELECT min(id)::text AS id FROM $s.queue_items`)
    const deepBefore = String(Number(ids[0].first) + 1_000)
    const day = (daysAgo: number) => new Date(Date.now() - daysAgo * 86_400_000).toISOString()

    const scope = Effect.runSync(Scope.make())
    const served = await Effect.runPromise(
      Effect.gen(function* () {
        const pool = yield* Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }))
        return yield* Dashboard.serve({ schema: SCHEMA, port: 0, token: "bench-token-123" }).pipe(Effect.provide(pool))
      }).pipe(Scope.extend(scope))
    )
    const base = served.url.replace(/\/$/, "")
    const pages: Array<readonly [string, string]> = [
      ["overview", "/"],
      ["queue", "/queue"],
      ["queue, one task type", "/queue?task_type=type_7"],
      ["queue, priority + run_after", `/queue?priority=0&run_after_from=${day(0)}`],
      ["queue, deep page (offset 9,950)", "/queue?page=200"],
      ["queue item", `/queue/${items[0].id}`],
      ["processed", "/processed"],
      ["processed, errors", "/processed?status=error"],
      ["processed, one task type", "/processed?task_type=type_7"],
      ["processed, rare task type", "/processed?task_type=rare"],
      ["processed, rare errors", "/processed?task_type=rare&status=error"],
      ["processed, one hour 20 days ago", `/processed?from=${day(20)}&to=${day(20 - 1 / 24)}`],
      ["processed, errors in that hour", `/processed?status=error&from=${day(20)}&to=${day(20 - 1 / 24)}`],
      ["processed, deep page (oldest)", `/processed?before=${deepBefore}`],
      ["processed, deep page, a type", `/processed?task_type=type_3&before=${deepBefore}`],
      ["processed, newer page", `/processed?after=${deepBefore}`],
      ["jobs", "/jobs"],
      ["job", "/jobs/job-7"],
      ["job, page 8", "/jobs/job-7?page=8"]
    ]
    console.log(`\n${"page".padEnd(34)} ${"median".padStart(8)} ${"min".padStart(8)} ${"max".padStart(8)}  status`)
    const slow: Array<string> = []
    for (const [label, path] of pages) {
      const samples: Array<number> = []
      let status = 0
      for (let i = 0; i <= RUNS; i++) {
        started = now()
        const response = await fetch(`${base}${path}`)
        await response.text()
        status = response.status
        if (i > 0) samples.push(now() - started)
      }
      const m = median(samples)
      if (m > GOAL_MS) slow.push(label)
      console.log(
        `${label.padEnd(34)} ${m.toFixed(1).padStart(6)} ms ${Math.min(...samples)
          .toFixed(1)
          .padStart(5)} ms ${Math.max(...samples)
          .toFixed(1)
          .padStart(5)} ms  ${status}${m > GOAL_MS ? "  over the goal" : ""}`
      )
    }
    console.log(
      slow.length === 0
        ? `\nevery page under ${GOAL_MS} ms (median of ${RUNS})`
        : `\nover ${GOAL_MS} ms: ${slow.join(", ")}`
    )
    await Effect.runPromise(Scope.close(scope, Exit.void))
  } finally {
    await q(`DROP SCHEMA IF EXISTS $s CASCADE`).catch(() => undefined)
    await client.end()
  }
}

withDatabaseUrl(main, { log: console.log }).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
