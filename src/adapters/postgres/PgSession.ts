/**
 * The limits kairos's connections run under — a statement timeout and an idle-in-transaction timeout — without any
 * session state, so they hold through a transaction pooler (PgBouncer in transaction mode, the pooled endpoints of
 * Supabase, Neon, RDS Proxy) as on a direct connection:
 *
 * - no startup parameter: PgBouncer 1.18 refuses `statement_timeout` there ("unsupported startup parameter");
 * - a transaction begins with `SET LOCAL` of both (in the `BEGIN`'s own round trip): the server enforces them,
 *   a frozen process holding locks mid-transaction included;
 * - a statement outside a transaction is timed by the client, which asks the server to cancel it (the protocol's
 *   cancel request, which a pooler forwards to the server connection running it) once it has run longer, and
 *   sends nothing more on that connection until the cancel was answered (a late cancel cannot hit the next
 *   statement). Its error reads as the server's own (SQLSTATE 57014, "canceling statement due to statement
 *   timeout"). A `SET` clause on a function would not do: Postgres arms the statement timer when the statement
 *   starts, and a function's setting changes nothing for the statement that calls it (measured on 15).
 *
 * - a connection that stops answering (a frozen pooler, a network that drops packets) is closed, which the server
 *   takes as a rollback: outside a transaction once the statement and its cancel went unanswered 5 s past the
 *   timeout; inside one once a statement went unanswered 5 s past the transaction's own `statement_timeout` (the
 *   server would have answered with its error by then), a `COMMIT` (and a transactional handler's record, once it
 *   returned: `ownStatementsFollow`) 5 s past the connection's statement timeout whatever the transaction's limit (a
 *   transactional handler's runs to its own timeout, 15 minutes by default, and its worker would wait that long on a
 *   frozen network), and a `ROLLBACK` after 5 s. Otherwise a transaction whose
 *   limit the client does not know (a `statement_timeout` it cannot read, or 0, as a migration waiting for its lock
 *   sets) is not timed. A COMMIT closed unanswered may have committed all the same: its callers treat it as such (a
 *   record fenced by its lease token is refused, not written twice). Work that runs at COMMIT (deferred constraints,
 *   triggers) must fit in the statement timeout.
 *
 * What the client cannot bound: a statement outside a transaction whose process is frozen (SIGSTOP) while it runs;
 * such a statement holds only the locks of its own implicit transaction, and ends when it ends.
 */
import net from "node:net"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Pg from "pg"
import { EndingClient } from "./PgConnect.js"

/** The limits, in milliseconds; 0 turns one off. */
export interface Limits {
  readonly statementTimeoutMs: number
  readonly idleInTransactionTimeoutMs: number
}

const SETTINGS = ["statement_timeout", "idle_in_transaction_session_timeout"] as const

/**
 * The limits for a URL and the options' durations (default one minute and 30 seconds), and the URL without them: a
 * setting written in the URL's query (`?statement_timeout=5000`, in milliseconds) wins, and is taken out of the URL,
 * since a pooler refuses it as a startup parameter.
 */
export const limitsOf = (
  url: string,
  options: {
    readonly statementTimeout?: Duration.DurationInput | undefined
    readonly idleInTransactionTimeout?: Duration.DurationInput | undefined
  }
): { readonly url: string; readonly limits: Limits } => {
  const ms = (input: Duration.DurationInput | undefined, fallback: Duration.DurationInput) =>
    Math.max(0, Math.round(Duration.toMillis(Duration.decode(input ?? fallback))))
  const fromUrl: Partial<Record<(typeof SETTINGS)[number], number>> = {}
  let rest = url
  const query = url.indexOf("?")
  if (query >= 0) {
    const kept: Array<string> = []
    for (const part of url.slice(query + 1).split("&")) {
      const [key, value = ""] = part.split("=")
      const setting = SETTINGS.find((s) => s === key)
      const n = Number.parseInt(decodeURIComponent(value), 10)
      if (setting !== undefined && Number.isFinite(n)) fromUrl[setting] = Math.max(0, n)
      else if (part.length > 0) kept.push(part)
    }
    rest = url.slice(0, query) + (kept.length > 0 ? `?${kept.join("&")}` : "")
  }
  return {
    url: rest,
    limits: {
      statementTimeoutMs: fromUrl.statement_timeout ?? ms(options.statementTimeout, "1 minute"),
      idleInTransactionTimeoutMs:
        fromUrl.idle_in_transaction_session_timeout ?? ms(options.idleInTransactionTimeout, "30 seconds")
    }
  }
}

