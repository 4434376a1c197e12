/**
 * The package as a user meets it: `npm pack`, the tarball installed into a scratch app, then kairos used from plain
 * Node (no tsx: the scratch app's copy is removed), its CLI run from the installed bin, and a TypeScript file
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

beforeAll(async () => {
  app = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-app-"))
  const packed = JSON.parse(await npm(["pack", "--json", "--pack-destination", app], projectRoot)) as Array<{
    filename: string
    files: Array<{ path: string }>
  }>
  tarball = path.join(app, packed[0]!.filename)
  await fs.writeFile(
    path.join(app, "package.json"),
    JSON.stringify({ name: "scratch-app", private: true, type: "module" }, null, 2)
  )
  // What a user adds: kairos (its peers, effect and @effect/sql..., come with it), and Node's types for tsc.
  await npm(["install", "--no-audit", "--no-fund", "--prefer-offline", tarball, "@types/node@20"], app)
}, 300_000)

afterAll(async () => {
  await query(`DROP SCHEMA IF EXISTS $schema CASCADE`).catch(() => undefined)
  if (app !== "") await fs.rm(app, { recursive: true, force: true })
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
    // Prove that nothing needs TypeScript at run time.
    await fs.rm(path.join(app, "node_modules/tsx"), { recursive: true, force: true })
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

  it("type-checks a TypeScript app against the published declarations", () => {
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
      const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc")
      const run = await runCommand(process.execPath, [tsc, "-p", app], { cwd: app, timeout: 120_000 })
      expect(run.stdout + run.stderr).toBe("")
      expect(run.status).toBe(0)
    })()
  })
})
