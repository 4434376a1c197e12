/**
 * The dashboard's pages: pure functions from read models to `Html`. All row text goes through `html` (escaped) and
 * `clip` (cut for tables); nothing here reads the database or the clock.
 */
import * as Option from "effect/Option"
import * as Limits from "../../domain/Limits.js"
import type * as PgReadModel from "../postgres/PgReadModel.js"
import * as Schedule from "../../domain/Schedule.js"
import { clip, type Html, html, time, utc } from "./html.js"

/** What every page needs besides its data. */
export interface PageContext {
  /** The path the dashboard is mounted at ("" at the root); every link starts with it. */
  readonly base: string
  /** The per-process CSRF token, put in every action form. */
  readonly csrf: string
  /** Whether actions are offered (a token is configured; not read-only). */
  readonly actions: boolean
  /** Whether the request holds the session the token URL opened: actions are unlocked without typing the token. */
  readonly session: boolean
  /** The database's time: relative times are measured from it. */
  readonly now: Date
}

/** An item's runs left (`max_runs`, which counts down as runs finish; -1: for ever). */
const runsLeft = (n: number): string => (n === -1 ? "∞" : String(n))

// Display lengths: enough to recognise a value in a table; the detail pages show the full text.
const CELL = 80
const PAYLOAD_CELL = 100
const ERROR_CELL = 240

const nav: ReadonlyArray<readonly [string, string]> = [
  ["/", "Overview"],
  ["/queue", "Queue"],
  ["/processed", "Processed"],
  ["/jobs", "Jobs"],
  ["/limits", "Limits"]
]