/**
 * How long a cancel request may take to be answered before the connection is used again anyway (or an interruption
 * goes on without it), and how long after its deadline a statement left without an answer keeps its connection.
 */
export const CANCEL_TIMEOUT_MS = 5000

/** What node-postgres keeps on a client and its types do not declare. */
interface ClientInternals {
  readonly processID: number | null
  readonly secretKey: number | null
  readonly host: string
  readonly port: number
}

/**
 * Asks the server (or the pooler in front of it) to cancel what `client` is running, with the protocol's cancel
 * request on a connection of its own; resolves once that connection was closed by the other side (the request was
 * handled) or after 5 s. Never fails: a cancel is best effort. A pooler maps the client's key to its server
 * connection, which `pg_cancel_backend(pid)` cannot: the pid a pooler gives its clients is not a backend's.
 */
export const cancelRequest = (client: Pg.Client): Promise<void> =>
  new Promise((resolve) => {
    const { processID, secretKey, host, port } = client as unknown as ClientInternals
    if (processID === null || secretKey === null) return resolve()
    let settled = false
    const done = () => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      resolve()
    }
    const socket = host.startsWith("/") ? net.connect(`${host}/.s.PGSQL.${port}`) : net.connect(port, host)
    const timer = setTimeout(done, CANCEL_TIMEOUT_MS)
    socket.on("connect", () => {
      // CancelRequest: length 16, code 80877102, the process id and the secret key the server gave at login.
      const message = Buffer.alloc(16)
      message.writeInt32BE(16, 0)
      message.writeInt32BE(80877102, 4)
      message.writeInt32BE(processID, 8)
      message.writeInt32BE(secretKey, 12)
      socket.write(message)
    })
    socket.on("error", done)
    socket.on("close", done)
  })

/** The `BEGIN` kairos's connections send: the transaction's limits set in the same round trip. */
export const beginWith = (limits: Limits): string =>
  `BEGIN; SET LOCAL statement_timeout = ${limits.statementTimeoutMs}; ` +
  `SET LOCAL idle_in_transaction_session_timeout = ${limits.idleInTransactionTimeoutMs}`

/**
 * The `statement_timeout` (ms) a statement's text sets for the transaction it begins or runs in: a number for
 * `SET LOCAL statement_timeout = <ms>` (how kairos's `BEGIN`s and its migrations write it), undefined when the text
 * sets it otherwise (units, `set_config`, a session `SET`: not read, so not trusted), null when it does not name it.
 */
export const statementTimeoutSet = (text: string): number | undefined | null => {
  if (!text.includes("statement_timeout")) return null
  const set = /^(?:BEGIN; )?SET LOCAL statement_timeout = (\d+)(?:;|$)/.exec(text)
  if (set === null || text.indexOf("statement_timeout") !== text.lastIndexOf("statement_timeout")) return undefined
  return Number(set[1])
}

/** Where a limited client keeps its mark that kairos's own statements follow (see `ownStatementsFollow`). */
const OWN = Symbol.for("kairos/PgSession/ownStatements")

/**
 * Marks that the rest of the transaction in progress on `client` is kairos's own statements (a transactional
 * handler returned: its record and COMMIT follow). The client then times them by its statement timeout, not by the
 * transaction's limit, which is the handler's. Nothing is sent: the server keeps the transaction's limits. A client
 * that is not a limited client (an application's own) is left as it is.
 */
