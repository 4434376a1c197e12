/**
 * Real child processes for integration tests: TypeScript entry points run through tsx.
 */
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process"
import path from "node:path"

export const projectRoot = path.resolve(new URL("../..", import.meta.url).pathname)

/** Spawns `node --import tsx <script> ...args` from the project root. */
export const spawnTs = (script: string, args: ReadonlyArray<string> = [], options: SpawnOptions = {}): ChildProcess =>
  spawn(process.execPath, ["--import", "tsx", path.resolve(projectRoot, script), ...args], {
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
