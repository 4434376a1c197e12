/**
 * The pooled URL goes away while the direct one stays: a runner whose statements go through a proxy (a pooler's
 * stand-in) and whose wake-up listener is on a direct connection. The proxy refuses everything for a while, as a
 * pooler that restarts does; the listener never loses its connection, so no reconnect comes to end a backoff. Each
 * failed tick waits 1 s, not a doubled wait, and the runner takes the work enqueued meanwhile within about a second
 * of the proxy's return. When every failure doubled, the tick after 8.5 s of failures came at 15 s. The same when the
 * proxy resets the pool's connections as a load balancer does (ECONNRESET): each one fails the statement that next
 * uses it, and the failed ticks wait 1 s each, as for a connection the server ended.
 * Integration: a real Postgres, a TCP proxy, wall time.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Logger } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as PgKairos from "../../src/layers/PgKairos.js"
import { Runner } from "../../src/index.js"
import { databaseUrl } from "../support/database.js"
import { freePort, type Proxy, startProxy } from "../support/proxy.js"
import { migratedSchema, type TestDb } from "../support/workers.js"

let db: TestDb
let proxy: Proxy

beforeAll(async () => {
  db = await migratedSchema("pooledoutage")
  proxy = await startProxy(Number(new URL(databaseUrl()).port || 5432))
})

afterAll(async () => {
  await proxy?.close()
  await db?.close()
})

/**
 * A runner whose statements go through `proxyPort` and whose listener is on the direct URL, with a "work" handler
 * that notes when it starts; `body` drives it. Gives back what `body` returned, the log lines and the starts.
 */
const throughProxy = async <A>(
  proxyPort: number,
  maxConnections: number,
  body: (
    started: ReadonlyArray<number>,
    lines: ReadonlyArray<string>
  ) => Effect.Effect<A, never, Runner.Runner | SqlClient.SqlClient>
) => {
  const direct = new URL(databaseUrl())
  const pooled = new URL(databaseUrl())
  pooled.hostname = "127.0.0.1"
  pooled.port = String(proxyPort)
  const lines: Array<string> = []
  const logger = Logger.make(({ message }) => {
    lines.push(Array.isArray(message) ? message.join(" ") : String(message))
  })
  const started: Array<number> = []
  const result = await Effect.gen(function* () {
    const runner = yield* Runner.Runner
    yield* runner.register("work", () => Effect.sync(() => void started.push(Date.now())))
    yield* runner.start
    return yield* body(started, lines)
  }).pipe(
    Effect.provide(
      PgKairos.layer({
        url: pooled.toString(),
        directUrl: direct.toString(),
        schema: db.schema,
        migrate: false,
        workers: 2,
        maxConnections,
        // The poll is no help here: only ticks that wake up after failures can take the item.
        interval: "1 minute"
      })
    ),
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Effect.scoped,
    Effect.runPromise
  )
  return { result, lines, started }
}

/** Inserted on the direct connection: its NOTIFY wakes the runner. */
const enqueue = (payload: string) =>
  Effect.promise(() =>
    db.query(`INSERT INTO $schema.queue_items (task_type, payload, thread) VALUES ('work', $1, 1)`, [payload])
  )

describe("the pooled URL away while the direct URL stays", () => {
  it(
    "failed ticks wait 1 s, logged thinly; the runner runs what was enqueued within ~1 s of the return",
    {
      timeout: 60_000
    },
    async () => {
      const { lines, result, started } = await throughProxy(proxy.port, 10, (started) =>
        Effect.gen(function* () {
          // The pooler goes away: its connections are cut, and new ones refused (nothing listens on a free port).
          proxy.switchTo(yield* Effect.promise(freePort))
          proxy.cutAll()
          // Its ticks fail.
          yield* enqueue("x")
          const awayAt = Date.now()
          yield* Effect.sleep("8500 millis")
          const back = Date.now()
          proxy.switchTo(Number(new URL(databaseUrl()).port || 5432))
          for (let i = 0; i < 200 && started.length === 0; i++) yield* Effect.sleep("50 millis")
          return { awayAt, back }
        })
      )
      const failed = lines.filter((l) => l.startsWith("tick failed"))
      const said = lines.join("\n")
      // It failed, said why, and waited 1 s each time: about eight failures in 8.5 s, said at the 1st, 2nd, 4th, 8th.
      expect(failed.length, said).toBeGreaterThanOrEqual(2)
      expect(failed[0], said).toMatch(
        /^tick failed \(retrying in 1s, its connection was lost; the database answers; 1 in a row\)/
      )
      expect(
        failed.every((l) => l.includes("retrying in 1s")),
        said
      ).toBe(true)
      expect(failed.length, said).toBeLessThanOrEqual(4)
      // The item ran within ~1 s of the proxy's return (a wide bound: 3 s), not at a doubled wait's end.
      expect(started, said).toHaveLength(1)
      expect(started[0]! - result.back, said).toBeLessThan(3000)
      expect(started[0]! - result.awayAt, said).toBeGreaterThanOrEqual(8500)
    }
  )

  it(
    "connections reset (ECONNRESET) one by one as they are used: failed ticks wait 1 s each; the work runs within seconds",
    { timeout: 60_000 },
    async () => {
      const resetting = await startProxy(Number(new URL(databaseUrl()).port || 5432))
      try {
        const { lines, result, started } = await throughProxy(resetting.port, 8, (started, lines) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            // Eight connections in the pool, idle; then each is reset when next used: ticks meet them one by one.
            yield* Effect.all(
              Array.from({ length: 8 }, () => sql`SELECT pg_sleep(0.2)`.pipe(Effect.orDie)),
              { concurrency: "unbounded" }
            )
            const armed = resetting.resetOnNextUse()
            yield* enqueue("y")
            const at = Date.now()
            // Until the item started and the runner said it was back: the tick that claims the item says so once it
            // has ended, which can be after the handler started.
            const back = () => lines.some((l) => l.includes("the database is reachable again"))
            for (let i = 0; i < 400 && (started.length === 0 || !back()); i++) yield* Effect.sleep("50 millis")
            return { armed, at }
          })
        )
        const failed = lines.filter((l) => l.startsWith("tick failed"))
        const said = lines.join("\n")
        expect(result.armed, said).toBeGreaterThanOrEqual(8)
        // Ticks failed on reset connections (read ECONNRESET, or the client that met it: "not queryable"), each seen
        // as a lost connection while the database answers: 1 s each, then the runner said it was back.
        expect(failed.length, said).toBeGreaterThanOrEqual(1)
        expect(said).toMatch(/the database is reachable again: ticked after \d+ failed tick/)
        expect(
          failed.every((l) => l.includes("retrying in 1s, its connection was lost; the database answers")),
          said
        ).toBe(true)
        // Eight dead connections at 1 s each at most, with a wide margin; doubled waits took 1+2+4+8... s.
        expect(started, said).toHaveLength(1)
        expect(started[0]! - result.at, said).toBeLessThan(15_000)
      } finally {
        await resetting.close()
      }
    }
  )
})
