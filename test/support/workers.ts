/**
 * Multi-process test support: a migrated schema reachable with a plain `pg` client, and runner processes.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import type { ChildProcess } from "node:child_process"
import pg from "pg"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { databaseUrl, dropSchema, uniqueSchemaName } from "./database.js"
import { exited, spawnFixture } from "./process.js"

export interface TestDb {
  readonly schema: string
  readonly url: string
  readonly query: <R = Record<string, unknown>>(text: string, values?: ReadonlyArray<unknown>) => Promise<Array<R>>
  readonly close: () => Promise<void>
}

/** A fresh migrated schema; `close` drops it. */
export const migratedSchema = async (label: string): Promise<TestDb> => {
  const url = databaseUrl()
  const schema = uniqueSchemaName(label)
  await Effect.runPromise(
    migrate({ schema }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })), Effect.scoped)
  )
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  return {
    schema,
    url,
    query: async <R>(text: string, values?: ReadonlyArray<unknown>) =>
      (await pool.query(text.replaceAll("$schema", `"${schema}"`), values as Array<unknown>)).rows as Array<R>,
    close: async () => {
      await dropSchema((text) => pool.query(text), schema)
      await pool.end()
    }
  }
}

export interface Worker {
  readonly child: ChildProcess
  /** Every JSON line the process printed, in order (a line that is not JSON becomes `{ event: "text", line }`). */
  readonly events: Array<Record<string, unknown>>
  readonly stderr: () => string
  /**
   * Resolves with the first event matching `predicate` printed at index `from` (of `events`) or later; fails when
   * the process exits or `timeoutMs` passes first.
   */
  readonly waitFor: (
    predicate: (e: Record<string, unknown>) => boolean,
    timeoutMs?: number,
    from?: number
  ) => Promise<Record<string, unknown>>
  /** Writes one JSON command line to the process's stdin. */
  readonly send: (command: unknown) => void
  /** SIGTERM, then the exit. */
  readonly stop: () => Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/** Spawns a fixture that prints JSON lines on stdout (and may read JSON commands on stdin). */
export const startProcess = (
  fixture: string,
  args: ReadonlyArray<string>,
  env: Record<string, string | undefined>
): Worker => {
  const child = spawnFixture(fixture, [...args], { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] })
  const events: Array<Record<string, unknown>> = []
  const waiters: Array<() => void> = []
  let buffer = ""
  let stderr = ""
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()))
  child.stdout?.on("data", (d: Buffer) => {
    buffer += d.toString()
    let nl: number
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl)
      buffer = buffer.slice(nl + 1)
      try {
        events.push(JSON.parse(line) as Record<string, unknown>)
      } catch {
        events.push({ event: "text", line })
      }
    }
    for (const w of waiters.splice(0)) w()
  })
  child.on("exit", () => {
    for (const w of waiters.splice(0)) w()
  })
  // What a failed wait shows of what the process said last.
  const lastLines = () => JSON.stringify(events.slice(-8))
  const waitFor = (predicate: (e: Record<string, unknown>) => boolean, timeoutMs = 30_000, from = 0) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `process ${child.pid}: no matching event in ${timeoutMs} ms; stderr: ${stderr}; its last lines: ${lastLines()}`
            )
          ),
        timeoutMs
      )
      const check = () => {
        const found = events.slice(from).find(predicate)
        if (found !== undefined) {
          clearTimeout(timer)
          resolve(found)
        } else if (child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer)
          reject(
            new Error(
              `process ${child.pid} exited (${child.exitCode ?? child.signalCode}): ${stderr}; its last lines: ${lastLines()}`
            )
          )
        } else waiters.push(check)
      }
      check()
    })
  return {
    child,
    events,
    stderr: () => stderr,
    waitFor,
    send: (command) => child.stdin?.write(JSON.stringify(command) + "\n"),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM")
      return exited(child)
    }
  }
}

/** Starts `test/fixtures/job-worker.ts` on the schema with the given options. */
export const startWorker = (db: TestDb, options: Record<string, unknown> = {}): Worker =>
  startProcess("test/fixtures/job-worker.ts", [JSON.stringify(options)], {
    DATABASE_URL: db.url,
    KAIROS_SCHEMA: db.schema
  })

/** A query's rows under a title, one JSON line each, for a failure's message (what a test saw when it gave up). */
export const showRows = async (db: TestDb, title: string, sql: string): Promise<string> =>
  `${title}:\n${(await db.query(sql)).map((r) => `  ${JSON.stringify(r)}`).join("\n") || "  (none)"}`

/** Kills whatever is left (for `finally` blocks). */
export const killAll = (workers: ReadonlyArray<Worker>) => {
  for (const w of workers) {
    if (w.child.exitCode === null && w.child.signalCode === null) {
      w.child.kill("SIGCONT")
      w.child.kill("SIGKILL")
    }
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * How much later than its claim an execution may record its start (`processed_items.started_at`, the worker's clock
 * when the handler begins): a rate's windows count claims, so a span of recorded starts is checked less this. On a
 * loaded machine the handler of the first item of a window began up to 50 ms after its claim (limits.multiprocess) and
 * a span of three windows came out at 992 ms (limits-connections, CI on the slow machine, its workers' connections cut).
 */
export const START_LAG_MS = 250

/**
 * Polls `check` every 50 ms until it holds; fails naming `what` after `timeoutMs`, with what `explain` then says (the
 * state a reader needs to tell why).
 */
export const until = async (
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
  explain?: () => Promise<string>
): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await sleep(50)
  }
  const why = explain === undefined ? "" : `; ${await explain()}`
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${why}`)
}
