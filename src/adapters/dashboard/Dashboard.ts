/**
 * The web dashboard: server-rendered pages over kairos's tables, live updates over server-sent events, and a few
 * actions (the pause switch, a job's pause/resume/run-now, cancelling an item, retrying an execution).
 *
 * Reads go through the read model the CLI reads through too (`PgReadModel`), each with the dashboard's bounds (below),
 * and never write. Actions go through `Admin` (runtime), as the CLI's and the Promise API's do, and only when a token
 * was configured: every action is a POST carrying the token (`Authorization: Bearer`, a `token` field or the session
 * cookie, compared in constant time), the page's CSRF token, and, from a browser, an `Origin` (or `Referer`) of the
 * dashboard's own host.
 *
 * With `tokenForReads` (what `serve` sets beyond loopback), every page and the event stream need the token too. A
 * visit with `?token=<the token>` sets an HttpOnly, SameSite=Strict session cookie (a digest of the token, not the
 * token) and redirects to the same address without it; anything else gets a 401 page that says how to get in.
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import type { ServeError } from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as UrlParams from "@effect/platform/UrlParams"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as SqlClient from "@effect/sql/SqlClient"
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { createServer } from "node:http"
import { isId } from "../../domain/Id.js"
import * as DomainLimits from "../../domain/Limits.js"
import { ISO_TIME } from "../../internal/isoTime.js"
import * as Admin from "../../runtime/Admin.js"
import * as PgJobStore from "../postgres/PgJobStore.js"
import * as PgLimits from "../postgres/PgLimits.js"
import * as PgQueueStore from "../postgres/PgQueueStore.js"
import * as PgReadModel from "../postgres/PgReadModel.js"
import * as PgSemaphore from "../postgres/PgSemaphore.js"
import * as PgWakeUps from "../postgres/PgWakeUps.js"
import * as Assets from "./assets.js"
import { clip, type Html, html } from "./html.js"
import * as Live from "./Live.js"
import * as Paced from "./Paced.js"
import * as Pages from "./pages.js"

/** How the dashboard reads and what it allows. */
export interface DashboardOptions {
  /** The schema of kairos's tables. Default `public`. */
  readonly schema?: string | undefined
  /** The token every action must carry. Without one the dashboard is read-only. */
  readonly token?: string | Redacted.Redacted<string> | undefined
  /**
   * Every page and the event stream need the token too (the first visit with `?token=` keeps it in a session
   * cookie). Default false: a router mounted in your own app is guarded by the app's own authentication, which
   * must wrap it. `serve` turns it on beyond loopback unless `publicRead`.
   */
  readonly tokenForReads?: boolean | undefined
  /** The path the router is mounted at, e.g. `/kairos` (default: the root). Links start with it. */
  readonly basePath?: string | undefined
  /**
   * A direct connection to the database, for the LISTEN that updates open pages at once, when the client's own
   * goes through a transaction pooler (where LISTEN delivers nothing: pages then update at the poll, and a line
   * says so at start). Default: the client's URL.
   */
  readonly directUrl?: string | Redacted.Redacted | undefined
  /**
   * How often open pages look for changes (finished executions, runs; everything, when LISTEN delivers nothing).
   * Default 5 seconds.
   */
  readonly pollInterval?: Duration.DurationInput | undefined
  /** Rows per page. Default 50, at most 200. */
  readonly pageSize?: number | undefined
}

/** Where `serve` listens, besides the router's options. */
export interface ServeOptions extends DashboardOptions {
  /**
   * Default `127.0.0.1`. Beyond a loopback address every page needs the token (`tokenForReads`), and serving without
   * a token is refused, unless `publicRead`.
   */
  readonly host?: string | undefined
  /** Beyond loopback, let anyone who reaches the port read every page; actions still need the token. Default false. */
  readonly publicRead?: boolean | undefined
  /** Default 4500; 0 picks a free port. */
  readonly port?: number | undefined
}

/** The dashboard could not start: a bad option, or the address could not be bound. */
export class DashboardError extends Data.TaggedError("DashboardError")<{
  readonly reason: "InvalidOption" | "Listen"
  readonly message: string
  readonly cause?: unknown
}> {}

// ---------------------------------------------------------------------------------------------------------------
// Bounds: every list a page shows is bounded, so no request reads more than a page's worth.

/** The most rows one page holds. */
export const MAX_PAGE = 200
/** The deepest offset a page may start at: deeper pages are refused, not scanned (the execution log pages by id). */
export const MAX_OFFSET = 10_000
/** How much of a payload or error message a list row carries; the detail pages read the full text. */
export const TEXT_PREVIEW = 1_000
/** How much of a run's error its job's page carries. */
const RUN_ERROR = 20_000
/** The most steps an item's flow shows (the nearest first). */
export const FLOW_STEPS = 300
/** How many of each job's last runs the jobs page shows. */
const LAST_RUNS = 10

