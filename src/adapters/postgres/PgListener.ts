/**
 * A LISTEN/NOTIFY wake-up source that survives a dead connection.
 *
 * @effect/sql-pg's `listen()` stalls forever once its connection dies and drops empty payloads (STACK.md §9), so
 * this listener owns a dedicated `pg.Client`, checks it with `SELECT 1`, and reconnects with backoff. Notifications
 * sent while it is disconnected are lost: treat them as hints and poll on `onReconnect`.
 *
 * The client's `application_name` is `kairos-listener:<channel>`, so an operator (or a test) can find its backend in
 * `pg_stat_activity`.
 *
 * Through a transaction pooler (PgBouncer in transaction mode) LISTEN is accepted but delivers nothing: the server
 * session that ran it goes back to the pool. So a connection whose backend is not the one that answers it (the
 * process id the login gave is not `pg_backend_pid()`: something sits in between) is tested: a NOTIFY sent from
 * another connection must come back within `probeTimeout`. When it does not, the listener says so once, in one line
 * ending with `fallback`, and stops: `live` stays false, and the callers' poll does the work. A LISTEN refused (an
 * answer with an SQLSTATE: a pooler that takes none, a standby) is said the same way once, then tried again quietly
 * every 30 seconds.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { isSqlState, where } from "./PgConnect.js"

/** How to reach Postgres, what to listen to and what to call. */
export interface ListenerOptions {
  /** The Postgres connection URL. */
  readonly url: string | Redacted.Redacted
  /** The channel: already a safe lower-case identifier of at most 63 bytes. */
  readonly channel: string
  /** Called synchronously for every notification on the channel, empty payloads included. */
  readonly onNotify: (payload: string) => void
  /**
   * Called after a successful re-connect (not the connect `make` waited for; but a first connect that succeeds only
   * after `make` returned counts). Notifications sent while disconnected are lost, so callers poll once here.
   */
  readonly onReconnect?: (() => void) | undefined
  /** How often `SELECT 1` checks the listening connection; a failure reconnects. Default 5 seconds. */
  readonly healthCheckInterval?: Duration.DurationInput | undefined
  /**
   * How long a connect, the LISTEN or a health check may take before the connection is given up. Bounds every round
   * trip, so that a half-open TCP connection (no RST ever arrives) cannot hang a step forever. Default 10 seconds.
   */
  readonly operationTimeout?: Duration.DurationInput | undefined
  /** How long a probe NOTIFY may take to come back through a connection that is not direct. Default 2 seconds. */
  readonly probeTimeout?: Duration.DurationInput | undefined
  /** What to do when LISTEN delivers nothing, ending the line that says so. */
  readonly fallback?: string | undefined
  /** The delay before reconnecting: doubles from `initial` (default 100 ms) up to `max` (default 5 s). */
  readonly reconnectBackoff?:
    | { readonly initial?: Duration.DurationInput; readonly max?: Duration.DurationInput }
    | undefined
}

/** Why a connection was given up; internal, it only drives the reconnect loop and its log line. */
class ListenerError extends Data.TaggedError("ListenerError")<{
  readonly reason: "connect" | "listen" | "probe" | "health check" | "lost" | "undelivered"
  readonly cause: unknown
}> {}

// Closing must not hold the scope open for long: a graceful end is tried, then the socket is destroyed.
const closeTimeout = Duration.seconds(2)

// Per connection: whether its callbacks may still fire, and whether its LISTEN went through.
interface Live {
  active: boolean
  listening: boolean
}

const failures: Record<ListenerError["reason"], string> = {
  connect: "could not connect",
  listen: "LISTEN failed",
  probe: "testing LISTEN failed",
  undelivered: "LISTEN delivers nothing",
  "health check": "health check failed",
  lost: "connection lost"
}

const describe = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/** The payloads of probes (this process's or another's): never passed on. */
const PROBE = "kairos-probe:"

/**
 * Whether `cause` refuses LISTEN itself: an error with an SQLSTATE (the server or a pooler answered), not a lost
 * connection (08), an operator's or a restart's (57), nor a lack of resources (53).
 */
const refused = (cause: unknown): boolean => {
  const code = (cause as { code?: unknown } | null)?.code
  return isSqlState(code) && !/^(08|57|53)/.test(code)
}

// How long a refused LISTEN waits before it is tried again (quietly): a standby promoted, a pooler reconfigured.
const refusedRetry = Duration.seconds(30)

/**
 * Listens until the scope closes. Never fails: connection problems are logged (`Effect.logWarning`) and retried with
 * backoff. Resolves once the first `LISTEN` has been executed (so a NOTIFY sent after `yield* make(...)` returns is
 * delivered), or after the first connection attempt failed (it keeps retrying in the background).
 *
 * @example
 * ```ts
 * const listener = yield* PgListener.make({ url, channel: "kairos_wake", onNotify: () => wake(), onReconnect: poll })
 * const up = yield* listener.connected
 * ```
 */
export const make: (options: ListenerOptions) => Effect.Effect<
  {
    readonly connected: Effect.Effect<boolean>
    /** `connected`, read without an Effect (a hot path asks it often). */
    readonly live: () => boolean
  },
  never,
  Scope.Scope
