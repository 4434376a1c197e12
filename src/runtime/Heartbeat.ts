/**
 * The heartbeat: the runner's row in `scheduler_workers` (its owner id and task types), refreshed on a timer of its
 * own whatever the poll, and at once when the handlers change; asleep while there is nothing to report (no handler
 * registered). A worker counts as live for three heartbeats. The queue-depth gauge is refreshed with it (one reading
 * of `QueueStore.depth` per heartbeat, not per tick: its cost is bounded whatever the backlog).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"
import { now as clockNow } from "../ports/Clock.js"
import type { QueueStore } from "../ports/QueueStore.js"
import type { WorkerRegistry } from "../ports/WorkerRegistry.js"
import * as Metrics from "./Metrics.js"
import * as Signal from "./Signal.js"

export interface Heartbeat {
  /** The handlers changed (raised by `register`). */
  readonly handlersChanged: Signal.Signal
  readonly round: Effect.Effect<void>
}

export const make = (options: {
  readonly config: SchedulerConfig
  readonly queueStore: QueueStore["Type"]
  readonly workerRegistry: WorkerRegistry["Type"]
  readonly owner: string
  readonly taskTypes: () => ReadonlyArray<string>
}): Heartbeat => {
  const { config, owner, queueStore, taskTypes, workerRegistry } = options
  const handlersChanged = Signal.make()
  const liveFor = Duration.toMillis(config.heartbeatInterval) * 3
  const round = Effect.gen(function* () {
    if (taskTypes().length === 0) yield* handlersChanged.take
    // This round registers the handlers as they are now: a change announced before it (the registrations made
    // before start) is covered, and would otherwise end its sleep at once for a second, identical registration.
    handlersChanged.clear()
    const now = yield* clockNow
    yield* workerRegistry
      .register(owner, taskTypes(), now, new Date(now.getTime() + liveFor))
      .pipe(Effect.catchAll((e) => Effect.logWarning(`heartbeat failed: ${e.message}`)))
    yield* queueStore.depth().pipe(
      Effect.flatMap((depth) => Metric.set(Metrics.queueDepth, depth.count)),
      Effect.ignore
    )
    yield* Effect.raceFirst(Effect.sleep(config.heartbeatInterval), handlersChanged.take)
  })
  return { handlersChanged, round }
}