export const ownStatementsFollow = (client: object): void => {
  const marked = client as { [OWN]?: boolean }
  if (OWN in marked) marked[OWN] = true
}

/** What node-postgres's client does that this class builds on; its types declare none of it. */
interface Internals {
  readyForQuery: boolean
  _pulseQueryQueue(): void
}

/**
 * node-postgres's client (as `EndingClient`) under `limits`, for a pool's `Client` option: a `BEGIN` sent as such
 * (how @effect/sql begins a transaction) also sets the transaction's limits, and a statement sent outside a
 * transaction is cancelled once it runs longer than the statement timeout.
 */
export const limitedClient = (limits: Limits): typeof EndingClient => {
  const begin = beginWith(limits)
  const timeoutMs = limits.statementTimeoutMs

  class LimitedClient extends EndingClient {
    /** The rest of the transaction in progress is kairos's own statements (`ownStatementsFollow`). */
    [OWN] = false
    /** The running statement's timer, while one is armed. */
    timer: ReturnType<typeof setTimeout> | undefined = undefined
    /** Statements ended so far (answered, or the connection closed): tells a statement's end from a later one's. */
    ended = 0
    /** The running statement was cancelled by its timer: its cancellation is reported as a statement timeout. */
    timedOut = false
    /** A cancel request not yet answered: nothing is sent on this connection until it is. */
    cancelling = false
    /** The `statement_timeout` of the transaction in progress (ms; 0 none), undefined when not known. */
    transactionLimitMs: number | undefined = undefined

    constructor(config?: string | Pg.ClientConfig) {
      super(config)
      // Attached before the client's own handlers (attached when it connects), so these run first.
      this.connection.on("readyForQuery", () => {
        // The statement ended, answered or failed.
        this.ended++
        if (this.timer !== undefined) clearTimeout(this.timer)
        this.timer = undefined
        this.timedOut = false
      })
      this.connection.on("errorMessage", (message: { code?: string; message: string }) => {
        if (this.timedOut && message.code === "57014") message.message = "canceling statement due to statement timeout"
      })
      this.connection.on("end", () => {
        this.ended++
        if (this.timer !== undefined) clearTimeout(this.timer)
        this.timer = undefined
      })
    }

    /** Cancels the running statement (see `cancelRequest`), holding back what comes next until it was answered. */
    cancelRunning(): Promise<void> {
      const self = this as unknown as Internals & LimitedClient
      self.cancelling = true
      return cancelRequest(this).then(() => {
        self.cancelling = false
        self._pulseQueryQueue()
      })
    }
  }

  const proto = LimitedClient.prototype as unknown as Internals & {
    query: (...args: Array<unknown>) => unknown
    cancelling: boolean
    timer: ReturnType<typeof setTimeout> | undefined
    timedOut: boolean
    ended: number
    transactionLimitMs: number | undefined
    [OWN]: boolean
    cancelRunning: () => Promise<void>
    getTransactionStatus: () => string | null
    connection: Pg.Client["connection"]
  }
  const baseQuery = EndingClient.prototype.query as unknown as (...args: Array<unknown>) => unknown
  const basePulse = (EndingClient.prototype as unknown as Internals)._pulseQueryQueue
  // Closes the connection: its statement fails as a lost connection, the server rolls back what it holds, and the
  // pool makes a new one.
  const close = (client: typeof proto) => {
    client.timer = undefined
    client.connection.stream.destroy()
  }
  proto.query = function (this: typeof proto, ...args: Array<unknown>) {
    if (args[0] === "BEGIN") args[0] = begin
    // Timed when it is sent at once (the connection is free). A statement that waits behind another on the same
    // client is not: kairos never queues one.
    if (!this.readyForQuery || this.cancelling) return baseQuery.apply(this, args)
    const first = args[0]
    const text = typeof first === "string" ? first : ((first as { text?: unknown } | null)?.text ?? "")
    const set = typeof text === "string" ? statementTimeoutSet(text) : undefined
    if (this.getTransactionStatus() === "I") {
      // A transaction's limit is known from the `BEGIN` that sets it (kairos's own), else not.
      this.transactionLimitMs = set ?? undefined
      this[OWN] = false
      if (timeoutMs > 0) {
        if (this.timer !== undefined) clearTimeout(this.timer)
        const sent = this.ended
        this.timer = setTimeout(() => {
          this.timer = undefined
          this.timedOut = true
          // Cancelled as an interrupted statement is, and closed the same way if it still has not ended 5 s after.
          void cancelInterrupted(this as unknown as Pg.Client, () => this.ended !== sent)
        }, timeoutMs)
      }
    } else {
      // Inside a transaction the server's `SET LOCAL` limit applies; no answer 5 s past it means none will come. A
      // ROLLBACK can always be cut short: a closed connection rolls back too. A COMMIT, and a transactional handler's
      // record once it returned, are kairos's own statements, not the transaction's work: they get the connection's
      // statement timeout, not the handler's long limit (or none), so a network that freezes on them frees the
      // worker within that and 5 s.
      if (set !== null) this.transactionLimitMs = set
      const limit = this.transactionLimitMs
      const rollback = typeof text === "string" && /^ROLLBACK\s*$/i.test(text)
      const own = timeoutMs > 0 && (this[OWN] || (typeof text === "string" && /^COMMIT\s*$/i.test(text)))
      const waitMs = rollback
        ? CANCEL_TIMEOUT_MS
        : own
          ? (limit !== undefined && limit > 0 ? Math.min(limit, timeoutMs) : timeoutMs) + CANCEL_TIMEOUT_MS
          : limit !== undefined && limit > 0
            ? limit + CANCEL_TIMEOUT_MS
            : 0
      if (waitMs > 0) {
        if (this.timer !== undefined) clearTimeout(this.timer)
        this.timer = setTimeout(() => close(this), waitMs)
      }
    }
    return baseQuery.apply(this, args)
  }
  proto._pulseQueryQueue = function (this: typeof proto) {
    if (this.cancelling) return
    basePulse.call(this)
  }
  return LimitedClient
}