> = Effect.fnUntraced(function* (options: ListenerOptions) {
  const url = typeof options.url === "string" ? options.url : Redacted.value(options.url)
  const { channel, onNotify, onReconnect } = options
  const applicationName = `kairos-listener:${channel}`.slice(0, 63)
  const healthCheckInterval = Duration.decode(options.healthCheckInterval ?? "5 seconds")
  const operationTimeout = Duration.decode(options.operationTimeout ?? "10 seconds")
  const initialBackoff = Duration.decode(options.reconnectBackoff?.initial ?? "100 millis")
  const maxBackoff = Duration.max(initialBackoff, Duration.decode(options.reconnectBackoff?.max ?? "5 seconds"))
  const probeTimeout = Duration.decode(options.probeTimeout ?? "2 seconds")
  const fallback = options.fallback === undefined ? "" : `: ${options.fallback}`
  // The probe this listener waits for, if any: its payload and what to call when it comes.
  let probe: { readonly payload: string; readonly arrived: () => void } | undefined
  // LISTEN was refused and that was said: nothing more is said until it works again.
  let fellBack = false

  // Whether the current connection listens: read as `connected` (an Effect) and `live` (a plain call).
  let listening = false
  const ready = yield* Deferred.make<void>()
  // pg calls us from its event emitter, outside any fiber: log through the caller's runtime (logger, annotations).
  const runtime = yield* Effect.runtime<never>()
  const logFromCallback = (message: string, cause: unknown) =>
    Runtime.runFork(runtime)(
      Effect.logWarning(`PgListener: ${message}: ${describe(cause)}`).pipe(Effect.annotateLogs({ channel }))
    )

  const attempt = <A>(reason: ListenerError["reason"], run: () => Promise<A>) =>
    Effect.tryPromise({ try: run, catch: (cause) => new ListenerError({ reason, cause }) }).pipe(
      Effect.timeoutFail({
        duration: operationTimeout,
        onTimeout: () => new ListenerError({ reason, cause: `timed out after ${Duration.format(operationTimeout)}` })
      })
    )

  const open = (lost: Deferred.Deferred<never, ListenerError>, live: Live) => {
    const client = new pg.Client({
      connectionString: url,
      application_name: applicationName,
      keepAlive: true,
      connectionTimeoutMillis: Duration.toMillis(operationTimeout)
    })
    const lose = (cause: unknown) => Deferred.unsafeDone(lost, Exit.fail(new ListenerError({ reason: "lost", cause })))
    // Never removed: an 'error' event without a listener would crash the process, even after we let go.
    client.on("error", lose)
    client.on("end", () => lose("connection ended"))
    client.on("notification", (message) => {
      if (!live.active || message.channel !== channel) return
      if (message.payload?.startsWith(PROBE) === true) {
        if (message.payload === probe?.payload) probe.arrived()
        return
      }
      try {
        onNotify(message.payload ?? "")
      } catch (cause) {
        // A throw here would unwind into pg's protocol parser and break the connection.
        logFromCallback("onNotify threw", cause)
      }
    })
    return client
  }

  // Interruptible before the timeout: both run in a release (uninterruptible), where a timeout could not cut the wait
  // short, and on a connection that stopped answering (a frozen pooler or network) that wait never ended.
  const unlisten = (client: pg.Client) =>
    Effect.tryPromise(() => client.query(`UNLISTEN ${client.escapeIdentifier(channel)}`)).pipe(
      Effect.interruptible,
      Effect.timeout(closeTimeout),
      Effect.ignore
    )

  const close = (client: pg.Client, live: Live, exit: Exit.Exit<unknown, unknown>) =>
    Effect.gen(function* () {
      live.active = false
      listening = false
      // UNLISTEN only on shutdown: a failed connection cannot answer, and ending the session drops the LISTEN anyway.
      if (live.listening && Exit.isInterrupted(exit)) yield* unlisten(client)
      const ended = yield* Effect.tryPromise(() => client.end()).pipe(
        Effect.interruptible,
        Effect.timeout(closeTimeout),
        Effect.option
      )
      if (ended._tag === "None") client.connection.stream.destroy()
    })

  /**
   * Succeeds once notifications reach `client`: at once on a direct session (the backend answering is the one the
   * login named), else when a NOTIFY sent from another connection comes back within `probeTimeout`.
   */
  const delivers = (client: pg.Client) =>
    Effect.gen(function* () {
      const [row] = (yield* attempt("probe", () => client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")))
        .rows
      if (row?.pid === (client as unknown as { processID: number | null }).processID) return
      const payload = `${PROBE}${randomBytes(8).toString("hex")}`
      const arrived = yield* Deferred.make<void>()
      probe = { payload, arrived: () => Deferred.unsafeDone(arrived, Exit.void) }
      const sender = new pg.Client({ connectionString: url, application_name: `${applicationName}-probe`.slice(0, 63) })
      sender.on("error", () => undefined)
      yield* Effect.ensuring(
        attempt("probe", async () => {
          await sender.connect()
          await sender.query("SELECT pg_notify($1, $2)", [channel, payload])
        }),
        Effect.promise(() => sender.end().catch(() => undefined))
      )
      const came = yield* Deferred.await(arrived).pipe(Effect.timeout(probeTimeout), Effect.option)
      probe = undefined
      if (came._tag === "None")
        return yield* new ListenerError({
          reason: "undelivered",
          cause: `a NOTIFY did not come back within ${Duration.format(probeTimeout)}`
        })
    })

  // When the current connection's LISTEN went through, if it did: the loop resets its backoff from it.
  const listeningSince = yield* Ref.make<number | undefined>(undefined)

  // One connection, from connect to loss. Fails only: it never ends while the connection is healthy.
  const session = (reconnecting: boolean): Effect.Effect<never, ListenerError> =>
    Effect.scoped(
      Effect.gen(function* () {
        const lost = yield* Deferred.make<never, ListenerError>()
        const live: Live = { active: true, listening: false }
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => open(lost, live)),
          (client, exit) => close(client, live, exit)
        )
        yield* attempt("connect", () => client.connect())
        yield* attempt("listen", () => client.query(`LISTEN ${client.escapeIdentifier(channel)}`))
        live.listening = true
        // Through a transaction pooler the LISTEN stays on a server session of the pool: taken back, most likely
        // there (a pooler reuses its last server connection first).
        yield* delivers(client).pipe(
          Effect.tapError((e) => (e.reason === "undelivered" ? unlisten(client) : Effect.void))
        )
        yield* Ref.set(listeningSince, yield* Clock.currentTimeMillis)
        listening = true
        if (fellBack) yield* Effect.logInfo(`wake-ups by LISTEN work again on ${where(url)}`)
        fellBack = false
        yield* Deferred.succeed(ready, undefined)
        if (reconnecting && failedInARow > 1)
          yield* Effect.logInfo(`PgListener: listening again, after ${failedInARow} failed tries`)
        if (reconnecting && onReconnect !== undefined) {
          yield* Effect.try(onReconnect).pipe(
            Effect.catchAll((error) => Effect.logWarning(`PgListener: onReconnect threw: ${describe(error.error)}`))
          )
        }
        // A killed backend usually announces itself through 'error'/'end'; the check catches one that goes silent.
        const healthCheck = Effect.sleep(healthCheckInterval).pipe(
          Effect.zipRight(attempt("health check", () => client.query("SELECT 1"))),
          Effect.forever
        )
        return yield* Effect.raceFirst(Deferred.await(lost), healthCheck)
      })
    )

  // Sessions in a row that ended without listening a while (the first is the loss itself): a long outage logs at the
  // 1st, 2nd, 4th, 8th… of them, not at every try.
  let failedInARow = 0
  const loop = Effect.gen(function* () {
    let delay = initialBackoff
    for (;;) {
      yield* Ref.set(listeningSince, undefined)
      // After make has returned, every connect may follow lost notifications: a re-connect, or the first success
      // after a failed first attempt.
      const error = yield* Effect.flip(session(yield* Deferred.isDone(ready)))
      // A transaction pooler between here and Postgres: LISTEN delivers nothing. Said once (before `make` returns,
      // when it is at start); not tried again, since every connection would go the same way.
      if (error.reason === "undelivered") {
        yield* Effect.logWarning(
          `wake-ups fall back to the poll: LISTEN through ${where(url)} delivers no notifications (a transaction pooler?)${fallback}`
        )
        return yield* Deferred.succeed(ready, undefined)
      }
      // LISTEN refused (a pooler that takes none, a standby): said once, then tried again quietly now and then.
      if (error.reason === "listen" && refused(error.cause)) {
        if (!fellBack)
          yield* Effect.logWarning(
            `wake-ups fall back to the poll: ${where(url)} refused LISTEN (${describe(error.cause)})${fallback}`
          )
        fellBack = true
        yield* Deferred.succeed(ready, undefined)
        yield* Effect.sleep(refusedRetry)
        continue
      }
      yield* Deferred.succeed(ready, undefined)
      const since = yield* Ref.get(listeningSince)
      if (since !== undefined) {
        // A connection that stayed up a while starts the backoff over; one that keeps dying at once does not.
        const upFor = Duration.millis((yield* Clock.currentTimeMillis) - since)
        if (Duration.greaterThanOrEqualTo(upFor, maxBackoff)) {
          delay = initialBackoff
          failedInARow = 0
        }
      }
      failedInARow++
      if ((failedInARow & (failedInARow - 1)) === 0) {
        const after = failedInARow > 1 ? ` (${failedInARow} tries in a row)` : ""
        yield* Effect.logWarning(
          `PgListener: ${failures[error.reason]}${after}: ${describe(error.cause)}; reconnecting in ${Duration.format(delay)}`
        )
      }
      yield* Effect.sleep(delay)
      delay = Duration.min(Duration.times(delay, 2), maxBackoff)
    }
  }).pipe(Effect.annotateLogs({ channel }))

  yield* Effect.forkScoped(loop)
  yield* Deferred.await(ready)
  return { connected: Effect.sync(() => listening), live: () => listening }
})
