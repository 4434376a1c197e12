/**
 * The dashboard over HTTP, served in-process over a seeded schema: pages, filters and paging, bad requests, escaping
 * of hostile row values, the security of actions (token, CSRF, origin, POST only, read-only), the token for reads
 * beyond loopback (a 401 without it, a session cookie from the token URL, --public-read), and a database that goes
 * away.
 */
import { HttpRouter, HttpServer, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Layer, Redacted, Scope } from "effect"
import { createServer, get as httpGet } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Dashboard } from "../../src/dashboard.js"
import { migratedSchema, type TestDb, until } from "../support/workers.js"
import {
  dashboardApplicationName,
  hostile,
  type RunningDashboard,
  seed,
  slowQueueRead,
  startDashboard
} from "./support.js"

const TOKEN = "test-token-0123456789"
let db: TestDb
let dashboard: RunningDashboard

beforeAll(async () => {
  db = await migratedSchema("dash_http")
  await seed(db)
  dashboard = await startDashboard(db, { token: TOKEN, pageSize: 10 })
})

afterAll(async () => {
  await dashboard?.stop()
  await db?.close()
})

const get = async (path: string, base = dashboard.url) => {
  const response = await fetch(`${base}${path}`)
  return { status: response.status, text: await response.text(), headers: response.headers }
}

/** The ids of the table rows on a page (`data-id`), in order. */
const rowIds = (text: string): Array<string> => [...text.matchAll(/<tr data-id="(\d+)"/g)].map((m) => m[1]!)

const csrfOf = (text: string): string => {
  const match = /name="csrf" value="([^"]+)"/.exec(text)
  if (match === null) throw new Error("no CSRF field on the page")
  return match[1]!
}

interface PostOptions {
  readonly token?: string | undefined
  readonly csrf?: string | undefined
  readonly origin?: string | null
  readonly base?: string
}

const post = async (action: string, fields: Record<string, string>, options: PostOptions = {}) => {
  const base = options.base ?? dashboard.url
  const body = new URLSearchParams({ ...fields, ...(options.csrf === undefined ? {} : { csrf: options.csrf }) })
  const headers: Record<string, string> = { accept: "application/json" }
  if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
  if (options.origin !== null) headers["origin"] = options.origin ?? base
  const response = await fetch(`${base}/actions/${action}`, { method: "POST", body, headers })
  return { status: response.status, body: (await response.json()) as { ok: boolean; message: string } }
}

const semaphore = async () =>
  (await db.query<{ value: string }>(`SELECT value FROM $schema.scheduler_meta WHERE key = 'semaphore'`))[0]?.value ??
  "green"
const jobEnabled = async (name: string) =>
  (await db.query<{ enabled: boolean }>(`SELECT enabled FROM $schema.scheduled_jobs WHERE name = $1`, [name]))[0]
    ?.enabled
const itemCount = async () =>
  Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM $schema.queue_items`))[0]!.n)
const runCount = async () => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM $schema.job_runs`))[0]!.n)

