/**
 * The screenshots of docs/dashboard.md: seeds a demo schema (a few task types, an hour of executions with some
 * failures, items waiting and running, daily/weekly/cron/interval jobs with their runs, two live workers), serves the
 * dashboard over it and saves PNGs of the main pages with Debian's Chromium into docs/screenshots/.
 *
 *   npm run docs:screenshots     (DATABASE_URL, or a throwaway embedded Postgres; CHROMIUM_PATH, default /usr/bin/chromium)
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import fs from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import { chromium } from "playwright-core"
import { withDatabaseUrl } from "../src/adapters/postgres/EmbeddedPostgres.js"
import { migrate } from "../src/adapters/postgres/migrations.js"
import { Dashboard } from "../src/dashboard.js"

const SCHEMA = "kairos_demo"
const out = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../docs/screenshots")

const seed = async (url: string) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  const q = (text: string) => client.query(text.replaceAll("$s", SCHEMA))
  try {
    await q(`DROP SCHEMA IF EXISTS $s CASCADE`)
    await Effect.runPromise(
      migrate({ schema: SCHEMA }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
    )
    // An hour of executions whose rate swells and ebbs, a few failures with messages.
    await q(`
      INSERT INTO $s.processed_items
        (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms, created_at, output)
      SELECT 1000 + g,
             (ARRAY['send_email', 'resize_image', 'sync_crm', 'generate_invoice'])[1 + g % 4],
             '{"id":' || g || '}',
             CASE WHEN g % 29 = 0 OR (g % 4 = 2 AND g % 11 = 0) THEN 'error' ELSE 'ok' END,
             CASE WHEN g % 29 = 0 THEN 'SMTP 421: service not available, try again later'
                  WHEN g % 4 = 2 AND g % 11 = 0 THEN 'CRM API answered 503 after 3 retries' ELSE '' END,
             t - interval '180 milliseconds', t, 40 + (g * 37) % 400, t,
             CASE WHEN g % 4 = 0 AND g % 29 <> 0 THEN jsonb_build_object('sent', true, 'messageId', 'msg-' || g) END
      FROM generate_series(1, 1800) g,
           LATERAL (SELECT now() - ((3600 * (1 - sqrt(g / 1800.0))) || ' seconds')::interval AS t) at`)
    await q(`
      INSERT INTO $s.queue_items (task_type, payload, priority, run_after)
      SELECT (ARRAY['send_email', 'resize_image', 'sync_crm', 'generate_invoice'])[1 + g % 4],
             '{"id":' || (5000 + g) || '}', CASE WHEN g % 5 = 0 THEN 10 ELSE 0 END,
             CASE WHEN g % 7 = 0 THEN now() + (g || ' minutes')::interval END
      FROM generate_series(1, 46) g`)
    await q(`UPDATE $s.queue_items SET status = 'processing', in_flight = 1
             WHERE id IN (SELECT id FROM $s.queue_items WHERE run_after IS NULL ORDER BY id LIMIT 3)`)
    await q(`
      INSERT INTO $s.scheduled_jobs (name, task_type, payload, schedule, enabled, next_run_at) VALUES
        ('daily-report', 'report', '{}', '{"_tag":"Daily","hour":9,"minute":0,"tz":"Europe/Berlin"}', true,
          date_trunc('day', now()) + interval '1 day 8 hours'),
        ('weekly-digest', 'report', '{}', '{"_tag":"Weekly","weekday":1,"hour":8,"minute":0,"tz":"America/New_York"}',
          true, date_trunc('week', now()) + interval '7 days 13 hours'),
        ('invoice-run', 'generate_invoice', '{"batch":"monthly"}',
          '{"_tag":"Cron","expression":"0 6 1 * *","tz":"Europe/London"}', true,
          date_trunc('month', now()) + interval '1 month 6 hours'),
        ('crm-sync', 'sync_crm', NULL, '{"_tag":"Interval","everyMillis":300000}', true,
          now() + interval '2 minutes 10 seconds'),
        ('cleanup-tmp', 'cleanup', NULL, '{"_tag":"Daily","hour":3,"minute":30}', false,
          date_trunc('day', now()) + interval '1 day 3 hours 30 minutes')`)
    await q(`
      INSERT INTO $s.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, output, error)
      SELECT j.id, slot, 1, CASE WHEN j.name = 'daily-report' AND g = 3 THEN 'failed' ELSE 'success' END,
             slot, slot + interval '2 seconds', '{}',
             CASE WHEN j.name = 'daily-report' AND g = 3 THEN 'report: upstream warehouse timed out after 30s' END
      FROM $s.scheduled_jobs j, generate_series(1, 40) g,
           LATERAL (SELECT CASE j.name
             WHEN 'daily-report' THEN date_trunc('day', now()) + interval '8 hours' - (g || ' days')::interval
             WHEN 'weekly-digest' THEN date_trunc('week', now()) + interval '13 hours' - (g * 7 || ' days')::interval
             WHEN 'invoice-run' THEN date_trunc('month', now()) + interval '6 hours' - (g || ' months')::interval
             WHEN 'crm-sync' THEN date_trunc('minute', now()) - (g * 5 || ' minutes')::interval
             ELSE date_trunc('day', now()) + interval '3 hours 30 minutes' - ((g + 10) || ' days')::interval
           END AS slot) s`)
    await q(`
      INSERT INTO $s.job_runs (job_id, scheduled_for, attempt, status, started_at, finished_at, error)
      SELECT id, date_trunc('day', now()) + interval '8 hours' - interval '3 days', 2, 'success',
             date_trunc('day', now()) + interval '8 hours 2 minutes' - interval '3 days',
             date_trunc('day', now()) + interval '8 hours 2 minutes 3 seconds' - interval '3 days', NULL
      FROM $s.scheduled_jobs WHERE name = 'daily-report'`)
    // Outputs, groups, a flow in progress and a few limits (workflows, flow control).
    await q(`UPDATE $s.queue_items SET group_key = 'customer-' || (id % 5) WHERE task_type = 'generate_invoice'`)
    // Order 812's flow, part way: steps that succeeded, one that failed (what waits for it not run), one running,
    // one queued, one waiting, one cancelled while it waited.
    const step = (key: string) => `(SELECT id FROM $s.flow_steps WHERE step_key = '${key}')`
    const enqueue = (type: string, key: string, after: ReadonlyArray<string>) =>
      q(`INSERT INTO $s.queue_waiting (task_type, payload, after, after_keys, step_key)
         SELECT '${type}', '{"order":812}', ARRAY[${after.map(step).join(", ")}]::bigint[],
                ARRAY[${after.map((k) => `'${k}'`).join(", ")}]::text[], '${key}'`)
    const finish = (key: string, status: "ok" | "error", error: string, output: string | null) =>
      q(`BEGIN;
         INSERT INTO $s.processed_items (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at,
           duration_ms, output)
         SELECT id, task_type, '{"order":812}', '${status}', '${error}', now() - interval '1 second', now(), 420,
           ${output === null ? "NULL" : `'${output}'`}::jsonb FROM $s.flow_steps WHERE step_key = '${key}';
         DELETE FROM $s.queue_items WHERE id = ${step(key)};
         COMMIT`)
    await enqueue("render_pdf", "pdf", [])
    await enqueue("capture_payment", "payment", [])
    await enqueue("fraud_check", "fraud", [])
    await enqueue("send_invoice", "invoice", ["pdf", "payment"])
    await enqueue("post_ledger", "ledger", ["payment"])
    await enqueue("send_email", "email", ["invoice"])
    await enqueue("send_sms", "sms", ["email"])
    await enqueue("archive", "archive", ["invoice", "fraud"])
    await enqueue("issue_coupon", "coupon", ["fraud"])
    await enqueue("send_email", "coupon_mail", ["coupon"])
    await finish("pdf", "ok", "", '{"pdf":"invoices/812.pdf"}')
    await finish("payment", "ok", "", '{"charge":"ch_812"}')
    await finish("invoice", "ok", "", '{"sent":true}')
    await finish("email", "error", "SMTP 550: mailbox unavailable", null)
    await q(`UPDATE $s.queue_items SET status = 'processing', in_flight = 1 WHERE id = ${step("fraud")}`)
    await q(`SELECT $s.kairos_flow_cancel(${step("coupon")})`)
    await q(`
      INSERT INTO $s.queue_limits (task_type, concurrency, per_group, rate, rate_per_ms) VALUES
        ('capture_payment', 5, false, NULL, NULL), ('generate_invoice', 1, true, NULL, NULL),
        ('send_email', NULL, false, 100, 60000)`)
    await q(`
      INSERT INTO $s.scheduler_workers (id, task_types, started_at, heartbeat_at, live_until) VALUES
        ('web-1:4121:8f3a', ARRAY['send_email', 'resize_image', 'report'], now() - interval '3 hours', now() - interval '2 seconds', now() + interval '1 day'),
        ('jobs-1:977:c21e', ARRAY['sync_crm', 'generate_invoice', 'report'], now() - interval '26 minutes', now() - interval '4 seconds', now() + interval '1 day')`)
  } finally {
    await client.end()
  }
}

/** The flow's invoice step, whose page shows the whole flow. */
const flowItem = async (url: string): Promise<string> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ id: string }>(
      `SELECT id::text AS id FROM ${SCHEMA}.flow_steps WHERE step_key = 'invoice'`
    )
    return rows[0]!.id
  } finally {
    await client.end()
  }
}