// ---------------------------------------------------------------------------------------------------------------
// Responses

const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cache-control": "no-store"
} as const

const page = (status: number, body: Html): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.text(body.markup, { status, contentType: "text/html; charset=utf-8" })

/** A refused or failed request, shown as a page (or JSON to the page's script). */
class Refusal extends Data.TaggedError("Refusal")<{ readonly status: number; readonly message: string }> {}

const isLoopback = (host: string): boolean =>
  host === "localhost" || host === "::1" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host)

/** Equal strings, in time independent of where they differ (digests have one length). */
const sameSecret = (given: string, expected: string): boolean =>
  timingSafeEqual(createHash("sha256").update(given).digest(), createHash("sha256").update(expected).digest())

// ---------------------------------------------------------------------------------------------------------------
// Request parameters: every value checked, a bad one refused with a 400 naming the field.

type Search = Readonly<Record<string, string | ReadonlyArray<string> | undefined>>

const badRequest = (field: string, message: string) => new Refusal({ status: 400, message: `${field}: ${message}` })

/** One value of a search parameter: absent or empty is `undefined`; repeated is refused. */
const param = (search: Search, name: string): Either.Either<string | undefined, Refusal> => {
  const value = search[name]
  if (value === undefined) return Either.right(undefined)
  if (typeof value !== "string") return Either.left(badRequest(name, "given more than once"))
  if (value.length > 2_000) return Either.left(badRequest(name, "too long (at most 2000 characters)"))
  return Either.right(value.trim() === "" ? undefined : value.trim())
}

const choice = <A extends string>(search: Search, name: string, choices: ReadonlyArray<A>) =>
  Either.flatMap(param(search, name), (value) =>
    value === undefined || (choices as ReadonlyArray<string>).includes(value)
      ? Either.right(value as A | undefined)
      : Either.left(badRequest(name, `must be one of ${choices.join(", ")}`))
  )

const integer = (search: Search, name: string) =>
  Either.flatMap(param(search, name), (value) =>
    value === undefined
      ? Either.right(undefined)
      : /^-?\d{1,9}$/.test(value)
        ? Either.right(Number(value))
        : Either.left(badRequest(name, "must be a whole number"))
  )

/** An ISO time; one without an offset is UTC (the dashboard shows every time in UTC). */
const instant = (search: Search, name: string) =>
  Either.flatMap(param(search, name), (value) => {
    if (value === undefined) return Either.right(undefined)
    const match = ISO_TIME.exec(value)
    const at = match === null ? undefined : new Date(value.length > 10 && match[1] === undefined ? `${value}Z` : value)
    return at !== undefined && Number.isFinite(at.getTime())
      ? Either.right(at)
      : Either.left(badRequest(name, "must be an ISO time, e.g. 2026-05-01T09:30:00Z"))
  })

const id = (search: Search, name: string) =>
  Either.flatMap(param(search, name), (value) =>
    value === undefined || isId(value) ? Either.right(value) : Either.left(badRequest(name, "must be an id"))
  )

const pageNumber = (search: Search, pageSize: number) =>
  Either.flatMap(param(search, "page"), (value) => {
    if (value === undefined) return Either.right(1)
    if (!/^[1-9]\d{0,5}$/.test(value)) return Either.left(badRequest("page", "must be a page number (1, 2, …)"))
    const n = Number(value)
    return (n - 1) * pageSize > MAX_OFFSET
      ? Either.left(badRequest("page", `pages stop at ${Math.floor(MAX_OFFSET / pageSize) + 1}; narrow the filter`))
      : Either.right(n)
  })

// ---------------------------------------------------------------------------------------------------------------

/**
 * Builds the dashboard's router over the Postgres client in context: mount it in your own `HttpRouter` (pass the
 * mount path as `basePath`) or serve it with `serve` / `layer`. Its live-update listener and poll run until the scope
 * closes. Mounted, its pages (payloads and errors included) go to whoever your app lets through: wrap it in the app's
 * own authentication, or set `tokenForReads`.
 *
 * @example
 * ```ts
 * const app = Effect.gen(function* () {
 *   const dashboard = yield* Dashboard.router({ schema: "public", token: "s3cret", basePath: "/kairos" })
 *   return HttpRouter.empty.pipe(HttpRouter.mount("/kairos", dashboard))
 * })
 * ```
 */
