/**
 * PgListener against a real Postgres (integration test: the run's database, wall time, real backends killed with
 * `pg_terminate_backend`). Each test listens on a channel of its own, because NOTIFY is database-wide and test files
 * run in parallel on one database.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, ExecutionStrategy, Exit, Logger, Schedule, Scope } from "effect"
import { randomBytes } from "node:crypto"
import net from "node:net"
import pg from "pg"
import * as PgListener from "../../src/adapters/postgres/PgListener.js"
import { databaseUrl } from "../support/database.js"

const uniqueChannel = () => `kairos_test_${randomBytes(6).toString("hex")}`

// The listener names its connection after its channel; that is how these tests find its backend.
const applicationName = (channel: string) => `kairos-listener:${channel}`

/** Runs one statement on a fresh connection of its own (never the listener's). */
const query = (text: string, values: ReadonlyArray<unknown> = []) =>
  Effect.acquireUseRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: databaseUrl(), application_name: "kairos-test" })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.query(text, [...values])).pipe(Effect.map((r) => r.rows)),
    (client) => Effect.promise(() => client.end())
  )

const notify = (channel: string, payload: string) => query("SELECT pg_notify($1, $2)", [channel, payload])

const listenerPids = (channel: string) =>
  query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", [applicationName(channel)]).pipe(
    Effect.map((rows) => rows.map((row) => Number(row["pid"])))
  )

/** Polls `check` with short sleeps until it holds; fails with `what` after `within`. */
const eventually = (what: string, check: Effect.Effect<boolean>, within: Duration.DurationInput = "10 seconds") =>
  check.pipe(
    Effect.flatMap((ok) => (ok ? Effect.void : Effect.fail("not yet" as const))),
    Effect.retry(Schedule.spaced("50 millis")),
    Effect.timeoutFail({ duration: within, onTimeout: () => new Error(`timed out waiting for: ${what}`) }),
    Effect.orDie
  )

/**
 * A TCP proxy to the run's database whose current connections can be frozen: bytes stop flowing but no socket
 * closes, the way a half-open connection looks to a client. Connections opened later flow normally.
 */
const freezableProxy = Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly freeze: () => void; readonly close: () => Promise<void> }>((resume) => {
    const target = new URL(databaseUrl())
    const pairs = new Set<{ readonly down: net.Socket; readonly up: net.Socket; frozen: boolean }>()
    const server = net.createServer((down) => {
      const pair = { down, up: net.connect(Number(target.port || "5432"), target.hostname), frozen: false }
      pairs.add(pair)
      down.on("data", (chunk) => {
        if (!pair.frozen) pair.up.write(chunk)
      })
      pair.up.on("data", (chunk) => {
        if (!pair.frozen) down.write(chunk)
      })
      const drop = () => {
        pairs.delete(pair)
        down.destroy()
        pair.up.destroy()
      }
      down.on("error", drop).on("close", drop)
      pair.up.on("error", drop).on("close", drop)
    })
    const freeze = () => pairs.forEach((pair) => (pair.frozen = true))
    const close = () =>
      new Promise<void>((done) => {
        server.close(() => done())
        pairs.forEach((pair) => pair.down.destroy())
      })
    server.listen(0, "127.0.0.1", () => {
      const url = new URL(target)
      url.hostname = "127.0.0.1"
      url.port = String((server.address() as net.AddressInfo).port)
      resume(Effect.succeed({ url: url.toString(), freeze, close }))
    })
  }),
  (proxy) => Effect.promise(proxy.close)
)

