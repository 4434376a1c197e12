/**
 * kairos side by side with graphile-worker and pg-boss, plus a floor (a minimal queue written here with plain
 * `pg`), on one Postgres, in one run. Not a test: nothing is asserted; it prints a table and writes the figures
 * to bench/results/<timestamp>.json.
 *
 *   npm run bench                      3 rounds, the full sizes (10–20 minutes on 2 cores)
 *   npm run bench -- --quick           1 round, small sizes (under two minutes; CI runs it)
 *   npm run bench -- --rounds 5
 *   npm run bench -- --only drain,pickup --systems kairos,floor
 *
 * The database is DATABASE_URL when set, else a throwaway embedded Postgres. Each system works in its own schema
 * (kbench_*), created by each measure and dropped after it, so a shared database is left as it was.
 *
 * Measures (figures are medians over the rounds; the systems' order rotates from one round to the next):
 *   bulk     enqueue of N items in one call (kairos: Kairos.create().enqueueMany and QueueStore.enqueueMany;
 *            graphile-worker: addJobs; pg-boss: insert; floor: INSERT ... SELECT unnest)
 *   single   N single enqueues awaited one at a time, and the same N by 10 concurrent callers (kairos: the
 *            Promise API Kairos.create().enqueue and the Effect API QueueStore.enqueue; graphile-worker: addJob;
 *            pg-boss: send; floor: a prepared INSERT)
 *   drain    N queued no-op items with one worker process: each system's defaults and its best options (see the
 *            header of each bench/systems/*.ts for what was tried); kairos also with sequential (thread 0) items,
 *            and both again with named prepared statements (`namedStatements`; the default sends them unnamed).
 *            Timed from the worker's start until the last completion is in the database; a drain longer than the
 *            cap is cut and its rate taken over the time it ran (marked *)
 *   pickup   latency from the enqueue call until the handler runs, one item at a time into an idle worker
 *   kairos alone:
 *   cron     10,000 interval jobs due at one instant: time until every one has a job_runs row, and ran
 *   claim    median claimBatch(20) and recordResults(20) with 1,000,000 rows in processed_items against empty
 *   rss      a worker process's RSS after a 20,000- and after a 200,000-item drain
 *   scale    the drain with 1, 2 and 4 worker processes (bench/kairos-worker.ts) on one database, once each
 *            process has drained 5,000 items from its cold start (that cold drain's rate is shown beside it)
 *   backlog  a long backlog (1,000,000 items; 50,000 with --quick) queued at once and drained by one worker
 *            process at concurrency 20, batch 20: the first and the last tenth's rates, their ratio and the total
 *            (bench/systems/backlog.ts; `npm run bench:backlog` prints every tenth)
 *   flow     a 10,000-step graph of items that wait for others (2,000 with --quick): enqueueFlow, claims beside it
 *            and while it drains (bench/systems/flow.ts; `npm run bench:flow`)
 *   limits   a runner's drain of 10,000 items (2,000 with --quick) of a plain type, of one under a limit that never
 *            binds and of one with 2 per group, interleaved, and the limited ones against plain
 *            (bench/systems/limits.ts; `npm run bench:limits` adds the store-level and fairness measures)
 */
import { execFileSync } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { EmbeddedPostgres } from "../src/dev.js"
import * as report from "./lib/report.js"
import type { Context, Figures, Sizes, System, SystemName } from "./lib/types.js"
import { adminPool, dropSchema, now } from "./lib/util.js"
import * as floor from "./systems/floor.js"
import * as kairos from "./systems/kairos.js"
import * as kairosOnly from "./systems/kairos-only.js"
import * as flowBench from "./systems/flow.js"
import * as limitsBench from "./systems/limits.js"
import * as backlog from "./systems/backlog.js"

const here = path.dirname(fileURLToPath(import.meta.url))
// `npm run bench` runs the compiled copy in .bench-build/bench (kairos as its package ships: JavaScript, not
// TypeScript transpiled on the fly); `npx tsx bench/compare.ts` runs the sources. Results go to bench/results.
const projectRoot =
  path.basename(path.dirname(here)) === ".bench-build" ? path.resolve(here, "..", "..") : path.dirname(here)