export const router = (
  options: DashboardOptions = {}
): Effect.Effect<HttpRouter.HttpRouter, never, SqlClient.SqlClient | PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function* () {
    const schema = options.schema ?? "public"
    const base = (options.basePath ?? "").replace(/\/+$/, "")
    const pageSize = Math.min(Math.max(1, Math.trunc(options.pageSize ?? 50)), MAX_PAGE)
    const token =
      options.token === undefined || typeof options.token === "string" ? options.token : Redacted.value(options.token)
    const csrf = randomBytes(24).toString("base64url")
    const reads = yield* PgReadModel.make({ schema })
    const queueStore = yield* PgQueueStore.make({ schema })
    const limits = yield* PgLimits.make({ schema })
    // The operator's actions, stamped by the database's clock like the CLI's.
    const admin = Admin.make({
      jobs: yield* PgJobStore.make({ schema }),
      queue: queueStore,
      semaphore: yield* PgSemaphore.make({ schema }),
      now: reads.now()
    })
    const wakeUps = yield* PgWakeUps.make({ schema, url: options.directUrl })
    // What each page read last, given to its live refreshes while that read's time is under a twentieth of its age.
    const pages = Paced.make<readonly [(ctx: Pages.PageContext) => Html, Date], Refusal | PgReadModel.ReadModelError>({
      share: 0.05,
      maxHoldMs: 60_000,
      minHoldMs: 1000,
      pages: 64
    })
    const live = yield* Live.make({
      signature: reads.signature(),
      // An operator's change from anywhere (the switch, a job, limits: the CLI, the Promise API, SQL) is rare and
      // expected at once: what pages read before it is forgotten. New items ("queue") come all the time: paced.
      subscribe: (wake) =>
        wakeUps.subscribe((topic) => {
          if (topic !== "queue") Effect.runSync(pages.forget)
          wake(topic)
        }),
      pollInterval: options.pollInterval ?? "5 seconds"
    })
    // Open event streams end when the router's scope closes, so a server shutting down is not held open by them.
    const closing = yield* Deferred.make<void>()
    yield* Effect.addFinalizer(() => Deferred.succeed(closing, undefined))

    const tokenForReads = options.tokenForReads ?? false
    const context = (now: Date, session = false): Pages.PageContext => ({
      base,
      csrf,
      actions: token !== undefined,
      session,
      now
    })

    // The session cookie: named after the token (two dashboards on one host keep theirs apart; a restart with a new
    // token starts afresh) and holding a digest of it, so the token itself is not kept by the browser.
    const digest = (label: string) =>
      token === undefined ? "" : createHash("sha256").update(`kairos-dashboard:${label}:${token}`).digest("base64url")
    const cookieName = `kairos-${digest("name").slice(0, 10)}`
    const cookieValue = digest("session")
    const cookiePath = base === "" ? "/" : base

    /** The request holds the session cookie, or the token itself as `Authorization: Bearer` (a script's reads). */
    const hasSession = (request: HttpServerRequest.HttpServerRequest): boolean => {
      if (token === undefined) return false
      const cookie = request.cookies[cookieName]
      if (cookie !== undefined && sameSecret(cookie, cookieValue)) return true
      const authorization = request.headers["authorization"]
      return authorization?.startsWith("Bearer ") === true && sameSecret(authorization.slice(7), token)
    }

    /**
     * A page whose data comes from the database; an unreachable database is a 503 page, never a stack. A live
     * refresh (the page's script sends `x-kairos-refresh`) may be given the page as read earlier (Paced).
     */
    const view = (
      title: string,
      active: string,
      build: (
        search: Search
      ) => Effect.Effect<
        (ctx: Pages.PageContext) => Html,
        Refusal | PgReadModel.ReadModelError,
        HttpRouter.RouteContext
      >
    ) =>
      Effect.gen(function* () {
        const search = yield* HttpServerRequest.ParsedSearchParams
        const request = yield* HttpServerRequest.HttpServerRequest
        const session = hasSession(request)
        const asked = yield* Clock.currentTimeMillis
        const result = yield* Effect.either(
          pages.read(
            request.url,
            request.headers["x-kairos-refresh"] !== undefined,
            Effect.zip(build(search), reads.now().pipe(Effect.orElseSucceed(() => new Date())))
          )
        )
        if (Either.isRight(result)) {
          const { at, ms, value } = result.right
          const [body, now] = value
          const ctx = context(now, session)
          const holdMs = pages.holdMs(ms)
          // Given as read earlier (see Paced): the page says so.
          const banner =
            asked - at >= 1000
              ? html`<p class="banner info" data-held>
                  Figures as read at ${now.toISOString().slice(11, 19)} UTC: reading them took ${(ms / 1000).toFixed(1)}
                  s, so live updates show them for ${Math.round(holdMs / 1000)} s before reading them again.
                </p>`
              : undefined
          const response = page(200, Pages.layout(ctx, { title, active, live: true, banner }, body(ctx)))
          // A page given as read earlier may miss the change that asked for it: the script asks again once the read
          // is no longer given (x-kairos-held: the ms until then), and no change stays unseen.
          const heldFor = Math.ceil(at + holdMs - asked)
          return at < asked && heldFor > 0
            ? HttpServerResponse.setHeader(response, "x-kairos-held", String(heldFor))
            : response
        }
        return problemPage(result.left, active, session)
      })

    const problemPage = (error: Refusal | PgReadModel.ReadModelError, active = "", session = false) => {
      const ctx = context(new Date(), session)
      if (error._tag === "Refusal") {
        const title = error.status === 404 ? "Not found" : error.status === 400 ? "Bad request" : "Refused"
        return page(
          error.status,
          Pages.layout(ctx, { title, active, live: false }, Pages.problem(title, error.message))
        )
      }
      // The database is away or not migrated: say so, keep live updates on so the page recovers by itself.
      const message =
        error.reason === "NotMigrated"
          ? `kairos's tables are missing in schema "${schema}": run \`kairos migrate\`.`
          : `database unavailable: ${error.message}`
      const banner = html`<p class="banner error" data-unavailable>${message}</p>`
      return page(503, Pages.layout(ctx, { title: "Database unavailable", active, live: true, banner }, html``))
    }

    // -- pages

    const overview = view("Overview", "/", () =>
      Effect.map(reads.overview(MAX_PAGE), (o) => (ctx: Pages.PageContext) => Pages.overview(ctx, o))
    )

    const queue = view("Queue", "/queue", (search) =>
      Effect.gen(function* () {
        const q: Pages.QueueQuery = {
          task_type: yield* param(search, "task_type"),
          status: yield* choice(search, "status", ["pending", "processing"] as const),
          priority: yield* param(search, "priority"),
          run_after_from: yield* param(search, "run_after_from"),
          run_after_to: yield* param(search, "run_after_to")
        }
        const status = yield* choice(search, "status", ["pending", "processing"] as const)
        const priority = yield* integer(search, "priority")
        const runAfterFrom = yield* instant(search, "run_after_from")
        const runAfterTo = yield* instant(search, "run_after_to")
        const n = yield* pageNumber(search, pageSize)
        const [result, waitingRows, waitingTotal] = yield* Effect.all([
          reads.items({
            taskType: q.task_type,
            status,
            priority,
            runAfterFrom,
            runAfterTo,
            offset: (n - 1) * pageSize,
            limit: pageSize,
            cut: TEXT_PREVIEW
          }),
          // The items waiting for others, the oldest first, one page of them (a count says how many more).
          reads.waiting(pageSize),
          reads.waitingCount()
        ])
        const waiting = { rows: waitingRows, total: waitingTotal }
        return (ctx: Pages.PageContext) => Pages.queue(ctx, q, n, pageSize, result, waiting)
      })
    )

    const item = view("Queue item", "/queue", () =>
      Effect.gen(function* () {
        const params = yield* HttpRouter.params
        const itemId = params["id"] ?? ""
        if (!isId(itemId)) return yield* new Refusal({ status: 404, message: "no such item: ids are numbers" })
        // The item with its full payload (none once it finished or was cancelled), and its executions in full.
        const [items, executions, nodes] = yield* Effect.all([
          reads.items({ id: itemId }),
          reads.executions({ queueItemId: itemId, order: "id", limit: MAX_PAGE }),
          // Its flow, bounded: one more step than shown says that more lie beyond.
          reads.flow(itemId, FLOW_STEPS + 1)
        ])
        const flow = { nodes: nodes.slice(0, FLOW_STEPS), more: nodes.length > FLOW_STEPS }
        const found = { item: Option.fromNullable(items.rows[0]), executions: executions.rows, flow }
        // A step waiting, or cancelled before it ran, has no row in the queue nor in the log, but its flow knows it.
        const stepOnly = nodes.some(
          (node) => node.id === itemId && (node.state === "waiting" || node.state === "cancelled")
        )
        if (Option.isNone(found.item) && found.executions.length === 0 && !stepOnly)
          return yield* new Refusal({
            status: 404,
            message: `no queue item ${itemId}, and no execution of one: it may have been cancelled or pruned`
          })
        return (ctx: Pages.PageContext) => Pages.item(ctx, itemId, found)
      })
    )

    const processed = view("Processed", "/processed", (search) =>
      Effect.gen(function* () {
        const q: Pages.ProcessedQuery = {
          status: yield* choice(search, "status", ["ok", "error"] as const),
          task_type: yield* param(search, "task_type"),
          from: yield* param(search, "from"),
          to: yield* param(search, "to")
        }
        const paging = { before: yield* id(search, "before"), after: yield* id(search, "after") }
        if (paging.before !== undefined && paging.after !== undefined)
          return yield* badRequest("after", "give before or after, not both")
        const result = yield* reads.executions({
          status: yield* choice(search, "status", ["ok", "error"] as const),
          taskType: q.task_type,
          from: yield* instant(search, "from"),
          to: yield* instant(search, "to"),
          ...paging,
          limit: pageSize,
          cut: TEXT_PREVIEW
        })
        return (ctx: Pages.PageContext) => Pages.processed(ctx, q, paging, result)
      })
    )

    const jobs = view("Jobs", "/jobs", () =>
      Effect.map(
        reads.jobs({ limit: MAX_OFFSET, cut: TEXT_PREVIEW, lastRuns: LAST_RUNS }),
        (list) => (ctx: Pages.PageContext) => Pages.jobs(ctx, list)
      )
    )

    const job = (by: "name" | "id") =>
      view("Job", "/jobs", (search) =>
        Effect.gen(function* () {
          const params = yield* HttpRouter.params
          const key = params[by] ?? ""
          if (by === "id" && !isId(key)) return yield* new Refusal({ status: 404, message: "no such job" })
          const n = yield* pageNumber(search, pageSize)
          const [found] = yield* reads.jobs(by === "name" ? { name: key } : { id: key })
          if (found === undefined)
            return yield* new Refusal({ status: 404, message: `no job named ${JSON.stringify(key)}` })
          const runs = yield* reads.runs({
            jobId: found.id,
            order: "slot",
            offset: (n - 1) * pageSize,
            limit: pageSize,
            cut: RUN_ERROR
          })
          return (ctx: Pages.PageContext) => Pages.job(ctx, found, n, pageSize, runs)
        })
      )

    const limitsPage = view("Limits", "/limits", () =>
      Effect.gen(function* () {
        const list = yield* limits.list.pipe(Effect.mapError(unavailable))
        const holding = yield* reads.holding(list.map((l) => l.taskType))
        const held = new Map(holding.map((h) => [h.taskType, h.running] as const))
        return (ctx: Pages.PageContext) => Pages.limits(ctx, list, held)
      })
    )

    // -- live updates

    const events = Effect.gen(function* () {
      const body = Live.events(live).pipe(Stream.interruptWhen(Deferred.await(closing)), Stream.encodeText)
      return HttpServerResponse.stream(body, {
        contentType: "text/event-stream",
        headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
      })
    })

    const health = Effect.gen(function* () {
      const up = yield* Effect.either(reads.now())
      return HttpServerResponse.unsafeJson(
        Either.isRight(up) ? { ok: true, database: "up" } : { ok: false, database: "unavailable" },
        { status: Either.isRight(up) ? 200 : 503 }
      )
    })

    // -- actions

    /** Checks a write: allowed at all, same origin, the token, the page's CSRF token. Reads the form fields. */
    const authorize = Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (token === undefined)
        return yield* new Refusal({
          status: 403,
          message: "this dashboard is read-only: start it with a token (kairos dashboard --token …) to allow actions"
        })
      const host = request.headers["host"]
      // Browsers send Origin on every POST; a programmatic client without one is judged by its token alone.
      const origin = request.headers["origin"] ?? request.headers["referer"]
      if (origin !== undefined) {
        const ok =
          host !== undefined &&
          [`http://${host}`, `https://${host}`].some((o) => origin === o || origin.startsWith(`${o}/`))
        if (!ok)
          return yield* new Refusal({ status: 403, message: "refused: the request did not come from this dashboard" })
      }
      const form = yield* request.urlParamsBody.pipe(
        Effect.mapError(() => new Refusal({ status: 400, message: "the form could not be read" }))
      )
      const field = (name: string) => Option.getOrUndefined(UrlParams.getFirst(form, name))
      const authorization = request.headers["authorization"]
      const given = authorization?.startsWith("Bearer ") === true ? authorization.slice(7) : (field("token") ?? "")
      // The token given with the action, or the session the token URL opened (SameSite=Strict, and the CSRF check
      // below holds for it as for the token).
      if (!(given !== "" && sameSecret(given, token)) && !hasSession(request))
        return yield* new Refusal({ status: 401, message: "refused: this action needs the dashboard's token" })
      const csrfGiven = request.headers["x-csrf-token"] ?? field("csrf") ?? ""
      if (!sameSecret(csrfGiven, csrf))
        return yield* new Refusal({ status: 403, message: "refused: the page is stale (CSRF check failed); reload it" })
      return field
    })

    const answer = (status: number, ok: boolean, message: string) =>
      Effect.map(HttpServerRequest.HttpServerRequest, (request) =>
        (request.headers["accept"] ?? "").includes("application/json")
          ? HttpServerResponse.unsafeJson({ ok, message }, { status })
          : page(
              status,
              Pages.layout(
                context(new Date(), hasSession(request)),
                { title: ok ? "Done" : "Refused", active: "", live: false },
                html`<h1>${ok ? "Done" : "Refused"}</h1>
                  <p class="${ok ? "banner info" : "banner error"}">${message}</p>
                  <p><a href="${base}/">Back to the overview</a></p>`
              )
            )
      )

    const act = (
      run: (field: (name: string) => string | undefined) => Effect.Effect<string, Refusal>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest> =>
      authorize.pipe(
        Effect.flatMap(run),
        Effect.tap(() => pages.forget),
        Effect.flatMap((message) => answer(200, true, message)),
        Effect.catchTag("Refusal", (refusal) => answer(refusal.status, false, refusal.message))
      )

    const required = (
      field: (name: string) => string | undefined,
      name: string,
      check?: (value: string) => boolean
    ) => {
      const value = field(name)
      return value === undefined || value === "" || (check !== undefined && !check(value))
        ? Effect.fail(badRequest(name, check === undefined ? "missing" : "missing or not an id"))
        : Effect.succeed(value)
    }

    /** An action's failure as the dashboard answers it: what was not found (404), or the database away (503). */
    const refused = (e: Admin.NotFoundError | { readonly _tag: string; readonly message: string }): Refusal =>
      e instanceof Admin.NotFoundError
        ? new Refusal({
            status: 404,
            message: e.what === "job" ? `no job named ${shown(e.key)}` : e.message
          })
        : unavailable(e)

    const setSwitch = (green: boolean) =>
      act(() =>
        Effect.gen(function* () {
          yield* (green ? admin.resume : admin.pause).pipe(Effect.mapError(refused))
          return green ? "resumed: workers claim and run work again" : "paused: nothing new starts on any worker"
        })
      )

    /** The job an action names: by `job` (its id, what the pages send) or by `name` (for scripts). */
    const jobName = (field: (name: string) => string | undefined) =>
      Effect.gen(function* () {
        const byId = field("job")
        if (byId === undefined) return yield* required(field, "name")
        if (!isId(byId)) return yield* badRequest("job", "not an id")
        const [found] = yield* reads.jobs({ id: byId, cut: 0 }).pipe(Effect.mapError(unavailable))
        if (found === undefined) return yield* new Refusal({ status: 404, message: `no job ${byId}` })
        return found.name
      })
    const shown = (name: string) => JSON.stringify(clip(name, 200))

    const setJob = (enabled: boolean) =>
      act((field) =>
        Effect.gen(function* () {
          const name = yield* jobName(field)
          yield* (enabled ? admin.resumeJob(name) : admin.pauseJob(name)).pipe(Effect.mapError(refused))
          return enabled
            ? `resumed job ${shown(name)}`
            : `paused job ${shown(name)}: no slot of it starts until it is resumed`
        })
      )

    const runJob = act((field) =>
      Effect.gen(function* () {
        const name = yield* jobName(field)
        const run = yield* admin.runJob(name).pipe(Effect.mapError(refused))
        return `fired job ${shown(name)}: run ${run.id} is due now`
      })
    )

    const cancel = act((field) =>
      Effect.gen(function* () {
        const itemId = yield* required(field, "item", isId)
        const was = yield* admin.cancel(itemId).pipe(Effect.mapError(refused))
        return was === "processing"
          ? `cancelled item ${itemId}: it was running; its result will not be recorded`
          : `cancelled item ${itemId}`
      })
    )

    const retry = act((field) =>
      Effect.gen(function* () {
        const execution = yield* required(field, "execution", isId)
        const enqueued = yield* admin.retry(execution).pipe(Effect.mapError(refused))
        return `enqueued item ${enqueued.id} with the task type and payload of execution ${execution}`
      })
    )

    /** An optional whole number of at least 1 from a form. */
    const count = (field: (name: string) => string | undefined, name: string) => {
      const value = field(name)?.trim()
      if (value === undefined || value === "") return Effect.succeed(undefined)
      return /^\d{1,9}$/.test(value) && Number(value) >= 1
        ? Effect.succeed(Number(value))
        : Effect.fail(badRequest(name, "must be a whole number of at least 1"))
    }

    const setLimit = act((field) =>
      Effect.gen(function* () {
        const taskType = yield* required(field, "task_type")
        const input = {
          taskType,
          concurrency: yield* count(field, "concurrency"),
          perGroup: field("per_group") === "on" || field("per_group") === "true",
          rate: yield* count(field, "rate"),
          // Checked by Limits.parse (an unreadable duration is refused there, naming `per`).
          per: (field("per")?.trim() || undefined) as DomainLimits.FlowLimitInput["per"],
          ratePerGroup: field("rate_per_group") === "on" || field("rate_per_group") === "true"
        }
        const limit = yield* limits
          .set(input)
          .pipe(
            Effect.mapError((e) =>
              e._tag === "InvalidLimitError" ? badRequest(fieldName(e.field), e.message) : unavailable(e)
            )
          )
        return `limits of ${shown(limit.taskType)}: ${DomainLimits.describe(limit)} (every worker obeys them now)`
      })
    )

    const clearLimit = act((field) =>
      Effect.gen(function* () {
        const taskType = yield* required(field, "task_type")
        const had = yield* limits.clear(taskType).pipe(Effect.mapError(unavailable))
        if (!had) return yield* new Refusal({ status: 404, message: `${shown(taskType)} has no limits` })
        return `cleared the limits of ${shown(taskType)}`
      })
    )

    const notAllowed = Effect.succeed(
      HttpServerResponse.setHeader(
        page(
          405,
          Pages.layout(
            context(new Date()),
            { title: "Method not allowed", active: "", live: false },
            Pages.problem("Method not allowed", "actions are POST requests sent by the dashboard's buttons")
          )
        ),
        "allow",
        "POST"
      )
    )

    const notFound = Effect.map(HttpServerRequest.HttpServerRequest, (request) =>
      problemPage(
        new Refusal({ status: 404, message: `no page at ${new URL(request.url, "http://x").pathname}` }),
        "",
        hasSession(request)
      )
    )

    // -- the token for reads

    const sessionCookie = { path: cookiePath, httpOnly: true, sameSite: "strict" } as const

    /** Forgets the session: the cookie expires, and the browser goes back to the overview. */
    const logout = Effect.succeed(
      HttpServerResponse.redirect(`${base}/`, { status: 303 }).pipe(
        HttpServerResponse.expireCookie(cookieName, sessionCookie)
      )
    )

    /** The 401 answer: one line saying how to get in, as a page (no script, no data), JSON, or text. */
    const locked = (request: HttpServerRequest.HttpServerRequest) => {
      const message =
        token === undefined
          ? "this dashboard needs a token to be read, and was given none: start it with one"
          : "this dashboard needs its token: open the URL that `kairos dashboard` printed when it started (it ends in ?token=…), or add ?token=<your token> to this address"
      const headers = { "www-authenticate": 'Bearer realm="kairos dashboard"' }
      const accept = request.headers["accept"] ?? ""
      return accept.includes("application/json")
        ? HttpServerResponse.unsafeJson({ ok: false, message }, { status: 401, headers })
        : accept.includes("text/html") || accept === "" || accept.includes("*/*")
          ? HttpServerResponse.text(Pages.locked(base, message).markup, {
              status: 401,
              contentType: "text/html; charset=utf-8",
              headers
            })
          : HttpServerResponse.text(message, { status: 401, headers })
    }

    /**
     * In front of every route: a valid `?token=` opens a session and leaves the address; with `tokenForReads`, a
     * request without the session (or the token as Bearer) gets the 401 answer. The stylesheet, the script and
     * /health hold no data and stay open; actions (POST) check the token themselves.
     */
    const guard = <E, R>(
      app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest> =>
      Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
        if (request.method !== "GET" && request.method !== "HEAD") return app
        const url = new URL(request.url, "http://x")
        if (url.pathname.startsWith("/assets/") || url.pathname === "/health") return app
        const given = url.searchParams.get("token")
        if (token !== undefined && given !== null && given !== "" && sameSecret(given, token)) {
          url.searchParams.delete("token")
          // One leading slash: "//host" would send the browser to another site.
          const path = url.pathname.replace(/^\/+/, "/")
          return Effect.succeed(
            HttpServerResponse.redirect(`${base}${path}${url.search}`, { status: 303 }).pipe(
              HttpServerResponse.unsafeSetCookie(cookieName, cookieValue, sessionCookie)
            )
          )
        }
        return !tokenForReads || hasSession(request) ? app : Effect.succeed(locked(request))
      })

    const asset = (body: string, contentType: string) =>
      Effect.succeed(HttpServerResponse.text(body, { contentType, headers: { "cache-control": "no-cache" } }))

    return HttpRouter.empty
      .pipe(
        HttpRouter.get("/", overview),
        HttpRouter.get("/queue", queue),
        HttpRouter.get("/queue/:id", item),
        HttpRouter.get("/processed", processed),
        HttpRouter.get("/jobs", jobs),
        HttpRouter.get("/limits", limitsPage),
        HttpRouter.get("/jobs/by-id/:id", job("id")),
        HttpRouter.get("/jobs/:name", job("name")),
        HttpRouter.get("/events", events),
        HttpRouter.get("/health", health),
        HttpRouter.get("/assets/app.css", asset(Assets.css, "text/css; charset=utf-8")),
        HttpRouter.get("/assets/app.js", asset(Assets.js, "text/javascript; charset=utf-8"))
      )
      .pipe(
        HttpRouter.post("/actions/pause-all", setSwitch(false)),
        HttpRouter.post("/actions/resume-all", setSwitch(true)),
        HttpRouter.post("/actions/job-pause", setJob(false)),
        HttpRouter.post("/actions/job-resume", setJob(true)),
        HttpRouter.post("/actions/job-run", runJob),
        HttpRouter.post("/actions/cancel", cancel),
        HttpRouter.post("/actions/retry", retry),
        HttpRouter.post("/actions/limit-set", setLimit),
        HttpRouter.post("/actions/limit-clear", clearLimit),
        HttpRouter.post("/logout", logout),
        HttpRouter.all("/actions/*", notAllowed),
        HttpRouter.all("*", notFound),
        // Every answer, pages and refusals alike, carries the security headers.
        HttpRouter.use((app) => Effect.map(guard(app), HttpServerResponse.setHeaders(SECURITY_HEADERS)))
      )
  })

