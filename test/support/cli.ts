/**
 * The kairos command line spawned as a real process against a real Postgres: what the CLI test files share. Each
 * file that calls `useCli()` works in a schema of its own (dropped after the file), so the files run side by side.
 */
import { spawn } from "node:child_process"
import path from "node:path"
import { afterAll, beforeAll, expect } from "vitest"
import { databaseUrl, uniqueSchemaName } from "./database.js"
import { projectRoot, run as runCommand } from "./process.js"
import pg from "pg"

export const bin = path.join(projectRoot, "bin/kairos.js")
export let url = ""
/**
 * The schema of the file that runs now. A new one for each file that calls `useCli()`: files share this module when
 * a worker runs several of them in turn (no isolation), and each must still start from an empty schema of its own.
 */
export let schema = uniqueSchemaName("cli")

// Without blocking the test file's event loop (see `run` in test/support/process.ts): independent commands run side
// by side.
export const kairos = async (args: ReadonlyArray<string>, options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) => {
  const run = await runCommand(process.execPath, [bin, ...args], {
    cwd: options.cwd ?? projectRoot,
    env: options.env ?? process.env,
    timeout: 60_000
  })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}
/** A long-running `kairos` process whose output can be awaited line by line. */
export const live = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env) => {
  const child = spawn(process.execPath, [bin, ...args], { cwd: projectRoot, env, stdio: ["ignore", "pipe", "pipe"] })
  let out = ""
  let err = ""
  const waiters: Array<() => void> = []
  const notify = () => {
    for (const w of waiters.splice(0)) w()
  }
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString()
    notify()
  })
  child.stderr.on("data", (d: Buffer) => {
    err += d.toString()
    notify()
  })
  child.on("exit", notify)
  /** Resolves once stdout (or stderr) matches `pattern`; fails when the process exits first or after `ms`. */
  const waitFor = (pattern: RegExp, stream: "out" | "err" = "out", ms = 30_000) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${pattern} in ${ms} ms:\n${out}\n${err}`)), ms)
      const check = () => {
        const match = (stream === "out" ? out : err).match(pattern)
        if (match !== null) {
          clearTimeout(timer)
          resolve(match)
        } else if (child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer)
          reject(new Error(`exited (${child.exitCode ?? child.signalCode}) without ${pattern}:\n${out}\n${err}`))
        } else waiters.push(check)
      }
      check()
    })
  /** The JSON lines printed so far. */
  const events = () =>
    out
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
  return { child, out: () => out, err: () => err, waitFor, events }
}

export const db = (args: ReadonlyArray<string>, inSchema = schema) =>
  kairos([...args, "--database-url", url, "--schema", inSchema])
export const json = async (args: ReadonlyArray<string>, inSchema = schema) => {
  const r = await db([...args, "--json"], inSchema)
  expect(r.stderr).toBe("")
  expect(r.code).toBe(0)
  return JSON.parse(r.stdout) as unknown
}

export const query = async (text: string, inSchema = schema, params: ReadonlyArray<unknown> = []) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text.replaceAll("$schema", `"${inSchema}"`), [...params])).rows as Array<
      Record<string, unknown>
    >
  } finally {
    await client.end()
  }
}

/** Registers the file's hooks: the database's URL before its tests, its schema dropped after them. */
export const useCli = (): void => {
  beforeAll(() => {
    url = databaseUrl()
    schema = uniqueSchemaName("cli")
  })
  afterAll(async () => {
    await query(`DROP SCHEMA IF EXISTS $schema CASCADE`)
  })
}
