/**
 * Hostile handlers: whatever a handler throws, returns or does to its process, every outcome is recorded and the
 * other items are unaffected. In-process runner on the Postgres stores for the ones a process survives; a real
 * worker process for `process.exit`. Integration: a real Postgres, the real clock (a handler blocks the event loop
 * for 5 s).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { describe, it } from "vitest"
import { Runner } from "../../src/index.js"
import { TestSchema } from "../support/database.js"
import { PgStores } from "../support/pgStores.js"
import { killAll, migratedSchema, startWorker, until } from "../support/workers.js"

const Live = Runner.layer({ workers: 4, interval: "1 second", leaseDuration: "30 seconds" }).pipe(
  Layer.provideMerge(PgStores("hostile"))
)

/** Each hostile handler, by the payload of its item. */
const hostile: Record<string, () => unknown> = {
  "throw-number": () => {
    throw 42
  },
  "throw-null": () => {
    throw null
  },
  "throw-undefined": () => {
    throw undefined
  },
  "throw-message-getter": () => {
    throw Object.defineProperty({}, "message", {
      get() {
        throw new Error("no message for you")
      }
    })
  },
  "reject-proxy": () =>
    Promise.reject(
      new Proxy(
        {},
        {
          get() {
            throw new Error("trap")
          },
          getPrototypeOf() {
            throw new Error("trap")
          }
        }
      )
    ),
  "then-getter": () =>
    Object.defineProperty({}, "then", {
      get() {
        throw new Error("then getter")
      }
    }),
  // Never settles and ignores its signal: the timeout (1 s for this type) ends it.
  "never-resolves": () => new Promise(() => undefined),
  // Blocks the event loop for 5 s, then returns: slow, not failed.
  "blocks-5s": () => {
    const until = Date.now() + 5000
    while (Date.now() < until) {
      // busy
    }
    return "done"
  },
  "returns-10mb": () => "x".repeat(10 * 1024 * 1024),
  "throws-10mb": () => {
    throw new Error("y".repeat(10 * 1024 * 1024))
  }
}

layer(Live, { timeout: "90 seconds", excludeTestServices: true })("hostile handlers in process", (it) => {
  it.effect("every outcome is recorded once, with a readable error where it failed; 40 other items all succeed", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const schema = yield* TestSchema
      const runner = yield* Runner.Runner
      yield* runner.register("hostile", (job) => hostile[job.payload]!(), { timeout: "1 second" })
      yield* runner.register("fine", () => ({ ok: true }))
      const items = sql(`${schema}.queue_items`)
      for (const name of Object.keys(hostile)) {
        yield* sql`INSERT INTO ${items} (task_type, payload, thread) VALUES ('hostile', ${name}, 1)`
      }
      yield* sql`INSERT INTO ${items} (task_type, payload, thread) SELECT 'fine', g::text, 1 FROM generate_series(1, 40) g`
      yield* runner.start
      const processed = sql(`${schema}.processed_items`)
      for (let i = 0; i < 600; i++) {
        const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${processed}`
        if (row!.n >= 50) break
        yield* Effect.sleep("100 millis")
      }
      const rows = yield* sql<{ payload: string; status: string; error_msg: string; n: number }>`
        SELECT payload, status, left(error_msg, 200) AS error_msg, length(error_msg) AS n FROM ${processed}
        WHERE task_type = 'hostile' ORDER BY payload`
      const byName = Object.fromEntries(rows.map((r) => [r.payload, r]))
      expect(rows.length).toBe(Object.keys(hostile).length)
      expect(Object.keys(byName).sort()).toEqual(Object.keys(hostile).sort())
      for (const name of ["blocks-5s", "returns-10mb"]) expect(byName[name]!.status).toBe("ok")
      for (const name of Object.keys(hostile).filter((n) => n !== "blocks-5s" && n !== "returns-10mb")) {
        expect(byName[name]!.status, name).toBe("error")
        expect(byName[name]!.error_msg.length, name).toBeGreaterThan(0)
      }
      expect(byName["throw-number"]!.error_msg).toContain("42")
      expect(byName["then-getter"]!.error_msg).toContain("then getter")
      expect(byName["never-resolves"]!.error_msg).toMatch(/timed out|timeout/i)
      // A 10 MB message is stored cut, saying so.
      expect(byName["throws-10mb"]!.n).toBeLessThanOrEqual(64 * 1024)
      const [cut] = yield* sql<{ tail: string }>`
        SELECT right(error_msg, 60) AS tail FROM ${processed} WHERE payload = 'throws-10mb'`
      expect(cut!.tail).toContain("truncated")
      // The others were unaffected.
      const [fine] = yield* sql<{ ok: number; all: number }>`
        SELECT count(*) FILTER (WHERE status = 'ok')::int AS ok, count(*)::int AS all FROM ${processed}
        WHERE task_type = 'fine'`
      expect(fine).toEqual({ ok: 40, all: 40 })
      const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${items}`
      expect(left!.n).toBe(0)
    })
  )
})

describe("a handler that calls process.exit", () => {
  it(
    "the worker says why it is going on stderr, and the item beside it runs elsewhere",
    { timeout: 90_000 },
    async () => {
      const db = await migratedSchema("exit")
      const config = { workers: 2, interval: "1 second", leaseDuration: "2 seconds" }
      const first = startWorker(db, { config })
      const workers = [first]
      try {
        await first.waitFor((e) => e.event === "ready")
        let stderr = ""
        first.child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()))
        await db.query(
          `INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('sleepy', '500', 1), ('exit', '', 1)`
        )
        const code = await new Promise<number | null>((resolve) => first.child.on("exit", (c) => resolve(c)))
        expect(code).toBe(0)
        expect(stderr).toMatch(/kairos: the process is exiting \(code 0\) while \d execution\(s\) ran/)
        expect(stderr).toContain("exit")
        // Another worker (that does not run "exit" items) takes the sleepy item back once its lease expires.
        await db.query(`DELETE FROM $schema.queue_items WHERE task_type = 'exit'`)
        const second = startWorker(db, { config })
        workers.push(second)
        await until(
          async () =>
            (
              await db.query<{ n: number }>(
                `SELECT count(*)::int AS n FROM $schema.processed_items WHERE task_type = 'sleepy'`
              )
            )[0]!.n === 1,
          60_000,
          "the sleepy item to run elsewhere"
        )
        expect((await second.stop()).code).toBe(0)
      } finally {
        killAll(workers)
        await db.close()
      }
    }
  )
})