const unavailable = (error: { readonly message: string }) =>
  new Refusal({ status: 503, message: `database unavailable: ${error.message}` })

/** A limit's field as the form names it. */
const fieldName = (field: DomainLimits.InvalidLimitError["field"]): string =>
  field === "taskType"
    ? "task_type"
    : field === "perGroup"
      ? "per_group"
      : field === "ratePerGroup"
        ? "rate_per_group"
        : field

/** A random token for actions: 32 bytes, URL-safe. */
export const generateToken = (): string => randomBytes(32).toString("base64url")

/**
 * Serves the dashboard until the scope closes; returns the URL it listens on. Binds `127.0.0.1:4500` by default. Beyond
 * loopback every page needs the token (unless `publicRead`), and a host there without a token is refused. On a
 * loopback address, a request whose `Host` is not a loopback name is refused (a DNS-rebinding page cannot read the
 * dashboard).
 */
export const serve = (
  options: ServeOptions = {}
): Effect.Effect<
  {
    readonly url: string
    readonly port: number
    /** Whether every page needs the token (beyond loopback, unless `publicRead`). */
    readonly tokenForReads: boolean
  },
  DashboardError,
  SqlClient.SqlClient | PgClient.PgClient | Scope.Scope
> =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 4500
    if (!Number.isInteger(port) || port < 0 || port > 65_535)
      return yield* new DashboardError({ reason: "InvalidOption", message: `port ${port} is not a TCP port (0-65535)` })
    const publicRead = options.publicRead ?? false
    if (!isLoopback(host) && options.token === undefined && !publicRead)
      return yield* new DashboardError({
        reason: "InvalidOption",
        message: `refusing to serve on ${host} without a token: anyone who reaches it could read the queue. Give a token (--token), let anyone read (--public-read), or bind to 127.0.0.1`
      })
    // Beyond loopback, the pages are as guarded as the actions.
    const tokenForReads = options.tokenForReads ?? (!isLoopback(host) && !publicRead)
    const app = yield* router({ ...options, tokenForReads })
    const nodeServer = createServer()
    const server = yield* NodeHttpServer.make(() => nodeServer, { host, port }).pipe(
      Effect.mapError(
        (e: ServeError) =>
          new DashboardError({
            reason: "Listen",
            message: `could not listen on ${host}:${port}: ${describeCause(e.cause)}`,
            cause: e
          })
      )
    )
    // Runs before the server's own close: open event streams and keep-alive sockets would hold that close forever.
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    const guarded = isLoopback(host)
      ? Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
          const name = (request.headers["host"] ?? "").replace(/:\d+$/, "")
          return isLoopback(name)
            ? app
            : Effect.succeed(HttpServerResponse.text("unexpected Host header", { status: 421 }))
        })
      : app
    yield* HttpServer.serveEffect(guarded).pipe(Effect.provideService(HttpServer.HttpServer, server))
    const address = server.address
    const bound = address._tag === "TcpAddress" ? address.port : port
    const shown = host.includes(":") ? `[${host}]` : host
    return {
      url: `http://${shown}:${bound}${(options.basePath ?? "").replace(/\/+$/, "")}/`,
      port: bound,
      tokenForReads
    }
  })

/** `serve` as a layer: the dashboard runs while the layer is in use. */
export const layer = (
  options: ServeOptions = {}
): Layer.Layer<never, DashboardError, SqlClient.SqlClient | PgClient.PgClient> => Layer.scopedDiscard(serve(options))

const describeCause = (cause: unknown): string =>
  cause instanceof Error ? cause.message : typeof cause === "string" ? cause : "unknown error"
