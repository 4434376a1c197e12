/**
 * `kairos stats`: live figures from the tables, for every worker on the database.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { snakeKeys, table } from "../format.js"
import { common, output, withReads } from "../common.js"

export const statsCommand = Command.make("stats", common, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      // Read from the tables, so every worker on the database counts, not only this process.
      const depth = yield* reads.depth()
      const hour = yield* reads.lastHour()
      const runs = yield* reads.runCounts()
      const workers = (yield* reads.workers()).length
      const queueTable = table(
        ["task_type", "pending", "processing"],
        depth.map((d) => [d.taskType, d.pending, d.processing])
      )
      const hourTable = table(
        ["task_type", "ok", "error", "p50_ms", "max_ms"],
        hour.map((h) => [h.taskType, h.ok, h.error, h.p50Ms ?? "", h.maxMs ?? ""])
      )
      yield* output(
        c,
        [
          `live workers: ${workers}`,
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
          live_workers: workers,
          queue: depth.map(snakeKeys),
          last_hour: hour.map(snakeKeys),
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
