/**
 * Small helpers shared by the benchmark: timing, statistics, waiting, and the admin connection used to create,
 * inspect and drop each system's schema.
 */
import { readdirSync, readFileSync } from "node:fs"
import pg from "pg"

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Milliseconds since an arbitrary origin, sub-millisecond. */
export const now = (): number => performance.now()

export const median = (xs: ReadonlyArray<number>): number => {
  if (xs.length === 0) return Number.NaN
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/** The nearest-rank percentile (p in 0..100) of the samples. */
export const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return Number.NaN
  const s = [...xs].sort((a, b) => a - b)
  const rank = Math.max(1, Math.ceil((p / 100) * s.length))
  return s[Math.min(s.length, rank) - 1]!
}

/** A promise with its resolver outside (Node 20 has no `Promise.withResolvers`). */
export interface Latch<A> {
  readonly promise: Promise<A>
  readonly resolve: (a: A) => void
}
export const latch = <A = void>(): Latch<A> => {
  let resolve!: (a: A) => void
  const promise = new Promise<A>((r) => {
    resolve = r
  })
  return { promise, resolve }
}

/** Resolves true when `p` settles first, false when `ms` pass first. */
export const within = async (p: Promise<unknown>, ms: number): Promise<boolean> => {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([p.then(() => true as const), timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** Polls `check` every `everyMs` until it is true or `timeoutMs` passes; returns whether it became true. */
export const waitFor = async (check: () => Promise<boolean>, timeoutMs: number, everyMs = 10): Promise<boolean> => {
  const deadline = now() + timeoutMs
  while (true) {
    if (await check()) return true
    if (now() > deadline) return false
    await sleep(everyMs)
  }
}

/** `SELECT NOT EXISTS (...)`: true when the query returns no row. */
export const isEmpty = async (db: pg.Pool, query: string, params: ReadonlyArray<unknown> = []): Promise<boolean> => {
  const { rows } = await db.query<{ empty: boolean }>(`SELECT NOT EXISTS (${query}) AS empty`, [...params])
  return rows[0]!.empty
}

export const quoteIdent = (name: string): string => `"${name.replace(/"/g, '""')}"`

/** The admin pool: schemas, checks and setup rows. Never used by a system under test. */
export const adminPool = (url: string): pg.Pool => {
  const pool = new pg.Pool({ connectionString: url, max: 3, application_name: "kairos-bench-admin" })
  pool.on("error", () => undefined)
  return pool
}

export const dropSchema = async (db: pg.Pool, schema: string): Promise<void> => {
  // DROP SCHEMA ... CASCADE reports every dropped object as a NOTICE; silence them.
  const client = await db.connect()
  try {
    await client.query("SET client_min_messages = warning")
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`)
    await client.query("RESET client_min_messages")
  } finally {
    client.release()
  }
}

export const fmtInt = (n: number): string =>
  Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : n === Infinity ? "∞" : "—"

export const fmtNum = (n: number, digits = 1): string =>
  Number.isFinite(n) ? n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits }) : "—"

/**
 * Pickup latency. The system's handler calls `handled(Number(payload))`; `run` then, `samples` times, one at a
 * time, enqueues one item (its payload the sample number) into the idle, started worker and times from the enqueue
 * call until the handler runs. A sample not picked up within `timeoutMs` counts as `timeoutMs`; after `giveUpAfter`
 * such samples the rest are skipped (a worker that only polls would otherwise take minutes).
 */
export const pickupSampler = () => {
  const waiting = new Map<number, Latch<number>>()
  return {
    handled: (i: number): void => waiting.get(i)?.resolve(now()),
    run: async (options: {
      readonly samples: number
      readonly enqueue: (i: number) => Promise<unknown>
      readonly timeoutMs?: number | undefined
      readonly gapMs?: number | undefined
      readonly giveUpAfter?: number | undefined
    }): Promise<{ readonly latencies: ReadonlyArray<number>; readonly timedOut: number }> => {
      const timeoutMs = options.timeoutMs ?? 3_000
      const latencies: Array<number> = []
      let timedOut = 0
      // Sample 0 is a warm-up, not counted (first connections, prepared statements, JIT).
      for (let i = 0; i <= options.samples; i++) {
        const l = latch<number>()
        waiting.set(i, l)
        const t0 = now()
        const enqueued = options.enqueue(i)
        const ok = await within(l.promise, timeoutMs)
        await enqueued
        waiting.delete(i)
        if (i > 0) {
          if (ok) latencies.push((await l.promise) - t0)
          else {
            timedOut++
            latencies.push(timeoutMs)
          }
        }
        if (timedOut >= (options.giveUpAfter ?? 10)) break
        // Let the worker record the execution and go idle again.
        await sleep(options.gapMs ?? 30)
      }
      return { latencies, timedOut }
    }
  }
}

/**
 * Wall time, this process's CPU time (user + system) and, on Linux, the whole machine's busy CPU time (Postgres's
 * work included when it runs here) since it was made.
 */
export const stopwatch = () => {
  const t0 = now()
  const cpu0 = process.cpuUsage()
  const busy0 = machineBusyMs()
  return {
    read: (): { readonly seconds: number; readonly cpuMs: number; readonly machineMs: number | undefined } => {
      const cpu = process.cpuUsage(cpu0)
      const busy = machineBusyMs()
      return {
        seconds: (now() - t0) / 1000,
        cpuMs: (cpu.user + cpu.system) / 1000,
        machineMs: busy0 === undefined || busy === undefined ? undefined : busy - busy0
      }
    }
  }
}

/** Milliseconds of CPU the whole machine has spent busy (Linux's /proc/stat), or undefined elsewhere. */
export const machineBusyMs = (): number | undefined => {
  try {
    const [, ...fields] = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/)
    const [user, nice, system, , , irq, softirq, steal] = fields.map(Number)
    return ((user! + nice! + system! + irq! + softirq! + steal!) * 1000) / 100 // USER_HZ is 100 on Linux
  } catch {
    return undefined
  }
}

/**
 * The CPU time (user + system, ms) of every process of the Postgres server `db` connects to — the postmaster and
 * all its children: backends, autovacuum, checkpointer… — read from /proc (Linux, the server on this machine), or
 * undefined when it cannot be read there. It counts what the server does for anyone: on a server others use too,
 * their work as well.
 */
export const serverCpuMs = async (db: pg.Pool): Promise<number | undefined> => {
  try {
    const { rows } = await db.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")
    const statOf = (pid: string | number) => {
      const text = readFileSync(`/proc/${pid}/stat`, "utf8")
      // Fields after the command name (which may hold spaces, in parentheses): state is field 3.
      const rest = text.slice(text.lastIndexOf(")") + 2).split(" ")
      return { comm: text.slice(text.indexOf("(") + 1, text.lastIndexOf(")")), ppid: rest[1]!, cpu: rest }
    }
    const backend = statOf(rows[0]!.pid)
    if (!backend.comm.startsWith("postgres")) return undefined
    const postmaster = backend.ppid
    let ticks = 0
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const s = statOf(entry)
        // utime and stime are fields 14 and 15 (11 and 12 after the state).
        if (entry === postmaster || s.ppid === postmaster) ticks += Number(s.cpu[11]) + Number(s.cpu[12])
      } catch {
        // The process ended meanwhile.
      }
    }
    return (ticks * 1000) / 100 // USER_HZ is 100 on Linux
  } catch {
    return undefined
  }
}