describe("PgListener", () => {
  it.scopedLive("delivers a NOTIFY sent right after make returns, empty payloads included", () =>
    Effect.gen(function* () {
      const channel = uniqueChannel()
      const got: Array<string> = []
      const listener = yield* PgListener.make({ url: databaseUrl(), channel, onNotify: (p) => got.push(p) })
      expect(yield* listener.connected).toBe(true)
      yield* notify(channel, "x")
      yield* notify(channel, "")
      yield* eventually(
        "both notifications",
        Effect.sync(() => got.length >= 2)
      )
      expect(got).toEqual(["x", ""])
    })
  )

  it.scopedLive("reconnects after its backend is terminated, calls onReconnect and delivers again", () =>
    Effect.gen(function* () {
      const channel = uniqueChannel()
      const got: Array<string> = []
      let reconnects = 0
      const listener = yield* PgListener.make({
        url: databaseUrl(),
        channel,
        onNotify: (p) => got.push(p),
        onReconnect: () => reconnects++
      })
      const [before] = yield* listenerPids(channel)
      expect(before).toBeDefined()
      const killed = yield* query("SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE pid = $1", [
        before
      ])
      expect(killed).toEqual([{ ok: true }])

      yield* eventually(
        "onReconnect",
        Effect.sync(() => reconnects >= 1)
      )
      expect(yield* listener.connected).toBe(true)
      const after = yield* listenerPids(channel)
      expect(after.length).toBe(1)
      expect(after[0]).not.toBe(before)

      // onReconnect runs after the new LISTEN, so this one cannot be missed.
      yield* notify(channel, "after")
      yield* eventually(
        "the notification after the reconnect",
        Effect.sync(() => got.includes("after"))
      )
      expect(reconnects).toBe(1)
    })
  )

  it.scopedLive("closing the scope ends the listener: its backend goes away and no callback follows", () =>
    Effect.gen(function* () {
      const channel = uniqueChannel()
      const got: Array<string> = []
      let reconnects = 0
      const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
      const listener = yield* PgListener.make({
        url: databaseUrl(),
        channel,
        onNotify: (p) => got.push(p),
        onReconnect: () => reconnects++
      }).pipe(Scope.extend(scope))
      expect((yield* listenerPids(channel)).length).toBe(1)
      yield* notify(channel, "before")
      yield* eventually(
        "the notification before closing",
        Effect.sync(() => got.length === 1)
      )

      yield* Scope.close(scope, Exit.void)
      yield* eventually(
        "the listener's backend to disappear",
        listenerPids(channel).pipe(Effect.map((pids) => pids.length === 0)),
        "5 seconds"
      )
      expect(yield* listener.connected).toBe(false)
      yield* notify(channel, "after")
      yield* Effect.sleep("1 second")
      expect(got).toEqual(["before"])
      expect(reconnects).toBe(0)
      expect((yield* listenerPids(channel)).length).toBe(0)
    })
  )

  it.scopedLive("an unreachable database: make returns, connected is false, it logs and keeps retrying", () =>
    Effect.gen(function* () {
      const warnings: Array<string> = []
      const capture = Logger.make(({ logLevel, message }) => {
        if (logLevel._tag === "Warning") warnings.push(String(message))
      })
      const listener = yield* PgListener.make({
        url: "postgres://postgres@127.0.0.1:1/x",
        channel: uniqueChannel(),
        onNotify: () => {
          throw new Error("no notification can arrive")
        },
        reconnectBackoff: { initial: "50 millis", max: "200 millis" }
      }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, capture)))
      expect(yield* listener.connected).toBe(false)
      // Several more attempts fail in the background without failing or crashing anything.
      yield* eventually(
        "a few failed attempts logged",
        Effect.sync(() => warnings.length >= 3)
      )
      expect(yield* listener.connected).toBe(false)
      expect(warnings[0]).toContain("could not connect")
    })
  )

  it.scopedLive(
    "a connection that goes silent fails its health check and is replaced",
    () =>
      Effect.gen(function* () {
        const proxy = yield* freezableProxy
        const channel = uniqueChannel()
        const got: Array<string> = []
        let reconnects = 0
        const listener = yield* PgListener.make({
          url: proxy.url,
          channel,
          onNotify: (p) => got.push(p),
          onReconnect: () => reconnects++,
          healthCheckInterval: "200 millis",
          operationTimeout: "1 second"
        })
        expect(yield* listener.connected).toBe(true)
        proxy.freeze()
        // No error, no end event: only the health check (SELECT 1 unanswered for 1 s, here) can notice.
        yield* eventually(
          "onReconnect after a silent connection",
          Effect.sync(() => reconnects >= 1),
          "25 seconds"
        )
        expect(yield* listener.connected).toBe(true)
        yield* notify(channel, "after")
        yield* eventually(
          "the notification after the reconnect",
          Effect.sync(() => got.includes("after"))
        )
        expect(got).toEqual(["after"])
      }),
    40_000
  )
})
