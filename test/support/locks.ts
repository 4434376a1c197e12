/**
 * Row locks seen from outside: connections of a test's own, beside the store's pool, that hold rows and watch who
 * waits for them. For tests that make Postgres break a deadlock.
 */
import { Effect } from "effect"
import pg from "pg"
import { databaseUrl } from "./database.js"

/** A connection of the test's own, closed with the scope. */
export const connect = Effect.acquireRelease(
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: databaseUrl() })
    await client.connect()
    return client
  }),
  (client) => Effect.promise(() => client.end().catch(() => undefined))
)

export const query = (client: pg.Client, text: string, values: ReadonlyArray<unknown> = []) =>
  Effect.promise(() => client.query(text, [...values]))

/** Until a backend running a statement that mentions `schema` and `fragment` waits for a lock (4 s at most). */
export const blocked = (client: pg.Client, schema: string, fragment: string) =>
  Effect.promise(async () => {
    for (let i = 0; i < 400; i++) {
      const r = await client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%'`,
        [schema, fragment]
      )
      if (r.rows[0]!.n > 0) return
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    throw new Error(`no statement with ${fragment} waited for a lock`)
  })

/**
 * A connection that will lose no deadlock: its own check comes after a minute, so the other side's (after a second,
 * Postgres's default) is the one that finds the cycle, and that side is aborted.
 */
export const patient = Effect.tap(connect, (client) => query(client, "SET deadlock_timeout = '60s'"))
