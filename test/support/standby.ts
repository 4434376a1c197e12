/**
 * A primary and a streaming standby from the machine's PostgreSQL binaries (Debian's postgresql-15: `pg_config
 * --bindir` has `pg_basebackup` and `pg_ctl promote`, which the embedded package lacks), for the failover test. Every
 * server runs as the `postgres` user (when this process is root), on a free port, in a temporary folder.
 */
import { execFile, execFileSync } from "node:child_process"
import fs from "node:fs/promises"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { promisify } from "node:util"
import { portTakenIn, postmasterPid } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { serverTempDir } from "./process.js"
import { freePort } from "./proxy.js"

const run = promisify(execFile)

/** A process's state and parent, from `/proc/<pid>/stat` (after the command's closing parenthesis); undefined: gone. */
const statOf = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return { state: state!, ppid: Number(ppid) }
  } catch {
    return undefined
  }
}

/** Whether process `pid` still runs (a zombie does not: dead, and only its parent has not reaped it yet). */
const alive = (pid: number) => {
  const stat = statOf(pid)
  return stat !== undefined && stat.state !== "Z"
}

/** The processes whose parent is `pid`. */
const childrenOf = (pid: number) =>
  readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((child) => statOf(child)?.ppid === pid)

/**
 * SIGKILL to the postmaster of `dataDir` and every process it forked, stopped first so that it forks no more; resolves
 * once they are dead (their connections are closed by then).
 */
