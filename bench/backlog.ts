/**
 * A long backlog drained at full speed: N items queued at once, drained by one kairos worker process
 * (`--concurrency 20 --batch 20`, a pool of 10, as `kairos worker` runs), with the rate of each tenth, the last
 * tenth's over the first's, the total time and the worker's claim time. See bench/systems/backlog.ts for how each
 * figure is taken. Not a test: nothing is asserted.
 *
 *   npm run bench:backlog                         1,000,000 items, one run
 *   npm run bench:backlog -- --items 200000 --runs 3
 *   npm run bench:backlog -- --setup "ALTER TABLE {{schema}}.queue_items SET (autovacuum_vacuum_scale_factor = 0)"
 *
 * The database is DATABASE_URL when set, else a throwaway embedded Postgres. Autovacuum is whatever that server
 * has (the machine's Postgres may have it off: the run says so).
 */
import { parseArgs } from "node:util"
import { EmbeddedPostgres } from "../src/dev.js"
import type { Context } from "./lib/types.js"
import { adminPool, dropSchema } from "./lib/util.js"
import { drainBacklog, summary, tenthsTable } from "./systems/backlog.js"

const USAGE = `usage: npm run bench:backlog [-- options]

  --items N            items queued (default 1000000)
  --concurrency N      the worker's executions at once (default 20)
  --batch N            most items per claim (default 20)
  --max-connections N  the worker's pool (default 10)
  --runs N             drains, one after the other (default 1)
  --setup SQL          a statement run on the migrated schema before the items are queued ({{schema}}: the
                       schema), e.g. a candidate's table settings; may be given more than once
  --env NAME=VALUE     extra environment for the worker process; may be given more than once
  --bench-vacuum-at N  the benchmark itself vacuums queue_items whenever it has more than N dead rows (a
                       candidate tried without kairos doing it)
  --schema NAME        the schema (default kbench_backlog; dropped before and after)
  --help               this text
`

const parsed = (() => {
  try {
    return parseArgs({
      options: {
        items: { type: "string", default: "1000000" },
        concurrency: { type: "string", default: "20" },
        batch: { type: "string", default: "20" },
        "max-connections": { type: "string", default: "10" },
        runs: { type: "string", default: "1" },
        setup: { type: "string", multiple: true },
        env: { type: "string", multiple: true },
        schema: { type: "string", default: "kbench_backlog" },
        "bench-vacuum-at": { type: "string" },
        help: { type: "boolean", short: "h", default: false }
      }
    })
  } catch (e) {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n\n${USAGE}`)
    process.exit(2)
  }
})()
const args = parsed.values
if (args.help === true) {
  process.stdout.write(USAGE)
  process.exit(0)
}
const int = (name: string, v: string): number => {
  const n = Number(v)
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(`--${name}: a positive whole number, not ${v}\n\n${USAGE}`)
    process.exit(2)
  }
  return n
}
const items = int("items", args.items)
const runs = int("runs", args.runs)
const env = Object.fromEntries(
  (args.env ?? []).map((e) => {
    const i = e.indexOf("=")
    return i < 1 ? [e, ""] : [e.slice(0, i), e.slice(i + 1)]
  })
)

const log = (message: string) => console.error(message)

const main = async (url: string) => {
  const admin = adminPool(url)
  try {
    const settings = (
      await admin.query<{ name: string; setting: string }>(
        `SELECT name, setting FROM pg_settings
         WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor',
           'autovacuum_vacuum_threshold', 'autovacuum_vacuum_cost_delay', 'shared_buffers', 'synchronous_commit')
         ORDER BY name`
      )
    ).rows
    const version = (await admin.query<{ server_version: string }>("SHOW server_version")).rows[0]!.server_version
    log(
      `backlog: ${items.toLocaleString("en-US")} items, concurrency ${args.concurrency}, batch ${args.batch}, ` +
        `pool ${args["max-connections"]}; Postgres ${version}: ${settings.map((r) => `${r.name} ${r.setting}`).join(", ")}`
    )
    const ctx: Context = {
      url,
      admin,
      schema: args.schema,
      sizes: { items, singles: 0, samples: 0, drainCapMs: 0, allCandidates: false },
      log
    }
    for (let r = 0; r < runs; r++) {
      const outcome = await drainBacklog(ctx, {
        items,
        workers: int("concurrency", args.concurrency),
        batchSize: int("batch", args.batch),
        maxConnections: int("max-connections", args["max-connections"]),
        setup: args.setup,
        env,
        benchVacuumAt:
          args["bench-vacuum-at"] === undefined ? undefined : int("bench-vacuum-at", args["bench-vacuum-at"]),
        capMs: Math.max(600_000, items * 2)
      })
      console.log(`\nrun ${r + 1} of ${runs}\n\n${tenthsTable(outcome)}\n\n${summary(outcome)}`)
    }
  } finally {
    await dropSchema(admin, args.schema).catch(() => undefined)
    await admin.end()
  }
}

EmbeddedPostgres.withDatabaseUrl(main, { log }).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
