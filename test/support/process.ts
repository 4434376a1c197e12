/**
 * Real child processes for integration tests: TypeScript entry points run through tsx.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { inject } from "vitest"
import { diagnose, reportFlags } from "./diagnose.js"

export const projectRoot = path.resolve(new URL("../..", import.meta.url).pathname)

/**
 * A fresh temporary folder, `prefix` and random letters, that a server started as root can reach: it runs as the
 * `postgres` user, and mkdtemp makes a folder only its owner may enter.
 */
export const serverTempDir = async (prefix: string): Promise<string> => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix))
  await fs.chmod(dir, 0o755)
  return dir
}

/** Spawns `node --import tsx <script> ...args` from the project root (with `reportFlags`: see diagnose.ts). */
export const spawnTs = (script: string, args: ReadonlyArray<string> = [], options: SpawnOptions = {}): ChildProcess =>
  spawn(process.execPath, [...reportFlags, "--import", "tsx", path.resolve(projectRoot, script), ...args], {
    cwd: projectRoot,
    stdio: ["ignore", "pipe", "pipe"],
    ...options
  })

/**
 * The `node` arguments that run a fixture of `test/fixtures` or an example (given by its path from the project root,
 * e.g. `test/fixtures/job-worker.ts`): its compiled copy (see compiledFixtures.ts), or, without the global setup that
 * compiles them (a run of another config), the TypeScript through tsx on the sources.
 */
export const fixtureArgs = (script: string): Array<string> => {
  const compiled = inject("compiledFixtures")
  if (compiled === undefined) return [...reportFlags, "--conditions=kairos-source", "--import", "tsx", script]
  return [path.join(compiled, script.replace(/\.ts$/, ".js"))]
}

/** Spawns a fixture (see `fixtureArgs`) with plain `node`, from the project root. */
export const spawnFixture = (
  script: string,
  args: ReadonlyArray<string> = [],
  options: SpawnOptions = {}
): ChildProcess =>
  spawn(process.execPath, [...fixtureArgs(script), ...args], {
    cwd: projectRoot,
    stdio: ["ignore", "pipe", "pipe"],
    ...options
  })

/** The first line a child prints on stdout. */
export const firstLine = (child: ChildProcess): Promise<string> =>
  new Promise((resolve, reject) => {
    let buffer = ""
    let stderr = ""
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()))
    child.stdout?.on("data", (d: Buffer) => {
      buffer += d.toString()
      const nl = buffer.indexOf("\n")
      if (nl >= 0) resolve(buffer.slice(0, nl))
    })
    child.on("exit", (code) => reject(new Error(`child exited (${code}) before printing a line: ${stderr}`)))
  })

/** Resolves with the exit code (or signal) when the child exits. */
export const exited = (child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode })
      return
    }
    child.on("exit", (code, signal) => resolve({ code, signal }))
  })

/** Whether something accepts TCP connections on 127.0.0.1:port. */
export { portAnswers as portOpen } from "../../src/adapters/postgres/EmbeddedPostgres.js"

/**
 * The bounds of a test that waits for a real process to end by itself (an example, a worker's failing start): the
 * process is killed at `processMs`, some seconds before the test's own `testMs`, so a hang fails at the test's
 * assertions, with what the process printed, and leaves nothing running. Wide: such a process under tsx takes 3-9 s
 * alone and took 31-38 s beside the other files in CI's loaded first pass on a 2-core machine.
 */
export const PROCESS_LIMITS = { processMs: 110_000, testMs: 120_000 } as const

/** What `run` gives back: `spawnSync`'s fields, as strings. */
export interface RunResult {
  readonly status: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
  /** Set when the command could not be started, or was killed at its timeout. */
  readonly error: Error | undefined
}

/**
 * `spawnSync` without blocking: the test file's event loop goes on while the command runs. Vitest's worker talks to
 * its main process over RPC calls that time out after 60 s, and a blocked loop cannot read the answers: a test that
 * waits a minute in `spawnSync` or `execFileSync` (an `npm install` on a loaded machine) fails the whole run with
 * "Timeout calling onTaskUpdate" though every test passed. Past `timeout` (ms) the command is killed (SIGKILL) and
 * `error` says so, and what it was doing then (diagnose.ts).
 */
export const run = (
  command: string,
  args: ReadonlyArray<string>,
  options: SpawnOptions & { readonly timeout?: number; readonly input?: string; readonly encoding?: "utf8" } = {}
): Promise<RunResult> =>
  new Promise((resolve) => {
    const { input, timeout, encoding: _utf8, ...spawnOptions } = options
    const child = spawn(command, [...args], { ...spawnOptions, stdio: ["pipe", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    let error: Error | undefined
    child.stdout!.setEncoding("utf8").on("data", (d: string) => (stdout += d))
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d))
    child.stdin!.end(input ?? "")
    const timer =
      timeout === undefined
        ? undefined
        : setTimeout(() => {
            void diagnose(child, args.includes(reportFlags[0]!)).then((state) => {
              error = new Error(`${command} ${args.join(" ")}: killed after ${timeout} ms; ${state}`)
              child.kill("SIGKILL")
            })
          }, timeout)
    const finish = (status: number | null, signal: NodeJS.Signals | null) => {
      if (timer !== undefined) clearTimeout(timer)
      resolve({ status, signal, stdout, stderr, error })
    }
    // A command that cannot start emits "error" and may never close.
    child.on("error", (e) => {
      error = e
      if (child.pid === undefined) finish(null, null)
    })
    child.on("close", finish)
  })