describe("pages", () => {
  it("answers every page with 200, its data and the security headers", async () => {
    const { id: itemId } = (await db.query<{ id: string }>(`SELECT min(id)::text AS id FROM $schema.queue_items`))[0]!
    const pages: Array<readonly [string, string]> = [
      ["/", "Queue depth by task type"],
      ["/queue", "send_email"],
      [`/queue/${itemId}`, `Queue item ${itemId}`],
      ["/processed", "SMTP timeout"],
      ["/jobs", "nightly-report"],
      ["/jobs/nightly-report", "daily 02:30 Europe/Berlin"],
      ["/jobs/every-5-min", "every 5m"]
    ]
    for (const [path, expected] of pages) {
      const page = await get(path)
      expect(page.status, path).toBe(200)
      expect(page.text, path).toContain(expected)
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
      expect(page.headers.get("content-security-policy")).toContain("script-src 'self'")
      expect(page.headers.get("x-content-type-options")).toBe("nosniff")
      expect(page.headers.get("referrer-policy")).toBe("no-referrer")
      expect(page.headers.get("x-frame-options")).toBe("DENY")
    }
    const health = await get("/health")
    expect(health.status).toBe(200)
    expect(JSON.parse(health.text)).toEqual({ ok: true, database: "up" })
    expect((await get("/assets/app.js")).headers.get("content-type")).toContain("javascript")
    expect((await get("/assets/app.css")).status).toBe(200)
  })

  it("shows the overview's figures: depth, the live worker, the switch and the chart", async () => {
    const page = await get("/")
    expect(page.text).toContain("worker-a")
    expect(page.text).toContain("Running")
    expect(page.text).toMatch(/<svg[^>]*aria-label="executions per minute over the last hour: 96 ok, 26 error"/)
  })

  it("filters the queue by task type, status, priority and run_after", async () => {
    const count = async (query: string) => rowIds((await get(`/queue?${query}`)).text).length
    expect(await count("task_type=resize")).toBe(3)
    expect(await count("status=processing")).toBe(1)
    expect(await count("priority=5")).toBe(3)
    const in90min = new Date(Date.now() + 90 * 60_000).toISOString()
    expect(await count(`run_after_from=${in90min}`)).toBe(2)
    expect(await count(`run_after_to=${in90min}`)).toBe(1)
    expect(await count(`task_type=resize&run_after_to=${in90min}`)).toBe(1)
    expect(await count("task_type=nothing-like-this")).toBe(0)
  })

  it("shows an item's runs left (max_runs counts down) and the failures of its current run", async () => {
    // An item of three runs after two finished, its third failed twice and waiting for a retry.
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO $schema.queue_items (task_type, payload, max_runs) VALUES ('three-runs', '{}', 3) RETURNING id::text AS id`
    )
    const id = row!.id
    try {
      await db.query(`UPDATE $schema.queue_items SET max_runs = 1, runs_done = 2, failures = 2 WHERE id = $1`, [id])
      const list = (await get("/queue?task_type=three-runs")).text
      const cells = [
        ...(/<tr data-id="\d+">([\s\S]*?)<\/tr>/.exec(list)?.[1] ?? "").matchAll(/<td class="num">([^<]*)<\/td>/g)
      ]
      // priority, runs left, failures, thread
      expect(cells.map((m) => m[1])).toEqual(["0", "1", "2", "0"])
      const detail = (await get(`/queue/${id}`)).text
      expect(detail).toContain("2 done, 1 left")
      expect(detail).toMatch(/<dt>failures<\/dt>\s*<dd>2 of the current run/)
    } finally {
      await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [id])
    }
  })

  it("pages the queue in claim order", async () => {
    const first = await get("/queue")
    const second = await get("/queue?page=2")
    const total = await itemCount()
    expect(rowIds(first.text)).toHaveLength(10)
    expect(rowIds(second.text)).toHaveLength(total - 10)
    expect(first.text).toContain('href="/queue?page=2"')
    expect(second.text).toContain('href="/queue?page=1"')
    expect(second.text).not.toContain("?page=3")
    // Priority 5 first.
    expect(first.text.indexOf("resize")).toBeLessThan(first.text.indexOf("send_email"))
    expect(new Set([...rowIds(first.text), ...rowIds(second.text)]).size).toBe(total)
  })

  it("filters the processed log by status, task type and time, and pages it newest first by id", async () => {
    const errors = await get("/processed?status=error&task_type=send_email")
    expect(rowIds(errors.text)).toHaveLength(10)
    expect(errors.text).not.toMatch(/badge ok/)
    const oldest = await get(`/processed?to=${new Date(Date.now() - 49.9 * 60_000).toISOString()}`)
    expect(rowIds(oldest.text)).toHaveLength(1)
    expect(oldest.text).toContain("{&quot;n&quot;:1}")
    const recent = await get(`/processed?from=${new Date(Date.now() - 5 * 60_000).toISOString()}&task_type=send_email`)
    expect(rowIds(recent.text).length).toBeGreaterThan(5)
    expect(rowIds(recent.text).length).toBeLessThanOrEqual(10)

    const page1 = await get("/processed")
    const ids1 = rowIds(page1.text).map(Number)
    expect(ids1).toEqual([...ids1].sort((a, b) => b - a))
    const older = /href="(\/processed\?before=\d+)"/.exec(page1.text)![1]!
    const page2 = await get(older)
    const ids2 = rowIds(page2.text).map(Number)
    expect(ids2).toHaveLength(10)
    expect(Math.max(...ids2)).toBeLessThan(Math.min(...ids1))
    const newer = /href="(\/processed\?after=\d+)"/.exec(page2.text)![1]!
    expect(rowIds((await get(newer)).text).map(Number)).toEqual(ids1)
    // A filter stays on the paging links.
    expect(errors.text).toMatch(/href="\/processed\?status=error&amp;task_type=send_email&amp;before=\d+"/)
  })

  it("pages a job's history", async () => {
    const first = await get("/jobs/nightly-report")
    expect(rowIds(first.text.slice(first.text.indexOf("<h2>Runs</h2>")))).toHaveLength(10)
    expect(first.text).toContain("report failed on day 4")
    const fourth = await get("/jobs/nightly-report?page=3")
    expect(rowIds(fourth.text.slice(fourth.text.indexOf("<h2>Runs</h2>")))).toHaveLength(10)
    expect(fourth.text).not.toContain('rel="next"')
  })

  it("refuses bad filter values with a 400 naming the field", async () => {
    const cases: Array<readonly [string, string]> = [
      ["/queue?status=done", "status"],
      ["/queue?priority=high", "priority"],
      ["/queue?run_after_from=tomorrow", "run_after_from"],
      ["/queue?page=0", "page"],
      ["/queue?page=99999", "page"],
      ["/processed?status=failed", "status"],
      ["/processed?from=2026-13-45", "from"],
      ["/processed?before=-3", "before"],
      ["/processed?before=5&after=3", "after"],
      ["/processed?status=ok&status=error", "status"],
      ["/jobs/nightly-report?page=x", "page"]
    ]
    for (const [path, field] of cases) {
      const page = await get(path)
      expect(page.status, path).toBe(400)
      expect(page.text, path).toContain(`${field}:`)
    }
  })

  it("answers unknown pages and rows with a 404 page", async () => {
    for (const path of ["/nope", "/queue/999999999", "/queue/abc", "/jobs/no-such-job", "/jobs/by-id/999999"]) {
      const page = await get(path)
      expect(page.status, path).toBe(404)
      expect(page.text, path).toContain("Not found")
    }
  })
})

describe("hostile values", () => {
  it("appear escaped on every page, never as markup or raw control characters", async () => {
    const { id: bigItem } = (
      await db.query<{ id: string }>(`SELECT id::text FROM $schema.queue_items WHERE task_type = 'big'`)
    )[0]!
    const { id: longJob } = (
      await db.query<{ id: string }>(`SELECT id::text FROM $schema.scheduled_jobs WHERE length(name) > 1000`)
    )[0]!
    const paths = [
      "/",
      "/queue",
      "/queue?page=2",
      `/queue/${bigItem}`,
      "/queue/5000",
      "/processed",
      "/jobs",
      `/jobs/${encodeURIComponent(hostile.script)}`,
      `/jobs/by-id/${longJob}`,
      `/queue?task_type=${encodeURIComponent(hostile.script)}`
    ]
    const seen = { script: false, attribute: false, ansi: false }
    for (const path of paths) {
      const page = await get(path)
      expect(page.status, path).toBe(200)
      expect(page.text, path).not.toContain("<script>alert")
      expect(page.text, path).not.toContain("<img src=x")
      expect(page.text, path).not.toContain("\u001b")
      seen.script ||= page.text.includes("&lt;script&gt;alert(1)&lt;/script&gt;")
      seen.attribute ||= page.text.includes("&quot;&#39;&gt;&lt;img src=x onerror=alert(1)&gt;")
      seen.ansi ||= page.text.includes("\\x1b[31mred\\x1b[0m")
    }
    expect(seen).toEqual({ script: true, attribute: true, ansi: true })
  })

  it("cuts a 100 kB value in lists and shows it whole, escaped, on the detail page", async () => {
    const list = await get("/processed")
    expect(list.text).not.toContain("L".repeat(300))
    expect(list.text).toContain("L".repeat(50) + "…")
    expect(list.text.length).toBeLessThan(60_000)
    const { id: bigItem } = (
      await db.query<{ id: string }>(`SELECT id::text FROM $schema.queue_items WHERE task_type = 'big'`)
    )[0]!
    expect((await get(`/queue/${bigItem}`)).text).toContain(`<pre>${hostile.long}</pre>`)
    expect((await get("/queue/5001")).text).toContain(`<pre>${hostile.long}</pre>`)
    expect((await get("/jobs")).text).not.toContain("L".repeat(300))
  })

  it("shows a hostile job's history and acts on it by its exact name", async () => {
    const page = await get(`/jobs/${encodeURIComponent(hostile.script)}`)
    expect(page.text).toContain("\\x1b[31mred\\x1b[0m&quot;&#39;&gt;&lt;img")
    const paused = await post("job-pause", { name: hostile.script }, { token: TOKEN, csrf: csrfOf(page.text) })
    expect(paused.status).toBe(200)
    expect(await jobEnabled(hostile.script)).toBe(false)
    await post("job-resume", { name: hostile.script }, { token: TOKEN, csrf: csrfOf(page.text) })
    expect(await jobEnabled(hostile.script)).toBe(true)
  })
})

describe("actions", () => {
  let csrf = ""
  beforeAll(async () => {
    csrf = csrfOf((await get("/")).text)
  })

  it("are refused without the token, with a wrong one, without the CSRF field, and from another origin", async () => {
    const before = { semaphore: await semaphore(), items: await itemCount(), runs: await runCount() }
    const refused = [
      await post("pause-all", {}, { csrf }),
      await post("pause-all", {}, { csrf, token: "wrong-token-0123456789" }),
      await post("pause-all", {}, { csrf, token: TOKEN.slice(0, -1) }),
      await post("pause-all", { token: "" }, { csrf }),
      await post("pause-all", {}, { token: TOKEN }),
      await post("pause-all", {}, { token: TOKEN, csrf: "forged" }),
      await post("pause-all", {}, { token: TOKEN, csrf, origin: "http://evil.example" }),
      await post("pause-all", {}, { token: TOKEN, csrf, origin: "null" }),
      await post("job-run", { name: "nightly-report" }, { csrf }),
      await post("cancel", { item: "1" }, { csrf }),
      await post("retry", { execution: "1" }, { csrf, origin: "http://evil.example" })
    ]
    for (const r of refused) {
      expect([401, 403]).toContain(r.status)
      expect(r.body.ok).toBe(false)
    }
    expect(refused[0]!.status).toBe(401)
    expect(refused[6]!.body.message).toContain("did not come from this dashboard")
    expect({ semaphore: await semaphore(), items: await itemCount(), runs: await runCount() }).toEqual(before)
  })

  it("never change anything on GET", async () => {
    const before = { semaphore: await semaphore(), items: await itemCount(), runs: await runCount() }
    for (const action of ["pause-all", "job-run?name=nightly-report", "cancel?item=1", "retry?execution=1"]) {
      const page = await get(`/actions/${action}&token=${TOKEN}&csrf=${csrf}`.replace(/^([^?]*)&/, "$1?"))
      expect(page.status, action).toBe(405)
      expect(page.headers.get("allow")).toBe("POST")
    }
    expect({ semaphore: await semaphore(), items: await itemCount(), runs: await runCount() }).toEqual(before)
  })

  it("take effect with the token and the CSRF field: the switch, a job, an item, an execution", async () => {
    const ok = async (action: string, fields: Record<string, string> = {}) => {
      const r = await post(action, fields, { token: TOKEN, csrf })
      expect(r, action).toMatchObject({ status: 200, body: { ok: true } })
      return r.body.message
    }
    await ok("pause-all")
    expect(await semaphore()).toBe("red")
    expect((await get("/")).text).toContain("Paused")
    await ok("resume-all")
    expect(await semaphore()).toBe("green")

    await ok("job-pause", { name: "nightly-report" })
    expect(await jobEnabled("nightly-report")).toBe(false)
    await ok("job-resume", { name: "nightly-report" })
    expect(await jobEnabled("nightly-report")).toBe(true)
    const runs = await runCount()
    expect(await ok("job-run", { name: "nightly-report" })).toContain('fired job "nightly-report"')
    const { id: jobId } = (
      await db.query<{ id: string }>(`SELECT id::text FROM $schema.scheduled_jobs WHERE name = 'every-5-min'`)
    )[0]!
    await ok("job-pause", { job: jobId })
    expect(await jobEnabled("every-5-min")).toBe(false)
    await ok("job-resume", { job: jobId })
    expect(await jobEnabled("every-5-min")).toBe(true)
    expect(await runCount()).toBe(runs + 1)

    const { id } = (
      await db.query<{ id: string }>(
        `SELECT max(id)::text AS id FROM $schema.queue_items WHERE task_type = 'send_email'`
      )
    )[0]!
    await ok("cancel", { item: id })
    expect(await db.query(`SELECT 1 FROM $schema.queue_items WHERE id = $1`, [id])).toHaveLength(0)

    const items = await itemCount()
    expect(await ok("retry", { execution: "5" })).toContain("execution 5")
    expect(await itemCount()).toBe(items + 1)
    const [retried] = await db.query<{ payload: string }>(
      `SELECT payload FROM $schema.queue_items ORDER BY id DESC LIMIT 1`
    )
    expect(retried!.payload).toBe('{"n":5}')
  })

  it("accept the token as a form field (a page without script) and answer HTML then", async () => {
    const response = await fetch(`${dashboard.url}/actions/pause-all`, {
      method: "POST",
      body: new URLSearchParams({ token: TOKEN, csrf }),
      headers: { origin: dashboard.url }
    })
    expect(response.status).toBe(200)
    expect(await response.text()).toContain("paused: nothing new starts")
    expect(await semaphore()).toBe("red")
    await post("resume-all", {}, { token: TOKEN, csrf })
  })

  it("say what is missing: a bad id, an unknown job or item", async () => {
    expect((await post("cancel", { item: "x1" }, { token: TOKEN, csrf })).status).toBe(400)
    expect((await post("cancel", { item: "999999999" }, { token: TOKEN, csrf })).status).toBe(404)
    expect((await post("job-run", { name: "no-such-job" }, { token: TOKEN, csrf })).status).toBe(404)
    expect((await post("retry", { execution: "999999999" }, { token: TOKEN, csrf })).status).toBe(404)
  })

  it("are refused by a read-only dashboard, which offers none", async () => {
    const readOnly = await startDashboard(db)
    try {
      const page = await get("/", readOnly.url)
      expect(page.text).toContain("read-only")
      expect(page.text).not.toContain("data-action")
      const r = await post("pause-all", {}, { token: TOKEN, csrf: "anything", base: readOnly.url })
      expect(r.status).toBe(403)
      expect(r.body.message).toContain("read-only")
      expect(await semaphore()).toBe("green")
    } finally {
      await readOnly.stop()
    }
  })
})

describe("beyond loopback: every page needs the token", () => {
  const SECRET = "secret@example.com"
  let guarded: RunningDashboard
  let secretItem = ""

  beforeAll(async () => {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO $schema.queue_items (task_type, payload) VALUES ('mail', $1) RETURNING id::text AS id`,
      [JSON.stringify({ to: SECRET })]
    )
    secretItem = row!.id
    // Every address, as `kairos dashboard --host 0.0.0.0` listens.
    guarded = await startDashboard(db, { token: TOKEN, host: "0.0.0.0" })
  })

  afterAll(async () => {
    await guarded?.stop()
    await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [secretItem])
  })

  const visit = (path: string, headers: Record<string, string> = {}, base = guarded.url) =>
    fetch(`${base}${path}`, { headers, redirect: "manual" })

  /** Opens a session with the token URL: the cookie it sets, as a request header. */
  const session = async (base = guarded.url, path = "/") => {
    const opened = await visit(`${path}${path.includes("?") ? "&" : "?"}token=${TOKEN}`, {}, base)
    expect(opened.status).toBe(303)
    const cookie = opened.headers.getSetCookie()[0]!
    return { cookie: cookie.split(";")[0]!, setCookie: cookie, location: opened.headers.get("location") }
  }

  it("answers every page and the event stream with a 401 saying how to get in, and shows no data", async () => {
    for (const path of [
      "/",
      "/queue",
      `/queue/${secretItem}`,
      "/processed",
      "/jobs",
      "/jobs/nightly-report",
      "/nope",
      "/events"
    ]) {
      const response = await visit(path)
      const text = await response.text()
      expect(response.status, path).toBe(401)
      expect(response.headers.get("www-authenticate"), path).toContain("Bearer")
      expect(text, path).not.toContain(SECRET)
      expect(text, path).not.toContain("send_email")
      if (path !== "/events") {
        expect(response.headers.get("content-type"), path).toBe("text/html; charset=utf-8")
        const line = /<p class="banner error" id="locked">([^<]*)<\/p>/.exec(text)?.[1]
        expect(line, path).toBe(
          "this dashboard needs its token: open the URL that `kairos dashboard` printed when it started (it ends in ?token=…), or add ?token=&lt;your token&gt; to this address"
        )
        // No script on it: nothing tries the event stream.
        expect(text, path).not.toContain("<script")
      }
    }
    expect((await visit("/events")).headers.get("content-type")).not.toContain("event-stream")
    expect((await visit("/", { accept: "application/json" })).headers.get("content-type")).toContain("json")
    // A wrong token gets the same, and no cookie.
    const wrong = await visit(`/queue?token=wrong-token-0123456789`)
    expect(wrong.status).toBe(401)
    expect(wrong.headers.getSetCookie()).toEqual([])
    // What holds no data stays open: the stylesheet, the script, the health check.
    expect((await visit("/assets/app.css")).status).toBe(200)
    expect((await visit("/assets/app.js")).status).toBe(200)
    expect((await visit("/health")).status).toBe(200)
  })

  it("opens a session from the token URL: an HttpOnly, SameSite=Strict cookie, and the same address without the token", async () => {
    const opened = await session(guarded.url, "/queue?task_type=mail")
    expect(opened.location).toBe("/queue?task_type=mail")
    expect(opened.setCookie).toMatch(/; HttpOnly/i)
    expect(opened.setCookie).toMatch(/; SameSite=Strict/i)
    expect(opened.setCookie).toMatch(/; Path=\//)
    // The cookie holds a digest, never the token.
    expect(opened.setCookie).not.toContain(TOKEN)
    const queue = await visit("/queue?task_type=mail", { cookie: opened.cookie })
    expect(queue.status).toBe(200)
    const text = await queue.text()
    expect(text).toContain(SECRET)
    expect(text).toContain('data-session="on"')
    expect((await visit(`/queue/${secretItem}`, { cookie: opened.cookie })).status).toBe(200)
    const events = await visit("/events", { cookie: opened.cookie })
    expect(events.status).toBe(200)
    expect(events.headers.get("content-type")).toContain("text/event-stream")
    await events.body?.cancel()
    // A script may send the token itself instead.
    expect((await visit("/processed", { authorization: `Bearer ${TOKEN}` })).status).toBe(200)
    expect((await visit("/processed", { authorization: "Bearer wrong-token-0123456789" })).status).toBe(401)
    // A cookie of another value is no session.
    expect((await visit("/", { cookie: `${opened.cookie.split("=")[0]}=forged` })).status).toBe(401)
    // The redirect stays on the dashboard, whatever the path (sent as is, which fetch would normalise).
    const location = await new Promise<string | undefined>((resolve, reject) => {
      const { hostname, port } = new URL(guarded.url)
      httpGet({ host: hostname, port, path: `/.//evil.example/x?token=${TOKEN}` }, (response) => {
        response.resume()
        resolve(response.headers.location)
      }).on("error", reject)
    })
    expect(location).toBe("/evil.example/x")
  })

  it("lets the session act (with the CSRF field), and forgets it on /logout", async () => {
    const { cookie } = await session()
    const csrf = csrfOf(await (await visit("/", { cookie })).text())
    const act = (action: string, headers: Record<string, string>) =>
      fetch(`${guarded.url}/actions/${action}`, {
        method: "POST",
        body: new URLSearchParams({ csrf }),
        headers: { accept: "application/json", origin: guarded.url, ...headers }
      })
    expect((await act("pause-all", {})).status).toBe(401)
    expect((await act("pause-all", { cookie })).status).toBe(200)
    expect(await semaphore()).toBe("red")
    expect((await act("resume-all", { cookie })).status).toBe(200)
    expect(await semaphore()).toBe("green")

    const out = await fetch(`${guarded.url}/logout`, { method: "POST", headers: { cookie }, redirect: "manual" })
    expect(out.status).toBe(303)
    expect(out.headers.get("location")).toBe("/")
    expect(out.headers.getSetCookie()[0]).toMatch(/Max-Age=0|Expires=Thu, 01 Jan 1970/i)
  })

  it("serves every page to anyone with publicRead; actions still need the token", async () => {
    const open = await startDashboard(db, { token: TOKEN, host: "0.0.0.0", publicRead: true })
    try {
      const queue = await visit("/queue", {}, open.url)
      expect(queue.status).toBe(200)
      expect(await queue.text()).toContain("secret@example.com")
      expect((await visit("/events", {}, open.url)).status).toBe(200)
      const csrf = csrfOf(await (await visit("/", {}, open.url)).text())
      expect((await post("pause-all", {}, { csrf, base: open.url })).status).toBe(401)
    } finally {
      await open.stop()
    }
    // Read-only and public: allowed when asked for.
    const readOnly = await startDashboard(db, { host: "0.0.0.0", publicRead: true })
    try {
      expect((await visit("/", {}, readOnly.url)).status).toBe(200)
    } finally {
      await readOnly.stop()
    }
  })

  it("refuses to serve beyond loopback without a token unless publicRead", async () => {
    await expect(startDashboard(db, { host: "0.0.0.0" })).rejects.toThrow(
      /refusing to serve on 0\.0\.0\.0 without a token: anyone who reaches it could read the queue/
    )
  })

  it("guards a router mounted in an app when asked (tokenForReads), under its mount path", async () => {
    const scope = Effect.runSync(Scope.make())
    try {
      const port = await Effect.runPromise(
        Effect.gen(function* () {
          const pool = yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }))
          const dashboard = yield* Dashboard.router({
            schema: db.schema,
            basePath: "/kairos",
            token: TOKEN,
            tokenForReads: true
          }).pipe(Effect.provide(pool))
          const app = HttpRouter.empty.pipe(HttpRouter.mount("/kairos", dashboard))
          const server = yield* NodeHttpServer.make(() => createServer(), { host: "127.0.0.1", port: 0 })
          yield* HttpServer.serveEffect(app).pipe(Effect.provideService(HttpServer.HttpServer, server))
          return server.address._tag === "TcpAddress" ? server.address.port : 0
        }).pipe(Scope.extend(scope))
      )
      const base = `http://127.0.0.1:${port}`
      expect((await visit("/kairos/queue", {}, base)).status).toBe(401)
      const opened = await session(base, "/kairos/queue")
      expect(opened.location).toBe("/kairos/queue")
      expect(opened.setCookie).toMatch(/; Path=\/kairos/)
      expect((await visit("/kairos/queue", { cookie: opened.cookie }, base)).status).toBe(200)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })
})