const USAGE = `usage: npm run bench [-- options]

  --quick            1 round, small sizes (under two minutes; CI runs it)
  --rounds N         rounds to take medians over (default 3; 1 with --quick)
  --only G,...       measures: bulk, single, drain, pickup, cron, claim, rss, scale, backlog, flow, limits (default all)
  --systems S,...    kairos, graphile-worker, pg-boss, floor (default all)
  --no-json          do not write bench/results/<timestamp>.json
  --help             this text

The database is DATABASE_URL when set, else a throwaway embedded Postgres.
`

const parsed = (() => {
  try {
    return parseArgs({
      options: {
        quick: { type: "boolean", default: false },
        rounds: { type: "string" },
        only: { type: "string" },
        systems: { type: "string" },
        "no-json": { type: "boolean", default: false },
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

const quick = args.quick === true
const rounds = Number(args.rounds ?? (quick ? 1 : 3))
const GROUPS = [
  "bulk",
  "single",
  "drain",
  "pickup",
  "cron",
  "claim",
  "rss",
  "scale",
  "backlog",
  "flow",
  "limits"
] as const
type Group = (typeof GROUPS)[number]
const only = new Set<string>(args.only?.split(",").map((s) => s.trim()) ?? GROUPS)
for (const g of only) if (!(GROUPS as ReadonlyArray<string>).includes(g)) throw new Error(`--only: unknown ${g}`)
const wanted = (g: Group) => only.has(g)

const sizes: Sizes = quick
  ? { items: 2_000, singles: 200, samples: 30, drainCapMs: 10_000, allCandidates: false }
  : { items: 20_000, singles: 1_000, samples: 200, drainCapMs: 30_000, allCandidates: true }
const kairosOnlySizes = quick
  ? {
      cronJobs: 1_000,
      cronCapMs: 15_000,
      claimRows: 100_000,
      claimBacklog: 10_000,
      rssFirst: 2_000,
      rssTotal: 20_000,
      procs: [1, 2],
      warmPerProc: 1_000,
      backlog: 50_000,
      flow: 2_000,
      limits: 2_000,
      limitsRounds: 1
    }
  : {
      cronJobs: 10_000,
      cronCapMs: 30_000,
      claimRows: 1_000_000,
      claimBacklog: 40_000,
      rssFirst: 20_000,
      rssTotal: 200_000,
      procs: [1, 2, 4],
      warmPerProc: 5_000,
      backlog: 1_000_000,
      flow: 10_000,
      limits: 10_000,
      limitsRounds: 2
    }

/**
 * The peers' modules import graphile-worker and pg-boss, which `npm run bench` installs into bench/node_modules first
 * (scripts/bench-peers.mjs): they are not the project's dependencies. Loaded by a path the project's type check does
 * not follow, so it needs neither installed; tsconfig.bench.json checks them when the benchmark is built.
 */
const peer = async (file: string): Promise<System> =>
  ((await import(`./systems/${file}.js`)) as { readonly system: System }).system
const ALL: ReadonlyArray<System> = [kairos.system, await peer("graphile"), await peer("pgboss"), floor.system]
const named = args.systems?.split(",").map((s) => s.trim())
for (const n of named ?? []) {
  if (!ALL.some((s) => s.name === n)) throw new Error(`--systems: unknown ${n} (${ALL.map((s) => s.name).join(", ")})`)
}
const systems = named === undefined ? ALL : ALL.filter((s) => named.includes(s.name))
const SCHEMAS: Record<SystemName | "kairos-only", string> = {
  kairos: "kbench_kairos",
  "graphile-worker": "kbench_graphile",
  "pg-boss": "kbench_pgboss",
  floor: "kbench_floor",
  "kairos-only": "kbench_kairos_only"
}
/** Schemas some measures make beside their own (claim: a second kairos schema with the large processed_items). */
const EXTRA_SCHEMAS = ["kbench_kairos_only_full", "kbench_kairos_only_backlog", "kbench_kairos_only_plain"]

/** Ctrl-C once: finish the current measure, clean up, print what was measured. Twice: exit now. */
let aborting = false
process.on("SIGINT", () => {
  if (aborting) process.exit(130)
  aborting = true
  console.error("\ninterrupted: stopping after the current measure (Ctrl-C again to exit at once)")
})
class Aborted extends Error {}
const checkpoint = () => {
  if (aborting) throw new Aborted("interrupted")
}

const log = (message: string) => console.error(message)

const gitDescribe = (): string => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: projectRoot, encoding: "utf8" }).trim()
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], {
      cwd: projectRoot,
      encoding: "utf8"
    }).trim()
    return dirty === "" ? head : `${head} + uncommitted changes in src/`
  } catch {
    return "unknown"
  }
}

