/**
 * The kairos command line spawned as a real process against a real Postgres: what the CLI test files share. Each
 * file that calls `useCli()` works in a schema of its own (dropped after the file), so the files run side by side.
 */
import { spawn } from "node:child_process"
import { Console as NodeConsole } from "node:console"
import { Writable } from "node:stream"
import * as Effect from "effect/Effect"
import path from "node:path"
import { afterAll, beforeAll, expect } from "vitest"
import { databaseUrl, dropSchema, uniqueSchemaName } from "./database.js"
import { diagnose, reportFlags } from "./diagnose.js"
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
export const kairos = async (
  args: ReadonlyArray<string>,
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}
) => {
  const run = await runCommand(process.execPath, [...reportFlags, bin, ...args], {
    cwd: options.cwd ?? projectRoot,
    env: options.env ?? process.env,
    timeout: options.timeoutMs ?? 60_000
  })
  // Killed at the timeout: what it was doing then shows where an assertion prints its output.
  const killed = run.error === undefined ? "" : `\n[test] ${run.error.message}`
  return { code: run.status, stdout: run.stdout, stderr: run.stderr + killed }
}
/** A long-running `kairos` process whose output can be awaited line by line. */
export const live = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env) => {
  const child = spawn(process.execPath, [...reportFlags, bin, ...args], {
    cwd: projectRoot,
    env,
    stdio: ["ignore", "pipe", "pipe"]
  })
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
      // Said with what the process was doing then (diagnose.ts): a worker silent at start left nothing to go on.
      const timer = setTimeout(
        () =>
          void diagnose(child, true).then((state) =>
            reject(new Error(`no ${pattern} in ${ms} ms:\n${out}\n${err}\n${state}`))
          ),
        ms
      )
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

/**
 * The command line run in this process: the program the `kairos` binary runs (`program` of
 * src/adapters/cli/main.ts), printing through a Console that collects its text, as a process's piped stdout and
 * stderr would. For a command's answer (its table, its JSON document, its exit code), without a process start each
 * (~0.45 s of CPU); what only a process shows (the binary and its bundle, signals, the environment, a terminal, the
 * development database found from the working folder) is tested through `kairos` and `live`.
 */
export const kairosHere = async (args: ReadonlyArray<string>) => {
  const [{ program }, { fromUnsafe }] = await Promise.all([
    import("../../src/adapters/cli/main.js"),
    import("../../src/adapters/cli/CliOutput.js")
  ])
  const collect = () => {
    let text = ""
    const stream = new Writable({
      write(chunk: Buffer | string, _encoding, done) {
        text += chunk.toString()
        done()
      }
    })
    return { stream, text: () => text }
  }
  const [out, err] = [collect(), collect()]
  const console = fromUnsafe(new NodeConsole({ stdout: out.stream, stderr: err.stream }))
  const code = await Effect.runPromise(program([process.execPath, bin, ...args], console))
  return { code, stdout: out.text(), stderr: err.text() }
}

/** A command on the file's schema, run in this process (`kairosHere`). */
export const db = (args: ReadonlyArray<string>, inSchema = schema) =>
  kairosHere([...args, "--database-url", url, "--schema", inSchema])
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
    await dropSchema((text) => query(text), schema)
  })
}