describe("a database that goes away", () => {
  it("shows the problem instead of a 500, and the server stays up", async () => {
    const other = await migratedSchema("dash_gone")
    const served = await startDashboard(other, { token: TOKEN })
    try {
      expect((await get("/", served.url)).status).toBe(200)
      await db.query(`DROP SCHEMA "${other.schema}" CASCADE`)
      for (const path of ["/", "/queue", "/processed", "/jobs", "/jobs/x", "/queue/1"]) {
        const page = await get(path, served.url)
        expect(page.status, path).toBe(503)
        expect(page.text, path).toContain("run `kairos migrate`")
        expect(page.text, path).not.toMatch(/at .*\.(js|ts):\d+/)
      }
      expect((await get("/health", served.url)).status).toBe(200)
      // Connections cut under it: each answer is a page (200 or 503), never a 500, and it recovers.
      const [cut] = await db.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE application_name = ANY($1) AND pid <> pg_backend_pid()`,
        [[db.schema, other.schema].map(dashboardApplicationName)]
      )
      expect(cut!.n).toBeGreaterThan(0)
      const status = (await get("/")).status
      expect([200, 503]).toContain(status)
      await until(async () => (await get("/")).status === 200, 20_000, "the dashboard to read again")
    } finally {
      await served.stop()
      await other.close()
    }
  })
})

describe("mounted in a user's own router", () => {
  it("serves its pages under the mount path, with links that stay under it", async () => {
    const scope = Effect.runSync(Scope.make())
    try {
      const port = await Effect.runPromise(
        Effect.gen(function* () {
          const pool = yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }))
          const dashboard = yield* Dashboard.router({ schema: db.schema, basePath: "/kairos", token: TOKEN }).pipe(
            Effect.provide(pool)
          )
          const app = HttpRouter.empty.pipe(
            HttpRouter.get("/", Effect.succeed(HttpServerResponse.text("the user's own home"))),
            HttpRouter.mount("/kairos", dashboard)
          )
          const server = yield* NodeHttpServer.make(() => createServer(), { host: "127.0.0.1", port: 0 })
          yield* HttpServer.serveEffect(app).pipe(Effect.provideService(HttpServer.HttpServer, server))
          return server.address._tag === "TcpAddress" ? server.address.port : 0
        }).pipe(Scope.extend(scope))
      )
      const base = `http://127.0.0.1:${port}`
      expect(await (await fetch(`${base}/`)).text()).toBe("the user's own home")
      const overview = await fetch(`${base}/kairos/`)
      expect(overview.status).toBe(200)
      const text = await overview.text()
      expect(text).toContain('href="/kairos/queue"')
      expect(text).toContain('src="/kairos/assets/app.js"')
      expect((await fetch(`${base}/kairos/queue?task_type=resize`)).status).toBe(200)
      expect((await fetch(`${base}/kairos/assets/app.css`)).status).toBe(200)
      expect((await fetch(`${base}/kairos/jobs/nightly-report`)).status).toBe(200)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })
})

describe("flows, outputs and limits", () => {
  const ids = async (sql: string, params: Array<unknown> = []) =>
    (await db.query<{ id: string }>(sql, params)).map((r) => r.id)

  /** Records an execution of an item and deletes it in one transaction, as a runner does (its waiters settle then). */
  const finish = (id: string | undefined, status: "ok" | "error") =>
    db.query(`BEGIN;
      INSERT INTO $schema.processed_items (queue_item_id, task_type, status, error_msg, started_at, finished_at, duration_ms)
      VALUES (${Number(id)}, 'flow', '${status}', '${status === "ok" ? "" : "boom"}', now(), now(), 1);
      DELETE FROM $schema.queue_items WHERE id = ${Number(id)};
      COMMIT`)

  it("shows items waiting for others in the queue and each step's flow, with its state, on the item's page", async () => {
    const [a] = await ids(`INSERT INTO $schema.queue_items (task_type) VALUES ('flow_a') RETURNING id::text AS id`)
    const [b] = await ids(
      `INSERT INTO $schema.queue_waiting (task_type, after, after_keys, step_key) VALUES ('flow_b', ARRAY[$1::bigint], ARRAY['a'], 'render')
       RETURNING id::text AS id`,
      [a]
    )
    const [c] = await ids(
      `INSERT INTO $schema.queue_waiting (task_type, after) VALUES ('flow_c', ARRAY[$1::bigint]) RETURNING id::text AS id`,
      [b]
    )
    const queue = await get("/queue")
    expect(queue.status).toBe(200)
    expect(queue.text).toContain("Waiting for other items")
    const row = new RegExp(`<tr data-id="${b}">[\\s\\S]*?</tr>`).exec(queue.text)?.[0] ?? ""
    expect(row).toContain('class="badge waiting"')
    expect(row).toContain(`href="/queue/${a}"`)
    expect(row).toContain("render")

    // The middle step: what it waits for on the left, what waits for it on the right.
    const middle = await get(`/queue/${b}`)
    expect(middle.status).toBe(200)
    expect(middle.text).toContain("not claimable until every item it waits for")
    const steps = [...middle.text.matchAll(/data-depth="(-?\d+)"[\s\S]*?(?=data-depth=|<\/section>)/g)].map((m) => [
      m[1],
      [...m[0].matchAll(/data-step="(\d+)"[\s\S]*?class="badge ([a-z ]+)"/g)].map((s) => `${s[1]}:${s[2]}`)
    ])
    expect(steps).toEqual([
      ["-1", [`${a}:queued`]],
      ["0", [`${b}:waiting`]],
      ["1", [`${c}:waiting`]]
    ])
    // From the first step, the whole chain lies downstream.
    const first = await get(`/queue/${a}`)
    expect(first.text).toContain(`data-step="${c}"`)
    expect(first.text).toContain('data-depth="2"')

    // The first step succeeds: the middle one is released (queued), and the last still names the first, now ok.
    await finish(a, "ok")
    await db.query(`UPDATE $schema.queue_waiting SET after = ARRAY[$1::bigint, $2::bigint] WHERE id = $3`, [a, b, c])
    const last = await get(`/queue/${c}`)
    expect(last.text).toMatch(new RegExp(`data-step="${a}"[\\s\\S]*?class="badge ok"`))
    expect(last.text).toMatch(new RegExp(`data-step="${b}"[\\s\\S]*?class="badge queued"`))
    // The middle one fails: the last is recorded as not run, and nothing waits any more.
    await finish(b, "error")
    expect((await get(`/queue/${c}`)).text).toContain(`not run: it waited for item ${b}, which failed`)
    expect((await get("/queue")).text).not.toContain("Waiting for other items")
  })

  it("bounds a flow: at most 300 steps, the nearest first, saying that more lie beyond", async () => {
    const [root] = await ids(`INSERT INTO $schema.queue_items (task_type) VALUES ('fan_root') RETURNING id::text AS id`)
    await db.query(
      `INSERT INTO $schema.queue_waiting (task_type, after) SELECT 'fan_out', ARRAY[$1::bigint] FROM generate_series(1, 400)`,
      [root]
    )
    const page = await get(`/queue/${root}`)
    expect(page.status).toBe(200)
    expect([...page.text.matchAll(/data-step="/g)]).toHaveLength(300)
    expect(page.text).toContain("300 steps shown (more lie beyond, further away)")
    expect(page.text).toContain(`data-step="${root}"`)
    await db.query(`DELETE FROM $schema.queue_waiting WHERE task_type = 'fan_out'`)
    await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [root])
  })

  it("cancels a waiting item from its page", async () => {
    const [first] = await ids(`INSERT INTO $schema.queue_items (task_type) VALUES ('flow_x') RETURNING id::text AS id`)
    const [waiting] = await ids(
      `INSERT INTO $schema.queue_waiting (task_type, after) VALUES ('flow_y', ARRAY[$1::bigint]) RETURNING id::text AS id`,
      [first]
    )
    const page = await get(`/queue/${waiting}`)
    expect(page.text).toContain(`name="item" value="${waiting}"`)
    const r = await post("cancel", { item: waiting! }, { token: TOKEN, csrf: csrfOf(page.text) })
    expect(r).toEqual({ status: 200, body: { ok: true, message: `cancelled item ${waiting}` } })
    expect(await db.query(`SELECT id FROM $schema.queue_waiting WHERE id = $1`, [waiting])).toEqual([])
    // Gone from the queue, but its flow still draws it, cancelled (and its page says so), until retention.
    const after = await get(`/queue/${waiting}`)
    expect(after.status).toBe(200)
    expect(after.text).toContain("no longer queued")
    expect(after.text).toMatch(new RegExp(`data-step="${waiting}"[\\s\\S]*?class="badge cancelled"`))
    expect(after.text).toMatch(new RegExp(`data-step="${first}"[\\s\\S]*?class="badge queued"`))
    await db.query(`DELETE FROM $schema.queue_items WHERE id = $1`, [first])
  })

  it("shows an execution's output: a preview in the log, the whole on the item's page", async () => {
    const long = { report: "R".repeat(3_000), total: 42 }
    const [item] = await ids(`SELECT '987654'::text AS id`)
    await db.query(
      `INSERT INTO $schema.processed_items (queue_item_id, task_type, status, error_msg, started_at, finished_at, duration_ms, output)
       VALUES ($1, 'with_output', 'ok', '', now(), now(), 3, $2::jsonb)`,
      [item, JSON.stringify(long)]
    )
    const log = await get("/processed?task_type=with_output")
    expect(log.status).toBe(200)
    expect(log.text).toContain("<th>output</th>")
    // (jsonb orders the keys its own way.)
    expect(log.text).toContain("{&quot;total&quot;:42,&quot;report&quot;:&quot;RRR")
    expect(log.text).not.toContain("R".repeat(1_100))
    const page = await get(`/queue/${item}`)
    expect(page.text).toContain(`&quot;total&quot;:42,`)
    expect(page.text).toContain("R".repeat(3_000))
  })

  it("lists limits with what each type holds, sets and clears them with the token, and shows an item's group", async () => {
    const empty = await get("/limits")
    expect(empty.status).toBe(200)
    expect(empty.text).toContain("No task type has limits")
    const csrf = csrfOf(empty.text)
    expect(empty.text).toContain('action="/actions/limit-set"')

    const refused = await post("limit-set", { task_type: "payments", concurrency: "5" }, { csrf })
    expect(refused.status).toBe(401)
    expect((await post("limit-set", { task_type: "payments", concurrency: "5" }, { token: TOKEN })).status).toBe(403)
    expect(await db.query(`SELECT * FROM $schema.queue_limits`)).toEqual([])

    const set = await post(
      "limit-set",
      { task_type: "payments", concurrency: "2", per_group: "on" },
      { token: TOKEN, csrf }
    )
    expect(set).toEqual({
      status: 200,
      body: { ok: true, message: expect.stringContaining("concurrency 2 per group") }
    })
    const rate = await post("limit-set", { task_type: "emails", rate: "100", per: "1 minute" }, { token: TOKEN, csrf })
    expect(rate.status).toBe(200)
    // The rate's scope is its own checkbox: each group in order, at most 10 starts a second each.
    const groupRate = await post(
      "limit-set",
      { task_type: "events", concurrency: "1", per_group: "on", rate: "10", per: "1s", rate_per_group: "on" },
      { token: TOKEN, csrf }
    )
    expect(groupRate).toEqual({
      status: 200,
      body: {
        ok: true,
        message: expect.stringContaining("concurrency 1 per group (ordered), rate 10 per 1s per group")
      }
    })
    expect(
      await db.query(
        `SELECT task_type, concurrency, per_group, rate, rate_per_ms::int AS per, rate_per_group
         FROM $schema.queue_limits ORDER BY 1`
      )
    ).toEqual([
      { task_type: "emails", concurrency: null, per_group: false, rate: 100, per: 60_000, rate_per_group: false },
      { task_type: "events", concurrency: 1, per_group: true, rate: 10, per: 1000, rate_per_group: true },
      { task_type: "payments", concurrency: 2, per_group: true, rate: null, per: null, rate_per_group: false }
    ])

    // Bad input: one clear error naming the field, and nothing changed.
    for (const [fields, message] of [
      [{ task_type: "payments", concurrency: "two" }, "concurrency: must be a whole number"],
      [{ task_type: "payments", concurrency: "0" }, "concurrency: must be a whole number"],
      [{ task_type: "payments", per_group: "on" }, "per_group: perGroup bounds the concurrency"],
      [{ task_type: "payments", per_group: "on", rate: "5" }, "per_group: perGroup bounds the concurrency"],
      [
        { task_type: "payments", concurrency: "2", rate_per_group: "on" },
        "rate_per_group: ratePerGroup bounds the starts of each group per window: give rate"
      ],
      [{ task_type: "payments", concurrency: "1", per: "1s" }, "per: per is the window of a rate"],
      [{ task_type: "payments", rate: "3", per: "soon" }, "per: per:"],
      [{ concurrency: "1" }, "task_type: missing"],
      [{ task_type: "payments" }, "concurrency: a limit needs concurrency, rate, or both"]
    ] as const) {
      const r = await post("limit-set", fields, { token: TOKEN, csrf })
      expect(r.status, JSON.stringify(fields)).toBe(400)
      expect(r.body.message, JSON.stringify(fields)).toContain(message)
    }
    expect(
      (
        await db.query<{ concurrency: number }>(
          `SELECT concurrency FROM $schema.queue_limits WHERE task_type = 'payments'`
        )
      )[0]
    ).toEqual({ concurrency: 2 })

    // One execution of payments holds a live lease; its item and another show their groups in the queue.
    await db.query(`
      INSERT INTO $schema.queue_items (task_type, group_key, status, lease_token, lease_until)
      VALUES ('payments', 'customer-7', 'processing', 'tok', now() + interval '1 hour'),
             ('payments', 'customer-8', 'pending', NULL, NULL)`)
    const listed = await get("/limits")
    const payments = /<tr data-type="payments">[\s\S]*?<\/tr>/.exec(listed.text)?.[0] ?? ""
    expect(payments.replace(/\s+/g, " ")).toMatch(
      /<td class="num">2<\/td> <td>yes<\/td> <td>–<\/td> <td>–<\/td> <td class="num">1<\/td>/
    )
    expect(listed.text).toContain("100 per 1m")
    const events = /<tr data-type="events">[\s\S]*?<\/tr>/.exec(listed.text)?.[0] ?? ""
    expect(events.replace(/\s+/g, " ")).toMatch(/<td>yes \(ordered\)<\/td> <td>10 per 1s<\/td> <td>yes<\/td>/)
    const emails = /<tr data-type="emails">[\s\S]*?<\/tr>/.exec(listed.text)?.[0] ?? ""
    expect(emails.replace(/\s+/g, " ")).toMatch(/<td>100 per 1m<\/td> <td>no<\/td>/)
    expect(listed.text).toContain('name="rate_per_group"')
    const queue = await get("/queue?task_type=payments")
    expect(queue.text).toContain("customer-7")
    expect(queue.text).toContain("customer-8")

    expect((await post("limit-clear", { task_type: "payments" }, { csrf })).status).toBe(401)
    const cleared = await post("limit-clear", { task_type: "payments" }, { token: TOKEN, csrf })
    expect(cleared).toEqual({ status: 200, body: { ok: true, message: 'cleared the limits of "payments"' } })
    expect((await post("limit-clear", { task_type: "payments" }, { token: TOKEN, csrf })).status).toBe(404)
    expect((await post("limit-clear", {}, { token: TOKEN, csrf })).status).toBe(400)
    expect(await db.query(`SELECT task_type FROM $schema.queue_limits ORDER BY 1`)).toEqual([
      { task_type: "emails" },
      { task_type: "events" }
    ])
    await db.query(`DELETE FROM $schema.queue_items WHERE task_type = 'payments'`)
    await db.query(`DELETE FROM $schema.queue_limits`)
  })
})

describe("live refreshes", () => {
  /** The page as the page's script fetches it after a change. */
  const refresh = async (path: string) => {
    const response = await fetch(`${dashboard.url}${path}`, { headers: { "x-kairos-refresh": "1" } })
    return { status: response.status, text: await response.text(), held: response.headers.get("x-kairos-held") }
  }
  /** The overview read in 1 s or more, as counting a long queue by task type takes: its time (ms). */
  const slowOverview = async () => {
    const { page, took } = await slowQueueRead(db, 1000, "GROUP BY task_type", async () => {
      const started = Date.now()
      const page = await get("/")
      return { page, took: Date.now() - started }
    })
    expect(page.status).toBe(200)
    expect(took).toBeGreaterThanOrEqual(1000)
    return took
  }

  it("are given the page as read while that read took under a twentieth of its age, and told when to ask again; a navigation, an action and an operator's change from elsewhere read afresh", async () => {
    const took = await slowOverview()
    await db.query(`INSERT INTO $schema.queue_items (task_type, payload) VALUES ('paced_probe', '{}')`)
    try {
      // A second on: the overview as read, without the new type, saying when it was read and for how long it is
      // given; the script is told when the server reads afresh (under 20 × the read's time from its start).
      await new Promise((resolve) => setTimeout(resolve, 1100))
      const held = await refresh("/")
      expect(held.status).toBe(200)
      expect(held.text).not.toContain("paced_probe")
      expect(held.text).toMatch(/data-held>\s*Figures as read at \d\d:\d\d:\d\d UTC: reading them took \d+\.\d\s+s/)
      expect(Number(held.held)).toBeGreaterThan(0)
      expect(Number(held.held)).toBeLessThanOrEqual(20 * took)
      // A navigation or a reload reads afresh, and says nothing of it.
      const fresh = await get("/")
      expect(fresh.text).toContain("paced_probe")
      expect(fresh.text).not.toContain("data-held")
      expect(fresh.headers.get("x-kairos-held")).toBeNull()

      // Held again; an action sent through the dashboard forgets it: the refresh after it shows what it did.
      await slowOverview()
      const csrf = csrfOf((await get("/")).text)
      await slowOverview()
      expect(await post("pause-all", {}, { token: TOKEN, csrf })).toMatchObject({ status: 200, body: { ok: true } })
      const after = await refresh("/")
      expect(after.text).toContain("Paused")
      expect(after.held).toBeNull()
      expect(await post("resume-all", {}, { token: TOKEN, csrf })).toMatchObject({ status: 200, body: { ok: true } })

      // Held again (~20 s); the switch set by SQL, as the CLI or the Promise API sets it: its NOTIFY forgets what was
      // read, and a refresh shows it within seconds, long before the hold would end.
      const heldFor = 20 * (await slowOverview())
      const pausedAt = Date.now()
      await db.query(`UPDATE $schema.scheduler_meta SET value = 'red' WHERE key = 'semaphore'`)
      let seen = await refresh("/")
      while (!seen.text.includes("Paused") && Date.now() - pausedAt < heldFor / 2) {
        await new Promise((resolve) => setTimeout(resolve, 200))
        seen = await refresh("/")
      }
      expect(seen.text).toContain("Paused")
      expect(seen.held).toBeNull()
      await db.query(`UPDATE $schema.scheduler_meta SET value = 'green' WHERE key = 'semaphore'`)
    } finally {
      await db.query(`DELETE FROM $schema.queue_items WHERE task_type = 'paced_probe'`)
    }
  })
})
