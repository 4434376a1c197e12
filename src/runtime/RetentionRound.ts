/**
 * Retention, when configured: batches of a thousand rows (each its own short statement, skipping rows another
 * instance is pruning) until one comes back short, then a sleep of `retention.every`.
 */
import * as Effect from "effect/Effect"
import * as Retention from "../domain/Retention.js"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"
import { now as clockNow } from "../ports/Clock.js"
import type { JobStore } from "../ports/JobStore.js"
import type { QueueStore } from "../ports/QueueStore.js"

/** Whether the configuration prunes anything. */
export const isActive = (config: SchedulerConfig): boolean =>
  Retention.isActive(config.retention.processedItems) || Retention.isActive(config.retention.jobRuns)

/** One round: prunes what the policies say, then sleeps. */
export const round = (
  config: SchedulerConfig,
  queueStore: QueueStore["Type"],
  jobStore: JobStore["Type"]
): Effect.Effect<void> =>
  Effect.gen(function* () {
    const { jobRuns, processedItems } = config.retention
    const now = yield* clockNow
    const executions = Retention.isActive(processedItems)
      ? yield* Retention.pruneAll(queueStore.pruneProcessed, processedItems, now)
      : 0
    const runs = Retention.isActive(jobRuns) ? yield* Retention.pruneAll(jobStore.pruneRuns, jobRuns, now) : 0
    if (executions + runs > 0) yield* Effect.logInfo(`retention: pruned ${executions} execution(s), ${runs} job run(s)`)
    yield* Effect.sleep(config.retention.every)
  }).pipe(
    Effect.catchAll((e) =>
      Effect.zipRight(
        Effect.logWarning(`retention failed (trying again later): ${e.message}`),
        Effect.sleep(config.retention.every)
      )
    )
  )
