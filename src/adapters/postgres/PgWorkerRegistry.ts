/**
 * The worker registry on Postgres: `scheduler_workers`. The read side (who is live) is the read model's
 * (PgReadModel), under one liveness rule (`liveWorker`).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { WorkerRegistry, WorkerRegistryError } from "../../ports/WorkerRegistry.js"
import { mapPgErrors } from "./PgErrors.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

const orRegistryError = mapPgErrors(
  (f) =>
    new WorkerRegistryError({
      reason: f.reason === "Unavailable" ? "Unavailable" : "Unknown",
      message: f.message,
      cause: f.cause
    })
)

/** The registry over the SqlClient in context. */
export const make = (options: PgOptions = {}): Effect.Effect<WorkerRegistry["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const workers = sql(table(schema, "scheduler_workers"))
    return WorkerRegistry.of({
      register: (id, taskTypes, now, liveUntil) =>
        sql`INSERT INTO ${workers} (id, task_types, started_at, heartbeat_at, live_until)
            VALUES (${id}, ${[...taskTypes]}::text[], ${now}, ${now}, ${liveUntil})
            ON CONFLICT (id) DO UPDATE SET task_types = EXCLUDED.task_types, heartbeat_at = EXCLUDED.heartbeat_at,
              live_until = EXCLUDED.live_until`.pipe(Effect.asVoid, orRegistryError),
      unregister: (id) => sql`DELETE FROM ${workers} WHERE id = ${id}`.pipe(Effect.asVoid, orRegistryError)
    })
  })

/** The registry as a layer over a SqlClient. */
export const layer = (options: PgOptions = {}): Layer.Layer<WorkerRegistry, never, SqlClient.SqlClient> =>
  Layer.effect(WorkerRegistry, make(options))
