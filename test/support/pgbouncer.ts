/**
 * A PgBouncer in transaction mode in front of the test run's database, for the tests that show kairos works through a
 * pooler with nothing configured in it: `auth_type = trust`, no `ignore_startup_parameters`, no
 * `max_prepared_statements`. Debian's package (`apt-get install -y pgbouncer`, 1.18 on Debian 12); it refuses to run
 * as root, so as root it runs as the `postgres` user. A test file starts one and stops it when it ends.
 *
 * Without pgbouncer the tests that need it are skipped, saying so, unless KAIROS_REQUIRE_PGBOUNCER=1 (CI), where its
 * absence fails the run (see pgbouncerTests.ts).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process"
import fs from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import pg from "pg"

/** The pgbouncer executable: PGBOUNCER_PATH when set, else on PATH (Debian installs it in /usr/sbin), if any. */
export const pgbouncerPath = ((): string | undefined => {
  const given = process.env["PGBOUNCER_PATH"]
  if (given !== undefined && given.length > 0) return fs.existsSync(given) ? given : undefined
  const dirs = [...(process.env["PATH"] ?? "").split(path.delimiter), "/usr/sbin", "/usr/local/sbin"]
  for (const dir of dirs) {
    const candidate = path.join(dir, "pgbouncer")
    try {
      fs.accessSync(candidate, fs.constants.X_OK)
      return candidate
    } catch {
      // not here
    }
  }
  return undefined
})()

export interface PgBouncer {
  /** The pooled URL: the test database's, with PgBouncer's host and port. */
  readonly url: string
  readonly port: number
  /** PgBouncer's log so far (for a failure's message). */
  readonly log: () => string
  /** A `SHOW …` command on PgBouncer's admin console (`SHOW POOLS`, `SHOW CLIENTS`), its rows. */
  readonly show: (what: string) => Promise<Array<Record<string, string>>>
  readonly stop: () => Promise<void>
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

/** The `postgres` user's uid and gid when this process is root (PgBouncer refuses to run as root). */
const runAs = (): { uid: number; gid: number } | undefined => {
  if (process.getuid?.() !== 0) return undefined
  const id = (flag: string) => Number.parseInt(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }), 10)
  return { uid: id("-u"), gid: id("-g") }
}

/**
 * Starts PgBouncer in front of `targetUrl` (a `postgres://` URL with a host, a port and a database) in transaction
 * mode, on a free port, and waits until it answers. `poolSize` is its server pool per database and user (default
 * 20, PgBouncer's own default); `maxClientConn` the most clients it accepts (default 500 here; PgBouncer's own is
 * 100). The URL's user may read its admin console (`show`).
 */
export const startPgBouncer = async (
  targetUrl: string,
  options: { readonly poolSize?: number; readonly maxClientConn?: number } = {}
): Promise<PgBouncer> => {
  if (pgbouncerPath === undefined) throw new Error("pgbouncer is not installed (apt-get install -y pgbouncer)")
  const target = new URL(targetUrl)
  const user = decodeURIComponent(target.username || "postgres")
  const password = decodeURIComponent(target.password)
  const database = decodeURIComponent(target.pathname.slice(1) || "postgres")
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kairos-pgbouncer-"))
  const owner = runAs()
  const quote = (s: string) => `"${s.replaceAll('"', '""')}"`
  // With trust, PgBouncer logs clients in without a password and uses the auth file's to log in to the server.
  fs.writeFileSync(path.join(dir, "users.txt"), `${quote(user)} ${quote(password)}\n`)
  fs.writeFileSync(
    path.join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      `${database} = host=${target.hostname} port=${target.port || 5432} dbname=${database}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${path.join(dir, "users.txt")}`,
      "pool_mode = transaction",
      `default_pool_size = ${options.poolSize ?? 20}`,
      `max_client_conn = ${options.maxClientConn ?? 500}`,
      `admin_users = ${user}`,
      `pidfile = ${path.join(dir, "pgbouncer.pid")}`,
      `logfile = ${path.join(dir, "pgbouncer.log")}`,
      ""
    ].join("\n")
  )
  if (owner !== undefined) {
    fs.chownSync(dir, owner.uid, owner.gid)
    for (const f of fs.readdirSync(dir)) fs.chownSync(path.join(dir, f), owner.uid, owner.gid)
  }
  const read = (file: string) => {
    try {
      return fs.readFileSync(path.join(dir, file), "utf8")
    } catch {
      return ""
    }
  }
  let output = ""
  // In the foreground (no -d): this process holds it, and stops it by its pid.
  const child: ChildProcess = spawn(pgbouncerPath, [path.join(dir, "pgbouncer.ini")], {
    stdio: ["ignore", "pipe", "pipe"],
    ...(owner ?? {})
  })
  child.stdout?.on("data", (d: Buffer) => (output += d.toString()))
  child.stderr?.on("data", (d: Buffer) => (output += d.toString()))
  const log = () => read("pgbouncer.log") + output
  const url = new URL(targetUrl)
  url.hostname = "127.0.0.1"
  url.port = String(port)
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve))
      child.kill("SIGINT")
      const timer = setTimeout(() => child.kill("SIGKILL"), 3000)
      await exited
      clearTimeout(timer)
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  // Ready once a query goes through it.
  const deadline = Date.now() + 10_000
  for (;;) {
    if (child.exitCode !== null) {
      const text = log()
      await stop()
      throw new Error(`pgbouncer exited (${child.exitCode}): ${text}`)
    }
    const client = new pg.Client({ connectionString: url.toString() })
    client.on("error", () => undefined)
    try {
      await client.connect()
      await client.query("SELECT 1")
      await client.end()
      break
    } catch (e) {
      await client.end().catch(() => undefined)
      if (Date.now() > deadline) {
        const text = log()
        await stop()
        throw new Error(`pgbouncer did not answer within 10 s (${String(e)}): ${text}`)
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  const show = async (what: string) => {
    const admin = new URL(url)
    admin.pathname = "/pgbouncer"
    // The admin console speaks the simple protocol only: a query without parameters.
    const client = new pg.Client({ connectionString: admin.toString() })
    await client.connect()
    try {
      return (await client.query(`SHOW ${what}`)).rows as Array<Record<string, string>>
    } finally {
      await client.end()
    }
  }
  return { url: url.toString(), port, log, show, stop }
}
