/**
 * Wake-ups on Postgres: LISTEN on the schema's channel (PgListener, on a connection of its own), where the tables'
 * triggers NOTIFY a new item ("queue", also when plain SQL inserts it), a change of `scheduler_meta` ("settings") and an
 * operator's change to a job ("jobs"). After a reconnect, notifications may have been missed: "jobs" says so.
 *
 * LISTEN needs a session of its own: given `url` (a direct connection, `directUrl`), it listens there; else on the
 * client's own URL, which may be a transaction pooler's, where LISTEN delivers nothing. PgListener finds that out
 * at start and says so once; the subscription is then never live, and the poll does the work.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { type Subscription, WakeUps } from "../../ports/WakeUps.js"
import * as PgListener from "./PgListener.js"
import { channel, type PgOptions, schemaName } from "./PgSchema.js"
import { limitsOf } from "./PgSession.js"

/** What `make` takes. */
export interface Options extends PgOptions {
  /** Where to LISTEN: a direct connection to the database. Default: the PgClient's own URL. */
  readonly url?: string | Redacted.Redacted | undefined
}

const urlFromParts = (c: PgClient.PgClientConfig): string => {
  const user = encodeURIComponent(c.username ?? "postgres")
  const password = c.password === undefined ? "" : `:${encodeURIComponent(Redacted.value(c.password))}`
  return `postgres://${user}${password}@${c.host ?? "127.0.0.1"}:${c.port ?? 5432}/${encodeURIComponent(c.database ?? "postgres")}`
}

/** The wake-ups of the schema, listening on `options.url`, else with the connection settings of the PgClient. */
export const make = (options: Options = {}): Effect.Effect<WakeUps["Type"], never, PgClient.PgClient> =>
  Effect.gen(function* () {
    const wakeChannel = channel(schemaName(options))
    const pg = yield* PgClient.PgClient
    const given = options.url ?? pg.config.url ?? Redacted.make(urlFromParts(pg.config))
    // The session limits are kairos's own (PgSession), never startup parameters a pooler would refuse.
    const url = Redacted.make(limitsOf(typeof given === "string" ? given : Redacted.value(given), {}).url)
    return WakeUps.of({
      subscribe: (wake, reconnected) =>
        PgListener.make({
          url,
          channel: wakeChannel,
          onNotify: (payload) => wake(payload === "jobs" ? "jobs" : payload === "settings" ? "settings" : "queue"),
          // The database is back; notifications sent while it was away are lost: look at everything.
          onReconnect: () => {
            reconnected?.()
            wake("jobs")
          },
          fallback: "set DIRECT_URL / --direct-url / directUrl to a direct connection to Postgres",
          // While the database is away the listener tries twice a second: its reconnect is what ends a runner's
          // backoff after failed ticks, so the runner finds the database back within half a second of its return
          // however long it was away, and executes again within a second. A try costs a refused (or proxied and
          // closed) connection; its log lines thin out by themselves (see PgListener).
          reconnectBackoff: { max: "500 millis" }
        }).pipe(Effect.map((listener): Subscription => ({ live: listener.live })))
    })
  })

/** The wake-ups as a layer over a PgClient. */
export const layer = (options: Options = {}): Layer.Layer<WakeUps, never, PgClient.PgClient> =>
  Layer.effect(WakeUps, make(options))