const main = async (url: string) => {
  await seed(url)
  fs.mkdirSync(out, { recursive: true })
  const scope = Effect.runSync(Scope.make())
  const served = await Effect.runPromise(
    Effect.gen(function* () {
      const pool = yield* Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 }))
      return yield* Dashboard.serve({
        schema: SCHEMA,
        port: 0,
        token: "demo-token-for-screenshots",
        pageSize: 25
      }).pipe(Effect.provide(pool))
    }).pipe(Scope.extend(scope))
  )
  const base = served.url.replace(/\/$/, "")
  const browser = await chromium.launch({
    executablePath: process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
  })
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 }, deviceScaleFactor: 1 })
    for (const [file, route] of [
      ["overview", "/"],
      ["queue", "/queue"],
      ["processed", "/processed?status=error"],
      ["jobs", "/jobs"],
      ["job", "/jobs/daily-report"],
      ["flow", `/queue/${await flowItem(url)}`],
      ["limits", "/limits"]
    ] as const) {
      await page.goto(`${base}${route}`)
      await page.locator("#live-state.on").waitFor()
      await page.screenshot({ path: path.join(out, `${file}.png`) })
      console.log(`docs/screenshots/${file}.png  ${route}`)
    }
  } finally {
    await browser.close()
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

withDatabaseUrl(main, { log: console.log }).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
