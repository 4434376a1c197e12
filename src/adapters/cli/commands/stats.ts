/**
 * `kairos stats`: live figures from the tables, for every worker on the database.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { table } from "../format.js"
import { common, output, withDb } from "../common.js"

export const statsCommand = Command.make("stats", common, (c) =>
  withDb(c, (sql, schema) =>
    Effect.gen(function* () {
      const s = sql(schema)
      // Read from the tables, so every worker on the database counts, not only this process.
      const depth = yield* sql<{ task_type: string; pending: number; processing: number }>`
        SELECT task_type, count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'processing')::int AS processing
        FROM ${s}.queue_items GROUP BY task_type ORDER BY task_type`
      const hour = yield* sql<{
        task_type: string
        ok: number
        error: number
        p50_ms: number | null
        max_ms: number | null
      }>`
        SELECT task_type, count(*) FILTER (WHERE status = 'ok')::int AS ok, count(*) FILTER (WHERE status = 'error')::int AS error,
               (percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::int AS p50_ms, max(duration_ms)::int AS max_ms
        FROM ${s}.processed_items WHERE created_at > clock_timestamp() - interval '1 hour'
        GROUP BY task_type ORDER BY task_type`
      const runs = yield* sql<{ status: string; n: number }>`
        SELECT status, count(*)::int AS n FROM ${s}.job_runs
        WHERE status IN ('pending', 'running') OR finished_at > clock_timestamp() - interval '1 hour'
        GROUP BY status ORDER BY status`
      const [workers] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${s}.scheduler_workers WHERE live_until > clock_timestamp()`
      const queueTable = table(
        ["task_type", "pending", "processing"],
        depth.map((d) => [d.task_type, d.pending, d.processing])
      )
      const hourTable = table(
        ["task_type", "ok", "error", "p50_ms", "max_ms"],
        hour.map((h) => [h.task_type, h.ok, h.error, h.p50_ms ?? "", h.max_ms ?? ""])
      )
      yield* output(
        c,
        [
          `live workers: ${workers?.n ?? 0}`,
          "",
          "queue:",
          depth.length === 0 ? "  (empty)" : queueTable,
          "",
          "executions in the last hour:",
          hour.length === 0 ? "  (none)" : hourTable,
          "",
          `job runs (pending, running, and finished in the last hour): ${
            runs.length === 0 ? "none" : runs.map((r) => `${r.status} ${r.n}`).join(", ")
          }`
        ].join("\n"),
        {
          live_workers: workers?.n ?? 0,
          queue: depth,
          last_hour: hour,
          job_runs: Object.fromEntries(runs.map((r) => [r.status, r.n]))
        }
      )
    })
  )
).pipe(
  Command.withDescription(
    "live figures from the tables: queue depth by task type, executions of the last hour by outcome, job runs, live workers"
  )
)
