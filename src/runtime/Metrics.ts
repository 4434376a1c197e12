/**
 * kairos's metrics, as Effect `Metric`s in Effect's global registry: `Metric.snapshot` reads them, and
 * `@effect/opentelemetry`'s metrics exporter exports them unchanged. Updated synchronously on the hot path (one
 * `unsafeUpdate` per execution), so they cost no fiber.
 */
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricLabel from "effect/MetricLabel"
import { EXACT_DEPTH_UP_TO } from "../ports/QueueStore.js"
import type { ExecutionReport } from "./Pipeline.js"

/** Executions by `kind` (queue, scheduled), `task_type` and `outcome` (ok, failed, lost, interrupted). */
export const executions = Metric.counter("kairos_executions_total", {
  description: "executions finished or cut short, by kind, task type and outcome",
  incremental: true
})

/** How long finished executions took, in milliseconds, by kind and task type. */
export const executionDuration = Metric.histogram(
  "kairos_execution_duration_ms",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 18 }),
  "how long finished executions took (ms)"
)

/** Executions whose lease was lost while they ran (their result is discarded; they run again). */
export const leasesLost = Metric.counter("kairos_leases_lost_total", {
  description: "executions whose lease was lost while running",
  incremental: true
})

/** Slots of scheduled jobs that passed while no runner took them, by task type. */
export const slotsMissed = Metric.counter("kairos_slots_missed_total", {
  description: "slots of scheduled jobs missed (downtime or a pause)",
  incremental: true
})

/**
 * How long one claim took, in milliseconds, by kind and `via`: `tick` for a tick's claim (a statement for the queue, a
 * transaction for scheduled jobs; a tick that had no reason to look sends none and records none), `write` for a write
 * of results that claimed along with it (the statement's whole time, recording included; see `QueueSource`).
 */
export const claimDuration = Metric.histogram(
  "kairos_claim_duration_ms",
  MetricBoundaries.exponential({ start: 0.5, factor: 2, count: 14 }),
  "how long a claim took (ms), by kind and via (tick, or a write of results that claimed along with it)"
)

/** Items pending or processing in the queue, as this runner last saw it (every heartbeat). */
export const queueDepth = Metric.gauge("kairos_queue_depth", {
  description: `queue items pending or processing (exact up to ${EXACT_DEPTH_UP_TO.toLocaleString("en")}, the database's estimate beyond)`
})

type Labels = ReadonlyArray<MetricLabel.MetricLabel>
// By kind, outcome ("" for none) and task type: looked up twice per execution, so without building a key.
const labels = new Map<string, Map<string, Map<string, Labels>>>()
let labelSets = 0
/** The labels of one (kind, task type, outcome), made once: the hot path allocates none. */
const labelsOf = (kind: string, taskType: string, outcome?: string): Labels => {
  let byOutcome = labels.get(kind)
  if (byOutcome === undefined) labels.set(kind, (byOutcome = new Map()))
  let byType = byOutcome.get(outcome ?? "")
  if (byType === undefined) byOutcome.set(outcome ?? "", (byType = new Map()))
  let found = byType.get(taskType)
  if (found === undefined) {
    found = [
      MetricLabel.make("kind", kind),
      MetricLabel.make("task_type", taskType),
      ...(outcome === undefined ? [] : [MetricLabel.make("outcome", outcome)])
    ]
    // Bounded: a runner handles the task types it registered; outcomes are four.
    if (labelSets < 10_000) {
      labelSets++
      byType.set(taskType, found)
    }
  }
  return found
}

/** Counts one execution (and its duration, when it finished). */
export const recordExecution = (report: ExecutionReport): void => {
  const { kind, taskType } = report.job
  executions.unsafeUpdate(1, labelsOf(kind, taskType, report.outcome))
  if (report.durationMs !== undefined) executionDuration.unsafeUpdate(report.durationMs, labelsOf(kind, taskType))
  if (report.outcome === "lost") leasesLost.unsafeUpdate(1, labelsOf(kind, taskType))
}

/** Counts slots missed by a job of `taskType`. */
export const recordMissed = (taskType: string, missed: number): void =>
  slotsMissed.unsafeUpdate(missed, labelsOf("scheduled", taskType))

/** Records how long a claim of `kind` took, made by a tick or along with a write of results. */
export const recordClaim = (kind: string, ms: number, via: "tick" | "write" = "tick"): void =>
  claimDuration.unsafeUpdate(ms, claimLabels(kind, via))

const byKindVia = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()
/** The labels of a kind and a via, made once (two kinds, two vias). */
const claimLabels = (kind: string, via: string): ReadonlyArray<MetricLabel.MetricLabel> => {
  const key = `${kind}/${via}`
  let found = byKindVia.get(key)
  if (found === undefined) byKindVia.set(key, (found = [MetricLabel.make("kind", kind), MetricLabel.make("via", via)]))
  return found
}
