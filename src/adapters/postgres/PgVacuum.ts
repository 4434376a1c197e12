/**
 * The queue's vacuum, run by kairos itself: a long backlog drained at full speed leaves a dead index entry per item
 * at the head of the claim's index (`queue_items_claimable`), which every claim walks past until a vacuum removes
 * them — thousands of pages a claim after a million items. Autovacuum visits a database at most once a minute
 * (`autovacuum_naptime`, not settable per table), so migration 0019's table settings alone leave up to a minute of
 * dead entries; this vacuums once the dead rows pass a threshold instead.
 *
 * - The dead rows come from Postgres's statistics (`pg_stat_get_dead_tuples`, a read of shared memory); they lag
 *   behind by up to a second, hence the gap between two vacuums. A vacuum reads every index of its table whole, so
 *   its cost grows with the queue's length: the gap after one is also a multiple of how long it took (vacuuming
 *   then takes a bounded share of the time, however long the queue).
 * - One instance at a time, through a lease in `kairos_maintenance` (a row: a vacuum runs outside any transaction,
 *   and a session's advisory lock does not hold behind a transaction pooler). A vacuum that dies with its owner
 *   frees the lease when it expires.
 * - `VACUUM (INDEX_CLEANUP ON, SKIP_LOCKED, PARALLEL 0)`: the index is what claims walk, so it is always cleaned
 *   (Postgres may otherwise skip the indexes when few heap pages have dead rows); a table another vacuum holds
 *   (autovacuum's) is skipped rather than waited for; and no parallel worker is started for the indexes (measured on
 *   a queue of a million, after 15,000 items: 0.37 s with one, 0.23 s without, and less CPU in all; the drain needs
 *   the cores).
 * - Only the table's owner (or the database's) may vacuum it on Postgres 15 and 16, and a role granted MAINTAIN on
 *   17: another role's VACUUM does nothing but warn. That is checked once, and such a store says so (`NotPermitted`)
 *   without trying.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import type { VacuumOutcome, VacuumRequest, Vacuumed } from "../../ports/QueueStore.js"

/** The tables executions leave dead rows in, vacuumed in this order. */
export const TABLES = ["queue_items", "queue_leases"] as const

interface TableStats {
  readonly t: string
  readonly dead: number
  readonly vacuums: number
}

/**
 * The vacuum of `schema`'s queue tables over `sql` (any client: its statements run outside transactions). Failures
 * are the client's `SqlError`s; the store maps them.
 */
export const make = (sql: SqlClient.SqlClient, schema: string) => {
  const quoted = `"${schema}"`
  const maintenance = `${quoted}.kairos_maintenance`
  /** Checked once: whether this role may vacuum every table (undefined), or why not. */
  let permission: { readonly refused: string | undefined } | undefined

  const stats = sql<TableStats>`
    SELECT c.relname AS t, pg_stat_get_dead_tuples(c.oid)::float8 AS dead,
      (pg_stat_get_vacuum_count(c.oid) + pg_stat_get_autovacuum_count(c.oid))::float8 AS vacuums
    FROM pg_class c
    WHERE c.relnamespace = ${schema}::regnamespace AND c.relname = ANY(${TABLES as unknown as Array<string>}::text[])`

  const checkPermission = Effect.gen(function* () {
    const rows = yield* sql<{ t: string; owner: boolean; version: number; role: string }>`
      SELECT c.relname AS t, pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') AS owner,
        current_setting('server_version_num')::int AS version, current_user::text AS role
      FROM pg_class c, pg_database d
      WHERE c.relnamespace = ${schema}::regnamespace AND c.relname = ANY(${TABLES as unknown as Array<string>}::text[])
        AND d.datname = current_database()`
    let refused = rows.filter((r) => !r.owner).map((r) => r.t)
    // Postgres 17 lets a role granted MAINTAIN on a table vacuum it (asked separately: 15 and 16 know no such
    // privilege, and would fail to parse the question).
    if (refused.length > 0 && (rows[0]?.version ?? 0) >= 170000) {
      const maintain = yield* sql<{ t: string; ok: boolean }>`
        SELECT c.relname AS t, has_table_privilege(c.oid, 'MAINTAIN') AS ok FROM pg_class c
        WHERE c.relnamespace = ${schema}::regnamespace AND c.relname = ANY(${refused}::text[])`
      refused = maintain.filter((r) => !r.ok).map((r) => r.t)
    }
    const role = rows[0]?.role ?? "this role"
    return {
      refused:
        refused.length === 0
          ? undefined
          : `role "${role}" may not vacuum ${refused.map((t) => `${schema}.${t}`).join(" and ")}: only the ` +
            `table's owner may (or, on Postgres 17, a role granted MAINTAIN on it)`
    }
  })

  return (request: VacuumRequest) =>
    Effect.gen(function* () {
      const before = yield* stats
      const due = before.filter((r) => r.dead > request.deadRows)
      if (due.length === 0)
        return { _tag: "Clean", deadRows: Math.max(0, ...before.map((r) => r.dead)) } satisfies VacuumOutcome
      if (permission === undefined) permission = yield* checkPermission
      if (permission.refused !== undefined)
        return { _tag: "NotPermitted", reason: permission.refused } satisfies VacuumOutcome
      const until = new Date(request.now.getTime() + request.leaseMs)
      const taken = yield* sql<{ holder: string }>`
        INSERT INTO ${sql.literal(maintenance)} AS m (task, holder, until) VALUES ('vacuum', ${request.owner}, ${until})
        ON CONFLICT (task) DO UPDATE SET holder = excluded.holder, until = excluded.until
        WHERE m.until <= ${request.now}
        RETURNING m.holder`
      if (taken.length === 0) return { _tag: "Busy" } satisfies VacuumOutcome
      const started = performance.now()
      const release = Effect.suspend(() => {
        const took = performance.now() - started
        const next = new Date(request.now.getTime() + took + Math.max(request.gapMs, took * request.gapFactor))
        return sql`UPDATE ${sql.literal(maintenance)} SET holder = NULL, until = ${next}
          WHERE task = 'vacuum' AND holder = ${request.owner}`
      })
      const vacuumed = yield* Effect.forEach(due, (table) =>
        Effect.gen(function* () {
          const t0 = performance.now()
          yield* sql.unsafe(`VACUUM (INDEX_CLEANUP ON, SKIP_LOCKED, PARALLEL 0) ${quoted}.${table.t}`)
          return { table: table.t, deadRows: table.dead, ms: performance.now() - t0 }
        })
      ).pipe(Effect.ensuring(Effect.ignore(release)))
      // A table another vacuum held was skipped: only those whose count of vacuums moved were vacuumed.
      const after = yield* stats
      const done: Array<Vacuumed> = vacuumed.filter((v) => {
        const was = before.find((r) => r.t === v.table)?.vacuums ?? 0
        const now = after.find((r) => r.t === v.table)?.vacuums ?? 0
        return now > was
      })
      return done.length === 0 ? ({ _tag: "Busy" } as const) : ({ _tag: "Vacuumed", tables: done } as const)
    })
}