const killWithChildren = async (dataDir: string) => {
  const pid = await postmasterPid(dataDir)
  if (pid === undefined) throw new Error(`no postmaster runs in ${dataDir}`)
  process.kill(pid, "SIGSTOP")
  // Each child is in a process group of its own (PostgreSQL's children call setsid): killed one by one. One may have
  // ended since it was listed.
  const processes = [...childrenOf(pid), pid]
  for (const p of processes) {
    try {
      process.kill(p, "SIGKILL")
    } catch {
      // Gone already.
    }
  }
  for (let i = 0; i < 500 && processes.some(alive); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  if (processes.some(alive)) throw new Error(`the server's processes outlived SIGKILL for 5 s (${dataDir})`)
}

/** The folder of PostgreSQL's server binaries, with everything the test needs; undefined when there is none. */
export const postgresBinaries = (): string | undefined => {
  const candidates: Array<string> = []
  try {
    candidates.push(execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim())
  } catch {
    // No pg_config on the PATH: Debian's usual places.
  }
  candidates.push("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
  const needed = ["initdb", "pg_ctl", "pg_basebackup", "postgres"]
  return candidates.find((dir) => needed.every((b) => existsSync(path.join(dir, b))))
}

const isRoot = () => process.getuid?.() === 0

/** Runs a PostgreSQL binary as the `postgres` user (as this user when not root). */
const pgRun = (bindir: string, binary: string, args: ReadonlyArray<string>) => {
  const file = path.join(bindir, binary)
  return isRoot()
    ? run("runuser", ["-u", "postgres", "--", file, ...args], { timeout: 120_000 })
    : run(file, [...args], { timeout: 120_000 })
}

export interface Server {
  readonly port: number
  readonly dataDir: string
  readonly url: string
}

export interface Cluster {
  readonly primary: Server
  readonly standby: Server
  /** Starts a server whose data folder is set up (the standby after `pg_basebackup`). */
  readonly start: (server: Server) => Promise<void>
  /**
   * The server crashes: SIGKILL to the postmaster and every process it forked (stopped first, so that it forks no
   * more). Its connections drop as the kernel closes them, as when a machine dies. Not `pg_ctl stop -m immediate`:
   * that waits until the postmaster has reaped every child, and a loaded run saw it take 60 s (the postmaster logged
   * SIGKILL to its recalcitrant children at 5 s and was shut down 55 s later); the workers, cut off for longer than
   * their leases, then rightly took each other's runs back, and the test's premise (a failover in ~3 s) was gone.
   */
  readonly crash: (server: Server) => Promise<void>
  /** `pg_ctl promote -w`: the standby ends recovery and accepts writes when this returns. */
  readonly promote: (server: Server) => Promise<void>
  /** The server's log so far. */
  readonly log: (server: Server) => Promise<string>
  /** Stops both (immediately) and removes their folders. */
  readonly destroy: () => Promise<void>
}

const urlOf = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`

/**
 * A primary (initdb, trust authentication on 127.0.0.1, replication allowed) started, and its standby copied by
 * `pg_basebackup -R` and started, streaming from `replicateThrough(primaryPort)` (a port of the test's choosing, for
 * a lagging link), with `standbySettings`. `primarySettings` are appended to the primary's postgresql.conf.
 */
export const startCluster = async (options: {
  readonly bindir: string
  readonly primarySettings?: Readonly<Record<string, string>>
  readonly replicateThrough?: (primaryPort: number) => Promise<number>
}): Promise<Cluster> => {
  const { bindir } = options
  const base = await serverTempDir("kairos-failover-")
  if (isRoot()) execFileSync("chown", ["postgres:postgres", base])
  // A server's port is given to it on the command line at every start (`start`), not written in its configuration.
  const onFreePort = async (dataDir: string): Promise<Server> => {
    const port = await freePort()
    return { port, dataDir, url: urlOf(port) }
  }
  const primary = await onFreePort(path.join(base, "primary"))
  const standby = await onFreePort(path.join(base, "standby"))
  const started = new Set<Server>()
  const logFile = (server: Server) => `${server.dataDir}.log`
  const settings = (entries: Readonly<Record<string, string>>) =>
    Object.entries(entries)
      .map(([k, v]) => `${k} = ${v}\n`)
      .join("")

  const start = async (server: Server) => {
    await pgRun(bindir, "pg_ctl", [
      ...["start", "-w", "-t", "60", "-D", server.dataDir, "-l", logFile(server)],
      ...["-o", `-p ${server.port}`]
    ])
    started.add(server)
  }
  /**
   * A server's first start, on the port `freePort` found, or on another if something took that one meanwhile (the
   * other test files start servers and open connections all along): the port is only free when it was asked.
   */
  const firstStart = async (server: Server) => {
    for (let attempt = 1; ; attempt++) {
      // pg_ctl appends to the log: only this attempt's lines say why it failed.
      const before = (await fs.readFile(logFile(server), "utf8").catch(() => "")).length
      try {
        return await start(server)
      } catch (e) {
        const log = (await fs.readFile(logFile(server), "utf8").catch(() => "")).slice(before)
        if (attempt >= 5 || !portTakenIn(log)) throw e
        Object.assign(server, await onFreePort(server.dataDir))
      }
    }
  }
  const cluster: Cluster = {
    primary,
    standby,
    start,
    crash: async (server) => {
      // Without /proc (not Linux) the children cannot be listed: the orderly immediate stop instead.
      if (existsSync("/proc/self/stat")) await killWithChildren(server.dataDir)
      else await pgRun(bindir, "pg_ctl", ["stop", "-m", "immediate", "-D", server.dataDir])
      started.delete(server)
    },
    promote: async (server) => {
      await pgRun(bindir, "pg_ctl", ["promote", "-w", "-t", "60", "-D", server.dataDir])
    },
    log: (server) => fs.readFile(logFile(server), "utf8").catch(() => ""),
    destroy: async () => {
      for (const server of started) {
        await pgRun(bindir, "pg_ctl", ["stop", "-m", "immediate", "-D", server.dataDir]).catch(() => undefined)
      }
      started.clear()
      await fs.rm(base, { recursive: true, force: true })
    }
  }
  try {
    await pgRun(bindir, "initdb", ["-D", primary.dataDir, "-U", "postgres", "--auth=trust", "--no-sync"])
    await fs.appendFile(
      path.join(primary.dataDir, "postgresql.conf"),
      settings({
        listen_addresses: "'127.0.0.1'",
        unix_socket_directories: `'${base}'`,
        max_connections: "100",
        shared_buffers: "'32MB'",
        wal_level: "replica",
        max_wal_senders: "4",
        // The standby is stopped immediately at the end: nothing on disk needs to survive the machine.
        fsync: "off",
        ...options.primarySettings
      })
    )
    await firstStart(primary)
    await pgRun(bindir, "pg_basebackup", [
      "-D",
      standby.dataDir,
      "-R",
      "-X",
      "stream",
      "-c",
      "fast",
      "-h",
      "127.0.0.1",
      "-p",
      String(primary.port),
      "-U",
      "postgres"
    ])
    const through = options.replicateThrough === undefined ? primary.port : await options.replicateThrough(primary.port)
    // After the lines `-R` wrote: the last setting of a name wins.
    await fs.appendFile(
      path.join(standby.dataDir, "postgresql.auto.conf"),
      settings({
        primary_conninfo: `'host=127.0.0.1 port=${through} user=postgres application_name=standby'`,
        synchronous_standby_names: "''"
      })
    )
    await firstStart(standby)
    return cluster
  } catch (e) {
    await cluster.destroy()
    throw e
  }
}
