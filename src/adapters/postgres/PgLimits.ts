/**
 * Flow control's limits on Postgres: the rows of `queue_limits` (migrations 0021, 0024). The table's NOTIFY trigger
 * wakes every runner on a change, whoever makes it (this port, the CLI, plain SQL); the claim reads the row itself,
 * under the type's lock (`kairos_claim_limited`).
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import { type FlowLimit, parse } from "../../domain/Limits.js"
import { Limits, LimitsError } from "../../ports/Limits.js"
import { mapPgErrors } from "./PgErrors.js"
import { type PgOptions, schemaName, table } from "./PgSchema.js"

const orLimitsError = mapPgErrors(
  (f) =>
    new LimitsError({
      reason: f.reason === "Unavailable" ? "Unavailable" : "Unknown",
      message: `limits: ${f.message}`,
      cause: f.cause
    })
)

interface LimitRow {
  readonly task_type: string
  readonly concurrency: number | null
  readonly per_group: boolean
  readonly rate: number | null
  readonly rate_per_ms: string | number | null
  readonly rate_per_group: boolean
}

const toLimit = (r: LimitRow): FlowLimit => ({
  taskType: r.task_type,
  concurrency: r.concurrency,
  perGroup: r.per_group,
  rate: r.rate === null || r.rate_per_ms === null ? null : { limit: r.rate, perMs: Number(r.rate_per_ms) },
  ratePerGroup: r.rate_per_group
})

/** The limits over the SqlClient in context. */
export const make = (options: PgOptions = {}): Effect.Effect<Limits["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const limits = sql(table(schemaName(options), "queue_limits"))
    return Limits.of({
      list: sql<LimitRow>`
        SELECT task_type, concurrency, per_group, rate, rate_per_ms::text AS rate_per_ms, rate_per_group
        FROM ${limits}
        ORDER BY task_type`.pipe(
        Effect.map((rows) => rows.map(toLimit)),
        orLimitsError
      ),
      set: (input) =>
        Effect.gen(function* () {
          const limit = parse(input)
          if (Either.isLeft(limit)) return yield* limit.left
          const l = limit.right
          yield* sql`
            INSERT INTO ${limits} (task_type, concurrency, per_group, rate, rate_per_ms, rate_per_group, updated_at)
            VALUES (${l.taskType}, ${l.concurrency}, ${l.perGroup}, ${l.rate?.limit ?? null},
              ${l.rate?.perMs ?? null}, ${l.ratePerGroup}, now())
            ON CONFLICT (task_type) DO UPDATE SET concurrency = EXCLUDED.concurrency, per_group = EXCLUDED.per_group,
              rate = EXCLUDED.rate, rate_per_ms = EXCLUDED.rate_per_ms, rate_per_group = EXCLUDED.rate_per_group,
              updated_at = EXCLUDED.updated_at`.pipe(orLimitsError)
          return l
        }),
      clear: (taskType) =>
        sql<{ task_type: string }>`DELETE FROM ${limits} WHERE task_type = ${taskType} RETURNING task_type`.pipe(
          Effect.map((rows) => rows.length > 0),
          orLimitsError
        )
    })
  })

/** The limits as a layer over a SqlClient. */
export const layer = (options: PgOptions = {}): Layer.Layer<Limits, never, SqlClient.SqlClient> =>
  Layer.effect(Limits, make(options))
