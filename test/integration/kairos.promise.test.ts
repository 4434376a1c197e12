/**
 * The Promise API (`Kairos.create`) on Postgres: enqueueMany, drain, onIdle.
 * Integration: a real Postgres, wall time.
 */
import net from "node:net"
import pg from "pg"
import { afterAll, describe, expect, it, vi } from "vitest"
import { DatabaseConnectionError, InvalidRetryError, Kairos, Schedule } from "../../src/index.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"

const schemas: Array<string> = []
afterAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl() })
  await client.connect()
  for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await client.end()
})

const fresh = (label: string) => {
  const schema = uniqueSchemaName(label)
  schemas.push(schema)
  return schema
}

describe("Kairos.create", () => {
  it("drain resolves once every item ran and was recorded; onIdle fires on the way to idle", async () => {
    const kairos = await Kairos.create({
      url: databaseUrl(),
      schema: fresh("promise"),
      workers: 4,
      interval: "30 seconds"
    })
    try {
      const seen: Array<string> = []
      await kairos.register("count", async (job) => {
        await new Promise((resolve) => setTimeout(resolve, 5))
        seen.push(job.payload)
      })
      let idles = 0
      const unsubscribe = kairos.onIdle(() => idles++, { checkEvery: "20 millis" })
      const ids = await kairos.enqueueMany(
        Array.from({ length: 50 }, (_, i) => ({ taskType: "count", payload: `${i}` }))
      )
      expect(ids).toHaveLength(50)
      await kairos.start()
      await kairos.drain({ timeout: "30 seconds" })
      // Drained means recorded, not only run: every execution is in the log and no row is left.
      expect([...seen].sort()).toEqual(Array.from({ length: 50 }, (_, i) => `${i}`).sort())
      expect(await kairos.stats()).toMatchObject({ ok: 50, failed: 0 })
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect(idles).toBeGreaterThanOrEqual(1)
      unsubscribe()
      const after = idles
      await kairos.enqueue({ taskType: "count", payload: "late" })
      await kairos.drain({ timeout: "30 seconds" })
      await new Promise((resolve) => setTimeout(resolve, 100))
      // Unsubscribed: no more calls.
      expect(idles).toBe(after)
      expect(seen).toContain("late")
    } finally {
      await kairos.stop()
    }
  })

  it("drain with a timeout rejects with DrainTimeoutError while an item nobody handles waits", async () => {
    const kairos = await Kairos.create({ url: databaseUrl(), schema: fresh("promise_timeout"), interval: "30 seconds" })
    try {
      await kairos.register("known", () => undefined)
      await kairos.enqueue({ taskType: "unknown-type", payload: "" })
      await kairos.start()
      const error = await kairos.drain({ timeout: "300 millis" }).then(
        () => undefined,
        (e: unknown) => e
      )
      expect(error).toBeInstanceOf(Kairos.DrainTimeoutError)
      expect((error as Error).message).toMatch(/not drained within 300ms/)
    } finally {
      await kairos.stop()
    }
  })

  it("create rejects with one line naming the fix: nothing listening, a missing database, not a URL", async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo
        server.close(() => resolve(port))
      })
    })
    const failure = (url: string) =>
      Kairos.create({ url }).then(
        (k) => k.stop().then(() => undefined),
        (e: unknown) => e
      )
    const refused = await failure(`postgres://postgres@127.0.0.1:${closedPort}/x`)
    expect(refused).toBeInstanceOf(DatabaseConnectionError)
    expect((refused as Error).message).toBe(
      `cannot reach the database at 127.0.0.1:${closedPort}/x: connection refused (is Postgres running there? check the URL's host and port)`
    )
    const url = new URL(databaseUrl())
    url.pathname = "/kairos_no_such_db"
    const missing = await failure(url.toString())
    expect((missing as Error).message).toMatch(
      /^the database "kairos_no_such_db" does not exist at .*: create it with `createdb kairos_no_such_db`/
    )
    const notUrl = await failure("foo")
    expect((notUrl as Error).message).toBe(
      `"foo" is not a Postgres URL: write postgres://user:password@host:5432/database`
    )
  })

  it("pauseJob, resumeJob and runJob by name; an unknown name rejects with JobNotFoundError", async () => {
    const kairos = await Kairos.create({ url: databaseUrl(), schema: fresh("promise_jobs"), interval: "30 seconds" })
    try {
      const ran: Array<string> = []
      await kairos.register("report", (job) => void ran.push(job.scheduledFor.toISOString()))
      await kairos.defineJobs([
        { name: "daily-report", taskType: "report", schedule: Schedule.daily({ hour: 3, minute: 0 }) }
      ])
      await kairos.start()
      expect((await kairos.pauseJob("daily-report")).enabled).toBe(false)
      expect((await kairos.resumeJob("daily-report")).enabled).toBe(true)
      const run = await kairos.runJob("daily-report")
      expect([run.status, run.attempt]).toEqual(["pending", 1])
      // Woken at once, not at the 30 s poll.
      await kairos.drain({ timeout: "1 second" })
      const deadline = Date.now() + 10_000
      while (ran.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(ran).toEqual([run.scheduledFor.toISOString()])
      const missing = await kairos.runJob("no-such-job").then(
        () => undefined,
        (e: unknown) => e
      )
      expect(missing).toBeInstanceOf(Kairos.JobNotFoundError)
      expect((missing as Error).message).toBe('no job named "no-such-job"')
    } finally {
      await kairos.stop()
    }
  })

  it("retries: a task type's policy and an item's own, through register and enqueue; a bad policy rejects", async () => {
    // Wall time, short backoffs: an integration test of the Promise API over Postgres.
    const kairos = await Kairos.create({ url: databaseUrl(), schema: fresh("promise_retry"), interval: "30 seconds" })
    try {
      const attempts = new Map<string, number>()
      await kairos.register(
        "flaky",
        (job) => {
          attempts.set(job.payload, (attempts.get(job.payload) ?? 0) + 1)
          if (job.attempt < 3) throw new Error(`attempt ${job.attempt}`)
        },
        { retry: { attempts: 3, backoff: "20 millis" } }
      )
      await kairos.enqueue({ taskType: "flaky", payload: "type-policy" })
      // Its own policy (no retry) wins over the type's.
      await kairos.enqueue({ taskType: "flaky", payload: "own-policy", retry: { attempts: 1 } })
      await kairos.start()
      await kairos.drain({ timeout: "20 seconds" })
      expect(Object.fromEntries(attempts)).toEqual({ "type-policy": 3, "own-policy": 1 })
      expect(await kairos.stats()).toMatchObject({ ok: 1, failed: 3 })
      const refused = await kairos.enqueue({ taskType: "flaky", payload: "x", retry: { attempts: -1 } }).then(
        () => undefined,
        (e: unknown) => e
      )
      expect(refused).toBeInstanceOf(InvalidRetryError)
      const badRegister = await kairos
        .register("other", () => undefined, {
          retry: { attempts: 2, backoff: { type: "exponential", delay: "x" as "1s" } }
        })
        .then(
          () => undefined,
          (e: unknown) => e
        )
      expect(badRegister).toMatchObject({ _tag: "InvalidRetryError", field: "backoff" })
    } finally {
      await kairos.stop()
    }
  })

  it("cancel and retry by id; unknown ids reject with ItemNotFoundError", async () => {
    const kairos = await Kairos.create({ url: databaseUrl(), schema: fresh("promise_cancel"), interval: "30 seconds" })
    try {
      let fail = true
      await kairos.register("flaky", () => {
        if (fail) throw new Error("down")
      })
      const doomed = await kairos.enqueue({ taskType: "flaky", payload: "never" })
      expect(await kairos.cancel(doomed.id)).toBe("pending")
      await kairos.enqueue({ taskType: "flaky", payload: "again" })
      await kairos.start()
      await kairos.drain({ timeout: "10 seconds" })
      expect(await kairos.stats()).toMatchObject({ ok: 0, failed: 1 })
      const client = new pg.Client({ connectionString: databaseUrl() })
      await client.connect()
      const schema = schemas[schemas.length - 1]!
      const rows = (await client.query(`SELECT id::text AS id FROM "${schema}".processed_items`)).rows as Array<{
        id: string
      }>
      await client.end()
      fail = false
      const retried = await kairos.retry(rows[0]!.id)
      expect([retried.taskType, retried.payload]).toEqual(["flaky", "again"])
      await kairos.drain({ timeout: "10 seconds" })
      expect(await kairos.stats()).toMatchObject({ ok: 1, failed: 1 })
      for (const attempt of [() => kairos.cancel("987654"), () => kairos.retry("987654")]) {
        const error = await attempt().then(
          () => undefined,
          (e: unknown) => e
        )
        expect(error).toBeInstanceOf(Kairos.ItemNotFoundError)
      }
    } finally {
      await kairos.stop()
    }
  })

  it("pause, resume and isPaused through the semaphore; startGreen: false starts a database without a switch red", async () => {
    const schema = fresh("promise_pause")
    const semaphoreRow = async () => {
      const client = new pg.Client({ connectionString: databaseUrl() })
      await client.connect()
      try {
        const { rows } = await client.query(`SELECT value FROM "${schema}".scheduler_meta WHERE key = 'semaphore'`)
        return (rows as Array<{ value: string }>)[0]?.value
      } finally {
        await client.end()
      }
    }
    const first = await Kairos.create({ url: databaseUrl(), schema, startGreen: false, interval: "30 seconds" })
    // A second instance, created later with the default: the stored switch wins over its start.
    let second: Kairos.Kairos | undefined
    try {
      expect(await first.isPaused()).toBe(true)
      expect(await semaphoreRow()).toBe("red")
      const ran: Array<string> = []
      await first.register("t", (job) => void ran.push(job.payload))
      await first.enqueue({ taskType: "t", payload: "a" })
      await first.start()
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(ran).toEqual([])
      second = await Kairos.create({ url: databaseUrl(), schema, interval: "30 seconds" })
      expect(await second.isPaused()).toBe(true)
      // Resumed from the other instance: the idle runner is woken (NOTIFY), not left for its 30 s poll.
      await second.resume()
      expect(await first.isPaused()).toBe(false)
      await first.drain({ timeout: "5 seconds" })
      expect(ran).toEqual(["a"])
      await first.pause()
      expect([await first.isPaused(), await second.isPaused(), await semaphoreRow()]).toEqual([true, true, "red"])
      await first.enqueue({ taskType: "t", payload: "b" })
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(ran).toEqual(["a"])
      await first.resume()
      await first.drain({ timeout: "5 seconds" })
      expect(ran).toEqual(["a", "b"])
      expect(await semaphoreRow()).toBe("green")
    } finally {
      await second?.stop()
      await first.stop()
    }
    // Created to start red again, on a database whose switch is green: it stays green.
    const third = await Kairos.create({ url: databaseUrl(), schema, startGreen: false })
    try {
      expect(await third.isPaused()).toBe(false)
    } finally {
      await third.stop()
    }
  })

  it("a logger option receives every line (with its fields), and nothing reaches the console", async () => {
    const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> | undefined }> = []
    const logger = {
      info: (message: string, fields?: Record<string, unknown>) => void lines.push({ level: "info", message, fields }),
      warn: (message: string, fields?: Record<string, unknown>) => void lines.push({ level: "warn", message, fields }),
      error: (message: string, fields?: Record<string, unknown>) => void lines.push({ level: "error", message, fields })
    }
    const consoleCalls = (["log", "info", "warn", "error", "debug", "trace"] as const).map((method) =>
      vi.spyOn(console, method).mockImplementation(() => undefined)
    )
    try {
      const kairos = await Kairos.create({
        url: databaseUrl(),
        schema: fresh("promise_logger"),
        interval: "30 seconds",
        logger
      })
      try {
        await kairos.register("t", () => undefined)
        await kairos.register("t", () => undefined)
        await kairos.defineJobs([
          { name: "orphan", taskType: "nobody", schedule: Schedule.daily({ hour: 3, minute: 0 }) }
        ])
        await kairos.start()
        let thrown = false
        const unsubscribe = kairos.onIdle(
          () => {
            thrown = true
            throw new Error("listener broke")
          },
          { checkEvery: "20 millis" }
        )
        const deadline = Date.now() + 5_000
        while (!lines.some((l) => l.message.includes("onIdle")) && Date.now() < deadline)
          await new Promise((resolve) => setTimeout(resolve, 20))
        unsubscribe()
        expect(thrown).toBe(true)
      } finally {
        await kairos.stop()
      }
      expect(lines).toContainEqual(
        expect.objectContaining({
          level: "warn",
          message: 'handler for task type "t" registered again: the new one replaces it'
        })
      )
      expect(lines).toContainEqual(
        expect.objectContaining({ level: "warn", message: expect.stringContaining('task type "nobody"') })
      )
      expect(lines).toContainEqual({
        level: "error",
        message: "kairos: an onIdle listener threw",
        fields: { cause: "listener broke" }
      })
      for (const spy of consoleCalls) expect(spy, `console.${spy.getMockName()}`).not.toHaveBeenCalled()
    } finally {
      for (const spy of consoleCalls) spy.mockRestore()
    }
  })
})