/** A whole page. `live` sections (`data-live` with an id) are refreshed in place by the script on each change. */
export const layout = (
  ctx: PageContext,
  options: {
    readonly title: string
    readonly active: string
    readonly live: boolean
    readonly banner?: Html | undefined
  },
  content: Html
): Html =>
  html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${options.title} · kairos</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href="${ctx.base}/assets/app.css" />
        <script src="${ctx.base}/assets/app.js" defer></script>
      </head>
      <body
        data-base="${ctx.base}"
        data-live="${options.live ? "on" : "off"}"
        data-session="${ctx.session ? "on" : "off"}"
      >
        <header>
          <span class="brand">kairos</span>
          <nav>
            ${nav.map(
              ([path, label]) =>
                html`<a href="${ctx.base}${path}" class="${options.active === path ? "active" : ""}">${label}</a>`
            )}
          </nav>
          <span class="right">
            ${options.live ? html`<span id="live-state" class="live-state">connecting…</span>` : ""}
            ${ctx.actions
              ? html`<span data-token-unset ${ctx.session ? "hidden" : ""}
                    ><form class="inline" data-token-form>
                      <input
                        type="password"
                        name="token"
                        placeholder="token for actions"
                        autocomplete="off"
                        aria-label="token"
                      />
                      <button type="submit">Unlock</button>
                    </form></span
                  >
                  <span data-token-set ${ctx.session ? "" : "hidden"}
                    >actions unlocked
                    <form class="inline" method="post" action="${ctx.base}/logout" data-forget-token>
                      <button type="submit">Forget token</button>
                    </form></span
                  >`
              : html`<span>read-only</span>`}
          </span>
        </header>
        <main>
          <div id="banner">${options.banner ?? ""}</div>
          <div id="flash" role="status"></div>
          ${content}
        </main>
      </body>
    </html> `

/** A POST form for an action, or nothing when actions are off. */
const action = (
  ctx: PageContext,
  route: string,
  fields: Readonly<Record<string, string>>,
  label: string,
  kind: "primary" | "danger" | "" = ""
): Html | "" =>
  ctx.actions
    ? html`<form class="inline" method="post" action="${ctx.base}/actions/${route}" data-action>
        <input type="hidden" name="csrf" value="${ctx.csrf}" />${Object.entries(fields).map(
          ([name, value]) => html`<input type="hidden" name="${name}" value="${value}" />`
        )}<button type="submit" class="${kind}">${label}</button>
      </form>`
    : ""

const badge = (status: string): Html => html`<span class="badge ${status}">${status}</span>`

const text = (value: string | null, max: number): Html =>
  value === null
    ? html`<span class="muted">NULL</span>`
    : value === ""
      ? html`<span class="muted">(empty)</span>`
      : html`<span class="mono">${clip(value, max)}</span>`

const query = (params: Readonly<Record<string, string | number | undefined>>): string => {
  const search = new URLSearchParams()
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== "") search.set(key, String(value))
  const text = search.toString()
  return text === "" ? "" : `?${text}`
}

/** A job's page: by name, or by id when the name would make an unusably long address. */
export const jobHref = (ctx: PageContext, job: { readonly id: string; readonly name: string }): string => {
  const encoded = encodeURIComponent(job.name)
  return encoded.length <= 1_500 ? `${ctx.base}/jobs/${encoded}` : `${ctx.base}/jobs/by-id/${job.id}`
}

/** A schedule in words and in its zone; a stored value that does not decode, as stored. */
export const scheduleText = (schedule: PgReadModel.StoredSchedule): Html =>
  schedule._tag === "Valid"
    ? html`${Schedule.format(schedule.schedule)}`
    : html`<span class="badge failed">invalid</span>
        <span class="mono">${clip(JSON.stringify(schedule.stored) ?? "", CELL)}</span>`

// ---------------------------------------------------------------------------------------------------------------
// Overview

/** Executions per minute over the hour before `now`, as stacked bars (green ok, red error). */
export const chart = (minutes: ReadonlyArray<PgReadModel.Minute>, now: Date): Html => {
  const width = 1200
  const height = 200
  const left = 36
  const bottom = 20
  const slots = 60
  const slot = (width - left) / slots
  const current = Math.floor(now.getTime() / 60_000)
  const byMinute = new Map(minutes.map((m) => [Math.floor(m.minute.getTime() / 60_000), m]))
  const max = Math.max(1, ...minutes.map((m) => m.ok + m.error))
  const plot = height - bottom - 6
  const scale = (n: number) => (n / max) * plot
  const bars = Array.from({ length: slots }, (_, i) => {
    const minute = current - (slots - 1 - i)
    const m = byMinute.get(minute)
    if (m === undefined) return ""
    const x = left + i * slot + 1
    const okHeight = scale(m.ok)
    const errorHeight = scale(m.error)
    const label = `${utc(new Date(minute * 60_000)).slice(11, 16)}Z: ${m.ok} ok, ${m.error} error`
    return html`<g
      ><title>${label}</title>
      <rect
        x="${x.toFixed(1)}"
        y="${(height - bottom - okHeight).toFixed(1)}"
        width="${(slot - 2).toFixed(1)}"
        height="${okHeight.toFixed(1)}"
        fill="#22c55e"
      ></rect>
      <rect
        x="${x.toFixed(1)}"
        y="${(height - bottom - okHeight - errorHeight).toFixed(1)}"
        width="${(slot - 2).toFixed(1)}"
        height="${errorHeight.toFixed(1)}"
        fill="#ef4444"
      ></rect
    ></g>`
  })
  const total = minutes.reduce((sum, m) => ({ ok: sum.ok + m.ok, error: sum.error + m.error }), { ok: 0, error: 0 })
  return html`<svg
      viewBox="0 0 ${width} ${height}"
      width="100%"
      role="img"
      aria-label="executions per minute over the last hour: ${total.ok} ok, ${total.error} error"
    >
      <line x1="${left}" y1="${height - bottom}" x2="${width}" y2="${height - bottom}" stroke="#cbd5e1"></line>
      <line
        x1="${left}"
        y1="${height - bottom - plot}"
        x2="${width}"
        y2="${height - bottom - plot}"
        stroke="#f1f5f9"
      ></line>
      <text x="${left - 6}" y="${height - bottom - plot + 4}" text-anchor="end" font-size="11" fill="#6b7280">
        ${max}
      </text>
      <text x="${left - 6}" y="${height - bottom + 4}" text-anchor="end" font-size="11" fill="#6b7280">0</text>
      <text x="${left}" y="${height - 4}" font-size="11" fill="#6b7280">60 min ago</text>
      <text x="${left + (width - left) / 2}" y="${height - 4}" text-anchor="middle" font-size="11" fill="#6b7280">
        30 min ago
      </text>
      <text x="${width}" y="${height - 4}" text-anchor="end" font-size="11" fill="#6b7280">now</text>
      ${bars}
    </svg>
    <div class="legend">
      <span><i class="ok"></i>ok ${total.ok}</span><span><i class="error"></i>error ${total.error}</span>
    </div>`
}

/** `/`: the switch, queue depth, the last hour's executions and the live workers. */
export const overview = (ctx: PageContext, o: PgReadModel.Overview): Html =>
  html`<h1>Overview</h1>
    <section class="card" id="switch" data-live>
      <div class="switch">
        <span class="state">${o.paused ? html`${badge("red")} Paused` : html`${badge("green")} Running`}</span>
        <span class="muted">${o.paused ? "nothing new starts on any worker" : "workers claim and run work"}</span>
        ${o.paused
          ? action(ctx, "resume-all", {}, "Resume everything", "primary")
          : action(ctx, "pause-all", {}, "Pause everything", "danger")}
      </div>
    </section>
    <div class="grid">
      <section class="card" id="depth" data-live>
        <h2>Queue depth by task type</h2>
        ${o.depth.length === 0
          ? html`<p class="muted">The queue is empty.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th>task type</th>
                  <th class="num">pending</th>
                  <th class="num">processing</th>
                </tr>
              </thead>
              <tbody>
                ${o.depth.map(
                  (d) =>
                    html`<tr>
                      <td>
                        <a href="${ctx.base}/queue${query({ task_type: d.taskType })}">${clip(d.taskType, CELL)}</a>
                      </td>
                      <td class="num">${d.pending}</td>
                      <td class="num">${d.processing}</td>
                    </tr>`
                )}
              </tbody>
            </table>`}
      </section>
      <section class="card" id="workers" data-live>
        <h2>Live workers</h2>
        ${o.workers.length === 0
          ? html`<p class="muted">No live worker.</p>`
          : html`<table>
              <thead>
                <tr>
                  <th>worker</th>
                  <th>task types</th>
                  <th>started</th>
                  <th>heartbeat</th>
                </tr>
              </thead>
              <tbody>
                ${o.workers.map(
                  (w) =>
                    html`<tr>
                      <td class="mono">${clip(w.id, CELL)}</td>
                      <td class="wrap">${clip(w.taskTypes.join(", "), 200)}</td>
                      <td>${time(w.startedAt, ctx.now)}</td>
                      <td>${time(w.heartbeatAt, ctx.now)}</td>
                    </tr>`
                )}
              </tbody>
            </table>`}
      </section>
    </div>
    <section class="card" id="chart" data-live>
      <h2>Executions per minute, last hour</h2>
      ${chart(o.minutes, o.now)}
    </section>`

// ---------------------------------------------------------------------------------------------------------------
// Queue

/** The queue filter as typed (strings, so the form shows exactly what was asked). */
export interface QueueQuery {
  readonly task_type?: string | undefined
  readonly status?: string | undefined
  readonly priority?: string | undefined
  readonly run_after_from?: string | undefined
  readonly run_after_to?: string | undefined
}

const select = (name: string, value: string | undefined, choices: ReadonlyArray<string>): Html =>
  html`<select name="${name}" id="${name}">
    <option value="">any</option>
    ${choices.map((c) => html`<option value="${c}" ${value === c ? html`selected` : ""}>${c}</option>`)}
  </select>`

const field = (label: string, name: string, value: string | undefined, placeholder = "", type = "text"): Html =>
  html`<label for="${name}"
    >${label}<input type="${type}" name="${name}" id="${name}" value="${value ?? ""}" placeholder="${placeholder}"
  /></label>`

/** `/queue`: pending and processing items, filtered and paged. */
export const queue = (
  ctx: PageContext,
  q: QueueQuery,
  page: number,
  pageSize: number,
  result: PgReadModel.Page<PgReadModel.Item>,
  waiting: { readonly rows: ReadonlyArray<PgReadModel.Waiting>; readonly total: number } = { rows: [], total: 0 }
): Html =>
  html`<h1>Queue</h1>
    <form class="filters" method="get" action="${ctx.base}/queue">
      ${field("task type", "task_type", q.task_type)}
      <label for="status">status${select("status", q.status, ["pending", "processing"])}</label>
      ${field("priority", "priority", q.priority, "e.g. 0")}
      ${field("run after ≥", "run_after_from", q.run_after_from, "2026-05-01T09:00Z")}
      ${field("run after <", "run_after_to", q.run_after_to, "2026-05-02T00:00Z")}
      <button type="submit" class="primary">Filter</button>
      <a href="${ctx.base}/queue">clear</a>
    </form>
    <section id="queue-table" data-live>
      ${result.rows.length === 0
        ? html`<p class="muted">No item matches.</p>`
        : html`<table>
            <thead>
              <tr>
                <th>id</th>
                <th>task type</th>
                <th>status</th>
                <th class="num">priority</th>
                <th class="num">runs left</th>
                <th class="num" title="failed attempts of the current run, retried under the item's policy">
                  failures
                </th>
                <th class="num">thread</th>
                <th>group</th>
                <th>created</th>
                <th>run after</th>
                <th>payload</th>
                <th></th>
              </tr>
            </thead>
            <tbody>
              ${result.rows.map(
                (item) =>
                  html`<tr data-id="${item.id}">
                    <td><a href="${ctx.base}/queue/${item.id}">${item.id}</a></td>
                    <td class="wrap">
                      ${clip(item.taskType, CELL)}${item.handled
                        ? ""
                        : html` <span class="muted" title="no live worker handles this task type">(unhandled)</span>`}
                    </td>
                    <td>${badge(item.status)}</td>
                    <td class="num">${item.priority}</td>
                    <td class="num">${runsLeft(item.runsLeft)}</td>
                    <td class="num">${item.failures}</td>
                    <td class="num">${item.thread}</td>
                    <td class="wrap">${item.groupKey === null ? "" : text(item.groupKey, CELL)}</td>
                    <td>${time(item.createdAt, ctx.now)}</td>
                    <td>${time(item.runAfter, ctx.now)}</td>
                    <td class="wrap">${text(item.payload, PAYLOAD_CELL)}</td>
                    <td>${action(ctx, "cancel", { item: item.id }, "Cancel", "danger")}</td>
                  </tr>`
              )}
            </tbody>
          </table>`}
      <div class="pager">
        ${page > 1 ? html`<a href="${ctx.base}/queue${query({ ...q, page: page - 1 })}" rel="prev">← Previous</a>` : ""}
        <span class="muted">page ${page} · ${pageSize} per page</span>
        ${result.hasMore
          ? html`<a href="${ctx.base}/queue${query({ ...q, page: page + 1 })}" rel="next">Next →</a>`
          : ""}
      </div>
    </section>
    <section id="waiting-table" data-live>${waitingTable(ctx, waiting)}</section>`

/** The items waiting for others (`queue_waiting`): outside every claim until what they wait for has succeeded. */
const waitingTable = (
  ctx: PageContext,
  waiting: { readonly rows: ReadonlyArray<PgReadModel.Waiting>; readonly total: number }
): Html =>
  waiting.total === 0
    ? html``
    : html`<h2>Waiting for other items</h2>
        <table>
          <thead>
            <tr>
              <th>id</th>
              <th>task type</th>
              <th>status</th>
              <th>step</th>
              <th>waits for</th>
              <th class="num">left</th>
              <th>group</th>
              <th>created</th>
            </tr>
          </thead>
          <tbody>
            ${waiting.rows.map(
              (w) =>
                html`<tr data-id="${w.id}">
                  <td><a href="${ctx.base}/queue/${w.id}">${w.id}</a></td>
                  <td class="wrap">${clip(w.taskType, CELL)}</td>
                  <td>${badge("waiting")}</td>
                  <td class="wrap">${w.stepKey === null ? "" : text(w.stepKey, CELL)}</td>
                  <td class="wrap">
                    ${w.after.slice(0, 20).map((a) => html`<a href="${ctx.base}/queue/${a}">${a}</a> `)}${w.after
                      .length > 20
                      ? html`<span class="muted">and ${w.after.length - 20} more</span>`
                      : ""}
                  </td>
                  <td class="num">${w.waitingOn}</td>
                  <td class="wrap">${w.groupKey === null ? "" : text(w.groupKey, CELL)}</td>
                  <td>${time(w.createdAt, ctx.now)}</td>
                </tr>`
            )}
          </tbody>
        </table>
        ${waiting.total > waiting.rows.length
          ? html`<p class="muted">and ${waiting.total - waiting.rows.length} more waiting (the oldest shown first)</p>`
          : ""}`

/** An execution's output as text (JSON), or nothing when the handler returned nothing. */
const outputText = (output: unknown): string | undefined =>
  output === null || output === undefined ? undefined : (JSON.stringify(output) ?? undefined)

const executionsTable = (ctx: PageContext, executions: ReadonlyArray<PgReadModel.Execution>, full: boolean): Html =>
  html`<table>
    <thead>
      <tr>
        <th>id</th>
        ${full
          ? ""
          : html`<th>item</th>
              <th>task type</th>`}
        <th>status</th>
        <th class="num">ms</th>
        ${full ? html`<th>started</th>` : ""}
        <th>finished</th>
        ${full ? "" : html`<th>payload</th>`}
        <th>output</th>
        <th>error</th>
        <th></th>
      </tr>
    </thead>
    <tbody>
      ${executions.map(
        (p) =>
          html`<tr data-id="${p.id}">
            <td>${p.id}</td>
            ${full
              ? ""
              : html`<td><a href="${ctx.base}/queue/${p.queueItemId}">${p.queueItemId}</a></td>
                  <td class="wrap">${clip(p.taskType, CELL)}</td>`}
            <td>${badge(p.status)}</td>
            <td class="num">${p.durationMs}</td>
            ${full ? html`<td>${time(p.startedAt, ctx.now)}</td>` : ""}
            <td>${time(p.finishedAt, ctx.now)}</td>
            ${full ? "" : html`<td class="wrap">${text(p.payload, PAYLOAD_CELL)}</td>`}
            <td class="wrap output">
              ${((out) =>
                out === undefined
                  ? ""
                  : full
                    ? html`<pre>${out}</pre>`
                    : html`<span class="mono" title="${clip(out, 1_000)}">${clip(out, PAYLOAD_CELL)}</span>`)(
                outputText(p.output)
              )}
            </td>
            <td class="wrap">
              ${p.errorMsg === ""
                ? ""
                : full
                  ? html`<pre>${p.errorMsg}</pre>`
                  : html`<span class="mono">${clip(p.errorMsg, ERROR_CELL)}</span>`}
            </td>
            <td>${action(ctx, "retry", { execution: p.id }, "Retry")}</td>
          </tr>`
      )}
    </tbody>
  </table>`

/** `/queue/:id`: one item (when it still exists) and its executions, with full payloads and errors. */
export const item = (
  ctx: PageContext,
  id: string,
  found: {
    readonly item: Option.Option<PgReadModel.Item>
    readonly executions: ReadonlyArray<PgReadModel.Execution>
    readonly flow?: Flow | undefined
  }
): Html => {
  const self = found.flow?.nodes.find((n) => n.id === id)
  return html`<h1>Queue item ${id}</h1>
    <section id="item" data-live>
      ${Option.match(found.item, {
        onNone: () =>
          self?.state === "waiting"
            ? html`<dl class="fields">
                  <dt>task type</dt>
                  <dd class="mono">${self.taskType ?? ""}</dd>
                  <dt>status</dt>
                  <dd>${badge("waiting")} not claimable until every item it waits for has finished successfully</dd>
                  ${self.stepKey === null
                    ? ""
                    : html`<dt>step</dt>
                        <dd class="mono">${self.stepKey}</dd>`}
                  <dt>waits for</dt>
                  <dd>${self.after.map((a) => html`<a href="${ctx.base}/queue/${a}">${a}</a> `)}</dd>
                </dl>
                <p>${action(ctx, "cancel", { item: self.id }, "Cancel this item", "danger")}</p>`
            : html`<p class="banner info">
                This item is no longer queued: it finished its runs or was cancelled. Its executions stay in the log.
              </p>`,
        onSome: (it) =>
          html`<dl class="fields">
              <dt>task type</dt>
              <dd class="mono">${it.taskType}</dd>
              <dt>status</dt>
              <dd>
                ${badge(it.status)}
                ${it.handled ? "" : html`<span class="muted">no live worker handles this task type</span>`}
              </dd>
              <dt>priority</dt>
              <dd>${it.priority}</dd>
              <dt>runs</dt>
              <dd>${it.runsDone} done, ${runsLeft(it.runsLeft)} left</dd>
              <dt>failures</dt>
              <dd>${it.failures} of the current run${it.failures > 0 ? " (retried under its policy)" : ""}</dd>
              <dt>group</dt>
              <dd class="mono">${it.groupKey ?? "–"}</dd>
              <dt>thread</dt>
              <dd>${it.thread === 1 ? "1 (concurrent)" : "0 (sequential)"}</dd>
              <dt>created</dt>
              <dd>${time(it.createdAt, ctx.now)}</dd>
              <dt>run after</dt>
              <dd>${time(it.runAfter, ctx.now)}</dd>
              <dt>unique key</dt>
              <dd class="mono">${it.uniqueKey ?? "–"}</dd>
              <dt>payload</dt>
              <dd>${it.payload === null ? html`<span class="muted">NULL</span>` : html`<pre>${it.payload}</pre>`}</dd>
            </dl>
            <p>${action(ctx, "cancel", { item: it.id }, "Cancel this item", "danger")}</p>`
      })}
      <h2>Executions</h2>
      ${found.executions.length === 0
        ? html`<p class="muted">No execution recorded yet.</p>`
        : html`${executionsTable(ctx, found.executions, true)}
          ${Option.isSome(found.item) || found.executions[0] === undefined
            ? ""
            : html`<h2>Payload of the latest execution</h2>
                <pre>${found.executions[0].payload ?? "NULL"}</pre>`}`}
      ${found.flow !== undefined && found.flow.nodes.length > 1 ? flowGraph(ctx, id, found.flow) : ""}
    </section>`
}

// ---------------------------------------------------------------------------------------------------------------
// Flows

/** The flow around an item as read (`PgReadModel.flow`), and whether steps beyond those were left out. */
export interface Flow {
  readonly nodes: ReadonlyArray<PgReadModel.FlowNode>
  readonly more: boolean
}

/**
 * An item's flow as columns by depth: each step one column right of the furthest step it waits for, with its state
 * and what it waits for. Server-rendered, no script.
 */
export const flowGraph = (ctx: PageContext, id: string, flow: Flow): Html => {
  const columns = new Map<number, Array<PgReadModel.FlowNode>>()
  for (const node of flow.nodes) columns.set(node.depth, [...(columns.get(node.depth) ?? []), node])
  const depths = [...columns.keys()].sort((a, b) => a - b)
  const counts = new Map<string, number>()
  for (const node of flow.nodes) counts.set(node.state, (counts.get(node.state) ?? 0) + 1)
  return html`<h2>Flow</h2>
    <p class="muted">
      ${flow.nodes.length} steps${flow.more ? " shown (more lie beyond, further away)" : ""}:
      ${[...counts.entries()].map(([state, n], i) => html`${i === 0 ? "" : ", "}${badge(state)} ${n}`)}. Each step
      stands one column right of the furthest step it waits for; this item's column is marked. Steps stay here with
      their state until retention prunes their log.
    </p>
    <div class="flow" role="list" aria-label="flow of item ${id}">
      ${depths.map(
        (depth) =>
          html`<div class="flow-column" data-depth="${depth}">
            <div class="muted">
              ${depth === 0 ? "this item's column" : depth < 0 ? `${-depth} before` : `${depth} after`}
            </div>
            ${(columns.get(depth) ?? []).map(
              (node) =>
                html`<div class="flow-step ${node.id === id ? "current" : ""}" role="listitem" data-step="${node.id}">
                  <a href="${ctx.base}/queue/${node.id}">${node.id}</a>
                  ${node.stepKey === null ? "" : html`<span class="mono">${clip(node.stepKey, 40)}</span>`}
                  ${badge(node.state)}
                  <div class="muted">${clip(node.taskType ?? "", 40)}</div>
                  ${node.after.length === 0
                    ? ""
                    : html`<div class="muted">
                        after
                        ${clip(node.after.slice(0, 10).join(", "), 80)}${node.after.length > 10
                          ? ` and ${node.after.length - 10} more`
                          : ""}
                      </div>`}
                </div>`
            )}
          </div>`
      )}
    </div>`
}

// ---------------------------------------------------------------------------------------------------------------
// Processed

/** The processed-log filter as typed. */
export interface ProcessedQuery {
  readonly status?: string | undefined
  readonly task_type?: string | undefined
  readonly from?: string | undefined
  readonly to?: string | undefined
}

/** `/processed`: the execution log, newest first, filtered and paged by id. */
export const processed = (
  ctx: PageContext,
  q: ProcessedQuery,
  paging: { readonly before?: string | undefined; readonly after?: string | undefined },
  result: PgReadModel.Page<PgReadModel.Execution>
): Html => {
  const first = result.rows[0]
  const last = result.rows[result.rows.length - 1]
  // Going back (`after`), `hasMore` says whether newer rows exist; going forward, whether older ones do.
  const newer = paging.after !== undefined ? result.hasMore : paging.before !== undefined
  const older = paging.after !== undefined ? true : result.hasMore
  return html`<h1>Processed</h1>
    <form class="filters" method="get" action="${ctx.base}/processed">
      <label for="status">status${select("status", q.status, ["ok", "error"])}</label>
      ${field("task type", "task_type", q.task_type)} ${field("from", "from", q.from, "2026-05-01T09:00Z")}
      ${field("to", "to", q.to, "2026-05-02T00:00Z")}
      <button type="submit" class="primary">Filter</button>
      <a href="${ctx.base}/processed">clear</a>
    </form>
    <section id="processed-table" data-live>
      ${result.rows.length === 0
        ? html`<p class="muted">No execution matches.</p>`
        : executionsTable(ctx, result.rows, false)}
      <div class="pager">
        ${newer ? html`<a href="${ctx.base}/processed${query({ ...q })}">⇤ Newest</a>` : ""}
        ${newer && first !== undefined
          ? html`<a href="${ctx.base}/processed${query({ ...q, after: first.id })}" rel="prev">← Newer</a>`
          : ""}
        ${older && last !== undefined
          ? html`<a href="${ctx.base}/processed${query({ ...q, before: last.id })}" rel="next">Older →</a>`
          : ""}
      </div>
    </section>`
}

// ---------------------------------------------------------------------------------------------------------------
// Jobs

const lastRuns = (runs: ReadonlyArray<PgReadModel.Run>): Html =>
  html`${runs.map(
    (r) =>
      html`<span
        class="dot ${r.status}"
        title="${`${utc(r.scheduledFor)} attempt ${r.attempt}: ${r.status}${r.error === null ? "" : ` — ${clip(r.error, 200)}`}`}"
      ></span>`
  )}`

const jobActions = (ctx: PageContext, job: PgReadModel.Job): Html =>
  html`${job.enabled
    ? action(ctx, "job-pause", { job: job.id }, "Pause")
    : action(ctx, "job-resume", { job: job.id }, "Resume", "primary")}
  ${action(ctx, "job-run", { job: job.id }, "Run now")}`

/** `/jobs`: every scheduled job, its schedule in words, next slot and last runs. */
export const jobs = (ctx: PageContext, list: ReadonlyArray<PgReadModel.Job>): Html =>
  html`<h1>Scheduled jobs</h1>
    <section id="jobs-table" data-live>
      ${list.length === 0
        ? html`<p class="muted">
            No scheduled job. Jobs are defined in code (<code>runner.defineJobs</code>) or by a worker's tasks module.
          </p>`
        : html`<table>
            <thead>
              <tr>
                <th>name</th>
                <th>task type</th>
                <th>schedule</th>
                <th>next slot</th>
                <th>state</th>
                <th>last runs</th>
                <th>last outcome</th>
                <th></th>
              </tr>
            </thead>
            <tbody>
              ${list.map((job) => {
                const latest = job.lastRuns[0]
                return html`<tr data-id="${job.id}">
                  <td class="wrap"><a href="${jobHref(ctx, job)}">${clip(job.name, CELL)}</a></td>
                  <td class="wrap">
                    ${clip(job.taskType, CELL)}${job.handled ? "" : html` <span class="muted">(unhandled)</span>`}
                  </td>
                  <td>${scheduleText(job.schedule)}</td>
                  <td>${job.enabled ? time(job.nextRunAt, ctx.now) : html`<span class="muted">paused</span>`}</td>
                  <td>${job.enabled ? badge("enabled") : badge("paused")}</td>
                  <td>${lastRuns(job.lastRuns)}</td>
                  <td>
                    ${latest === undefined
                      ? html`<span class="muted">never ran</span>`
                      : html`${badge(latest.status)} ${time(latest.finishedAt ?? latest.scheduledFor, ctx.now)}`}
                  </td>
                  <td>${jobActions(ctx, job)}</td>
                </tr>`
              })}
            </tbody>
          </table>`}
    </section>`

/** `/jobs/:name`: one job and its runs, newest slot first, paged. */
export const job = (
  ctx: PageContext,
  j: PgReadModel.Job,
  page: number,
  pageSize: number,
  runs: PgReadModel.Page<PgReadModel.Run>
): Html => {
  const href = jobHref(ctx, j)
  return html`<h1>Job <span class="mono">${clip(j.name, 120)}</span></h1>
    <section id="job" data-live>
      <dl class="fields">
        <dt>name</dt>
        <dd class="mono">${j.name}</dd>
        <dt>task type</dt>
        <dd class="mono">
          ${j.taskType}${j.handled ? "" : html` <span class="muted">(no live worker handles it)</span>`}
        </dd>
        <dt>schedule</dt>
        <dd>${scheduleText(j.schedule)}</dd>
        <dt>stored as</dt>
        <dd class="mono">${clip(JSON.stringify(j.schedule.stored) ?? "", 400)}</dd>
        <dt>state</dt>
        <dd>${j.enabled ? badge("enabled") : badge("paused")}</dd>
        <dt>next slot</dt>
        <dd>${time(j.nextRunAt, ctx.now)}</dd>
        <dt>payload</dt>
        <dd>${j.payload === null ? html`<span class="muted">NULL</span>` : html`<pre>${j.payload}</pre>`}</dd>
      </dl>
      <p>${jobActions(ctx, j)}</p>
      <h2>Runs</h2>
      ${runs.rows.length === 0
        ? html`<p class="muted">No run yet.</p>`
        : html`<table>
            <thead>
              <tr>
                <th>run</th>
                <th>slot</th>
                <th class="num">attempt</th>
                <th>status</th>
                <th>started</th>
                <th>finished</th>
                <th class="num">ms</th>
                <th>error</th>
              </tr>
            </thead>
            <tbody>
              ${runs.rows.map(
                (r) =>
                  html`<tr data-id="${r.id}">
                    <td>${r.id}</td>
                    <td>${time(r.scheduledFor, ctx.now)}</td>
                    <td class="num">${r.attempt}</td>
                    <td>${badge(r.status)}</td>
                    <td>${time(r.startedAt, ctx.now)}</td>
                    <td>${time(r.finishedAt, ctx.now)}</td>
                    <td class="num">
                      ${r.startedAt !== null && r.finishedAt !== null
                        ? r.finishedAt.getTime() - r.startedAt.getTime()
                        : ""}
                    </td>
                    <td class="wrap">
                      ${r.error === null || r.error === ""
                        ? ""
                        : r.error.length > ERROR_CELL
                          ? html`<details>
                              <summary class="mono">${clip(r.error, ERROR_CELL)}</summary>
                              <pre>${r.error}</pre>
                            </details>`
                          : html`<span class="mono">${r.error}</span>`}
                    </td>
                  </tr>`
              )}
            </tbody>
          </table>`}
      <div class="pager">
        ${page > 1 ? html`<a href="${href}${query({ page: page - 1 })}" rel="prev">← Newer</a>` : ""}
        <span class="muted">page ${page} · ${pageSize} per page</span>
        ${runs.hasMore ? html`<a href="${href}${query({ page: page + 1 })}" rel="next">Older →</a>` : ""}
      </div>
    </section>`
}

// ---------------------------------------------------------------------------------------------------------------
// Limits

/** `/limits`: every task type's flow limits, how many of its executions hold a lease now, and the forms. */
export const limits = (
  ctx: PageContext,
  list: ReadonlyArray<Limits.FlowLimit>,
  holding: ReadonlyMap<string, number>
): Html =>
  html`<h1>Limits</h1>
    <p class="muted">
      Flow limits every worker obeys together (<code>queue_limits</code>): at most <em>concurrency</em> executions of a
      task type at once (per group: each group that many, in order when 1), and at most <em>rate</em> starts per window
      across the cluster (rate per group: each group that many). A change reaches running workers at once.
    </p>
    <section id="limits-table" data-live>
      ${list.length === 0
        ? html`<p class="muted">No task type has limits.</p>`
        : html`<table>
            <thead>
              <tr>
                <th>task type</th>
                <th class="num">concurrency</th>
                <th>per group</th>
                <th>rate</th>
                <th>rate per group</th>
                <th class="num" title="executions holding a live lease now">running</th>
                <th></th>
              </tr>
            </thead>
            <tbody>
              ${list.map(
                (l) =>
                  html`<tr data-type="${l.taskType}">
                    <td class="wrap mono">${clip(l.taskType, CELL)}</td>
                    <td class="num">${l.concurrency ?? "–"}</td>
                    <td>${l.perGroup ? (l.concurrency === 1 ? "yes (ordered)" : "yes") : "no"}</td>
                    <td>${l.rate === null ? "–" : Limits.describeRate(l.rate)}</td>
                    <td>${l.rate === null ? "–" : l.ratePerGroup ? "yes" : "no"}</td>
                    <td class="num">${holding.get(l.taskType) ?? 0}</td>
                    <td>${action(ctx, "limit-clear", { task_type: l.taskType }, "Clear", "danger")}</td>
                  </tr>`
              )}
            </tbody>
          </table>`}
    </section>
    ${ctx.actions
      ? html`<h2>Set a task type's limits</h2>
          <form class="filters" method="post" action="${ctx.base}/actions/limit-set" data-action id="limit-form">
            <input type="hidden" name="csrf" value="${ctx.csrf}" />
            ${field("task type", "task_type", undefined, "e.g. payments")}
            ${field("concurrency", "concurrency", undefined, "e.g. 5")}
            <label for="per_group">per group<input type="checkbox" name="per_group" id="per_group" value="on" /></label>
            ${field("rate", "rate", undefined, "e.g. 100")} ${field("per", "per", undefined, "1s, 1 minute")}
            <label for="rate_per_group"
              >rate per group<input type="checkbox" name="rate_per_group" id="rate_per_group" value="on"
            /></label>
            <button type="submit" class="primary">Set limits</button>
          </form>
          <p class="muted">
            Setting replaces what the type had. Leave concurrency or rate empty for none. "per group" makes the
            concurrency each group's; "rate per group" makes the rate each group's.
          </p>`
      : html`<p class="muted">Read-only: start the dashboard with a token to set limits here.</p>`}`

// ---------------------------------------------------------------------------------------------------------------
// Errors

/** The body of an error page: a heading and one sentence (escaped). */
export const problem = (title: string, message: string): Html =>
  html`<h1>${title}</h1>
    <p class="banner error">${message}</p>`

/**
 * The 401 page of a dashboard whose pages need the token: one line saying how to get in, and nothing else (no
 * script, no navigation, no data).
 */
export const locked = (base: string, message: string): Html =>
  html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>Token needed · kairos</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href="${base}/assets/app.css" />
      </head>
      <body>
        <main>
          <h1>Token needed</h1>
          <p class="banner error" id="locked">${message}</p>
        </main>
      </body>
    </html> `