const main = async (url: string, embedded: boolean) => {
  const admin = adminPool(url)
  const started = new Date()
  const t0 = now()
  const [{ version }] = (await admin.query<{ version: string }>("SELECT version()")).rows as [{ version: string }]
  const settings = Object.fromEntries(
    (
      await admin.query<{ name: string; setting: string }>(
        `SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')`
      )
    ).rows.map((r) => [r.name, r.setting])
  )
  const env = {
    node: process.version,
    cpu: `${os.cpus().length} × ${os.cpus()[0]?.model ?? "?"}`,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    postgres: version.split(" on ")[0],
    database: embedded ? "embedded (throwaway)" : url.replace(/\/\/[^@/]*@/, "//***@"),
    settings,
    kairos: gitDescribe()
  }
  log(
    `kairos bench: ${quick ? "--quick, " : ""}${rounds} round(s), ${sizes.items.toLocaleString("en-US")} items, ` +
      `${env.postgres} (${env.database}; fsync ${settings["fsync"]}, synchronous_commit ${settings["synchronous_commit"]}), ` +
      `kairos ${env.kairos}`
  )

  const ctxOf = (schema: string): Context => ({ url, admin, schema, sizes, log })
  const perRound: Array<{ order: ReadonlyArray<SystemName>; figures: Partial<Record<SystemName, Figures>> }> = []
  const kairosAlone: Array<Figures> = []
  const errors: Array<string> = []
  const attempt = async (label: string, f: () => Promise<Figures>): Promise<Figures> => {
    checkpoint()
    const t = now()
    try {
      const figures = await f()
      log(`  ${label}: ${((now() - t) / 1000).toFixed(1)} s`)
      return figures
    } catch (e) {
      if (e instanceof Aborted) throw e
      const message = `${label} failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`
      errors.push(message.split("\n").slice(0, 4).join("\n"))
      log(`  ${message}`)
      return {}
    }
  }

  try {
    for (let r = 0; r < rounds; r++) {
      const order = systems.map((_, i) => systems[(i + r) % systems.length]!)
      log(`\nround ${r + 1} of ${rounds}: ${order.map((s) => s.name).join(", ")}`)
      const figures: Partial<Record<SystemName, Figures>> = {}
      perRound.push({ order: order.map((s) => s.name), figures })
      const groups: ReadonlyArray<[Group, keyof Omit<System, "name">]> = [
        ["bulk", "bulkEnqueue"],
        ["single", "singleEnqueue"],
        ["drain", "drain"],
        ["pickup", "pickup"]
      ]
      for (const [group, method] of groups) {
        if (!wanted(group)) continue
        for (const system of order) {
          const got = await attempt(`${group} ${system.name}`, () => system[method](ctxOf(SCHEMAS[system.name])))
          figures[system.name] = { ...figures[system.name], ...got }
        }
      }
      const alone: Figures = {}
      kairosAlone.push(alone)
      const ctx = ctxOf(SCHEMAS["kairos-only"])
      if (wanted("cron") && systems.includes(kairos.system)) {
        for (const config of [kairos.DEFAULTS, kairos.TUNED[0]!]) {
          const got = await attempt(`cron ${config.name}`, () =>
            kairosOnly.intervalJobs(ctx, config, kairosOnlySizes.cronJobs, kairosOnlySizes.cronCapMs)
          )
          for (const [k, v] of Object.entries(got))
            alone[`${k}.${config === kairos.DEFAULTS ? "default" : "tuned"}`] = v
        }
      }
      if (wanted("scale") && systems.includes(kairos.system)) {
        for (const procs of kairosOnlySizes.procs) {
          Object.assign(
            alone,
            await attempt(`scale ${procs}`, () =>
              kairosOnly.scaleOut(ctx, procs, sizes.items, procs * kairosOnlySizes.warmPerProc)
            )
          )
        }
      }
      // Once, in the first round: they are slow to set up, and about kairos's own growth, not a comparison.
      if (r === 0 && wanted("claim") && systems.includes(kairos.system)) {
        Object.assign(
          alone,
          await attempt("claim", () =>
            kairosOnly.claimCost(ctx, kairosOnlySizes.claimRows, kairosOnlySizes.claimBacklog)
          )
        )
      }
      if (r === 0 && wanted("backlog") && systems.includes(kairos.system)) {
        Object.assign(
          alone,
          await attempt("backlog", async () => {
            const outcome = await backlog.drainBacklog(ctx, {
              items: kairosOnlySizes.backlog,
              workers: 20,
              batchSize: 20,
              maxConnections: 10,
              capMs: Math.max(120_000, kairosOnlySizes.backlog * 2)
            })
            log(`  ${backlog.summary(outcome)}`)
            return backlog.figures(outcome)
          })
        )
      }
      if (r === 0 && wanted("flow") && systems.includes(kairos.system)) {
        Object.assign(alone, await attempt("flow", () => flowBench.flowGraph(ctx, kairosOnlySizes.flow)))
      }
      if (r === 0 && wanted("limits") && systems.includes(kairos.system)) {
        Object.assign(
          alone,
          await attempt("limits", () =>
            limitsBench.limitedDrains(ctx, kairosOnlySizes.limits, kairosOnlySizes.limitsRounds)
          )
        )
      }
      if (r === 0 && wanted("rss") && systems.includes(kairos.system)) {
        Object.assign(
          alone,
          await attempt("rss", () => kairosOnly.memory(ctx, kairosOnlySizes.rssFirst, kairosOnlySizes.rssTotal))
        )
      }
    }
  } catch (e) {
    if (!(e instanceof Aborted)) throw e
    errors.push("interrupted: the figures are those measured before Ctrl-C")
  } finally {
    for (const schema of [...Object.values(SCHEMAS), ...EXTRA_SCHEMAS]) {
      await dropSchema(admin, schema).catch(() => undefined)
    }
  }

  const medians = report.medians(perRound.map((r) => r.figures))
  const alone = report.mediansOf(kairosAlone)
  const tables = report.render({ medians, alone, sizes, kairosOnlySizes, rounds: perRound.length })
  const seconds = (now() - t0) / 1000
  console.log(`\n${tables}`)
  const byRound = report.roundByRound({
    rounds: perRound.map((r) => r.figures),
    alone: kairosAlone,
    sizes,
    procs: kairosOnlySizes.procs
  })
  if (byRound !== "") console.log(`\n${byRound}`)
  if (errors.length > 0) console.log(`\nerrors:\n${errors.map((e) => `- ${e}`).join("\n")}`)
  console.log(`\n(${rounds} round(s) in ${Math.round(seconds)} s on ${env.cpu}; ${env.postgres}, ${env.database})`)

  if (args["no-json"] !== true) {
    const dir = path.join(projectRoot, "bench", "results")
    await fs.mkdir(dir, { recursive: true })
    const file = path.join(dir, `${started.toISOString().replace(/[:.]/g, "-")}${quick ? "-quick" : ""}.json`)
    const json = {
      started: started.toISOString(),
      seconds,
      args,
      sizes,
      kairosOnlySizes,
      env,
      rounds: perRound,
      kairosAlone,
      medians,
      alone,
      errors,
      tables
    }
    await fs.writeFile(file, JSON.stringify(json, null, 2) + "\n")
    console.log(`results: ${path.relative(process.cwd(), file)}`)
  }
  await admin.end()
  return errors.length === 0
}

const fromEnv = process.env["DATABASE_URL"]
const run = (url: string) => main(url, fromEnv === undefined || fromEnv === "")
EmbeddedPostgres.withDatabaseUrl(run, { log }).then(
  (ok) => process.exit(ok ? 0 : 1),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
