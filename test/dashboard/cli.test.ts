/**
 * `kairos dashboard` as users run it: the compiled bin, spawned. It prints one line with its URL, serves it, and
 * stops cleanly on Ctrl-C even while a page holds its event stream open.
 */
import { spawn } from "node:child_process"
import path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { exited, projectRoot, run as runCommand } from "../support/process.js"
import { migratedSchema, type TestDb } from "../support/workers.js"

const bin = path.join(projectRoot, "bin/kairos.js")
let db: TestDb

beforeAll(async () => {
  db = await migratedSchema("dash_cli")
})

afterAll(async () => {
  await db?.close()
})

/** Starts `kairos dashboard …` and resolves with the URL it prints. */
const start = (args: ReadonlyArray<string>) => {
  const child = spawn(process.execPath, [bin, "dashboard", "--database-url", db.url, "--schema", db.schema, ...args], {
    cwd: projectRoot,
    stdio: ["ignore", "pipe", "pipe"]
  })
  let out = ""
  let err = ""
  child.stderr.on("data", (d: Buffer) => (err += d.toString()))
  const url = new Promise<string>((resolve, reject) => {
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString()
      const match = /kairos dashboard: (http:\/\/\S+)/.exec(out) ?? /"url":"(http:\/\/[^"]+)"/.exec(out)
      if (match !== null) resolve(match[1]!)
    })
    child.on("exit", (code) => reject(new Error(`exited (${code}) before printing its URL:\n${out}\n${err}`)))
  })
  return { child, url, output: () => out, errors: () => err }
}

const kairos = (args: ReadonlyArray<string>) =>
  runCommand(process.execPath, [bin, ...args], { cwd: projectRoot, timeout: 60_000 })

// Each test starts the CLI as a process twice, one after the other: CI's loaded second pass on a slow 2-core machine
// took 16-17 s of the default 30 for two of them. Each process is still bounded by its own 60 s (`kairos`).
describe("kairos dashboard", { timeout: 120_000 }, () => {
  it("prints its URL with a generated token, serves the pages, and exits 0 on SIGINT", async () => {
    const dashboard = start(["--port", "0"])
    const url = await dashboard.url
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{40,}$/)
    expect(dashboard.output().trim().split("\n")).toHaveLength(1)
    const page = await fetch(url)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain("Overview")
    // An open event stream (a tab left open) must not hold the stop.
    const events = await fetch(new URL("/events", url))
    expect(events.headers.get("content-type")).toContain("text/event-stream")
    const reader = events.body!.getReader()
    await reader.read()
    const exit = exited(dashboard.child)
    dashboard.child.kill("SIGINT")
    expect(await exit).toEqual({ code: 0, signal: null })
    await reader.cancel().catch(() => undefined)
  })

  it("takes --token (not printed) and --read-only", async () => {
    const withToken = start(["--port", "0", "--token", "a-token-of-mine"])
    const url = await withToken.url
    expect(url).not.toContain("token")
    expect(withToken.output()).not.toContain("a-token-of-mine")
    withToken.child.kill("SIGINT")
    expect((await exited(withToken.child)).code).toBe(0)

    const readOnly = start(["--port", "0", "--read-only", "--json"])
    await readOnly.url
    const printed = JSON.parse(readOnly.output()) as { url: string; read_only: boolean }
    expect(printed.read_only).toBe(true)
    expect((await fetch(printed.url).then((r) => r.text())).includes("read-only")).toBe(true)
    readOnly.child.kill("SIGINT")
    expect((await exited(readOnly.child)).code).toBe(0)
  })

  it("beyond loopback, shows nothing without the token: a 401 that says how to get in; the printed URL opens it", async () => {
    await db.query(
      `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('mail', '{"to":"secret@example.com"}')`
    )
    const guarded = start(["--port", "0", "--host", "0.0.0.0"])
    try {
      const printed = await guarded.url
      expect(printed).toMatch(/^http:\/\/0\.0\.0\.0:\d+\/\?token=[A-Za-z0-9_-]{40,}$/)
      expect(guarded.output()).toContain("the token in this URL unlocks the pages and actions")
      const url = new URL(printed.replace("//0.0.0.0:", "//127.0.0.1:"))
      for (const path of ["/queue", "/processed", "/events"]) {
        const refused = await fetch(new URL(path, url))
        expect(refused.status, path).toBe(401)
        expect(await refused.text(), path).not.toContain("secret@example.com")
      }
      const opened = await fetch(url, { redirect: "manual" })
      expect(opened.status).toBe(303)
      expect(opened.headers.get("location")).toBe("/")
      const cookie = opened.headers.getSetCookie()[0]!.split(";")[0]!
      const queue = await fetch(new URL("/queue", url), { headers: { cookie } })
      expect(queue.status).toBe(200)
      expect(await queue.text()).toContain("secret@example.com")
    } finally {
      guarded.child.kill("SIGINT")
      expect((await exited(guarded.child)).code).toBe(0)
    }

    // --public-read: anyone reads; a read-only public dashboard is allowed then.
    const open = start(["--port", "0", "--host", "0.0.0.0", "--public-read", "--read-only", "--json"])
    try {
      const url = (await open.url).replace("//0.0.0.0:", "//127.0.0.1:")
      expect(JSON.parse(open.output())).toMatchObject({ read_only: true, pages_need_token: false })
      const queue = await fetch(new URL("/queue", url))
      expect(queue.status).toBe(200)
      expect(await queue.text()).toContain("secret@example.com")
    } finally {
      open.child.kill("SIGINT")
      expect((await exited(open.child)).code).toBe(0)
    }
  })

  it("refuses a non-loopback host without a token, and contradictory flags, with one line", async () => {
    const open = await kairos([
      "dashboard",
      "--database-url",
      db.url,
      "--schema",
      db.schema,
      "--host",
      "0.0.0.0",
      "--read-only"
    ])
    expect(open.status).toBe(1)
    expect(open.stderr).toMatch(/^kairos: refusing to serve on 0\.0\.0\.0 without a token/)
    expect(open.stderr.trim().split("\n")).toHaveLength(1)
    const both = await kairos(["dashboard", "--database-url", db.url, "--token", "abcdefghij", "--read-only"])
    expect(both.status).toBe(1)
    expect(both.stderr).toContain("--token and --read-only exclude each other")
  })
})