/** Cancels what `client` runs: through its own method when it is a limited client, else by a cancel request. */
export const cancelRunning = (client: Pg.Client): Promise<void> => {
  const own = (client as { cancelRunning?: () => Promise<void> }).cancelRunning
  return own === undefined ? cancelRequest(client) : own.call(client)
}

/**
 * Cancels a statement that must not run on (`cancelRunning`): an interrupted one, or one past the client's statement
 * timeout. Resolves once the cancel was answered or given up. When the statement has still not ended 5 s later
 * (`ended`), its connection stopped answering (a frozen pooler, a network that drops packets) and is closed: the
 * statement fails as a lost connection, the server rolls back what it held, and what was queued behind it (a
 * transaction's ROLLBACK) does not wait for good.
 */
const cancelInterrupted = (client: Pg.Client, ended: () => boolean): Promise<void> =>
  cancelRunning(client).then(() => {
    if (ended()) return
    setTimeout(() => {
      if (!ended()) client.connection.stream.destroy()
    }, CANCEL_TIMEOUT_MS).unref()
  })

/**
 * The canceller of a statement running on `client` (what an `Effect.async` around it returns when interrupted): the
 * statement is cancelled (`cancelInterrupted`), and the interruption ends once it has ended and its cancel was
 * answered, or after 5 s. `whenEnded` is given the function to call when the statement ends from now on; `then` runs
 * once both happened (a pool's connection is given back then, not while a cancel may still reach it).
 */
export const interruptStatement = (
  client: Pg.Client,
  ended: () => boolean,
  whenEnded: (onEnded: () => void) => void,
  then?: () => void
): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    let answered = false
    const finish = () => {
      if (!(answered && ended())) return
      then?.()
      resume(Effect.void)
    }
    whenEnded(finish)
    void cancelInterrupted(client, ended).then(() => {
      answered = true
      finish()
    })
  }).pipe(Effect.timeoutOption(CANCEL_TIMEOUT_MS), Effect.asVoid)
