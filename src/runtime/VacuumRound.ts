/**
 * The queue's vacuum, while a started runner executes work: when executions end, at most once a second, it asks
 * the store to vacuum the queue's tables if their dead rows passed `vacuumDeadRows` (the store decides, and lets one
 * instance at a time do it: see the Postgres adapter's PgVacuum). A role that may not vacuum them is told once and
 * asks no more; a failure (the database away) is logged once until a round succeeds again.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { SchedulerConfig } from "../domain/SchedulerConfig.js"
import { now as clockNow } from "../ports/Clock.js"
import type { QueueStore } from "../ports/QueueStore.js"
import type * as Signal from "./Signal.js"

/** How often the dead rows are looked at, while executions finish. */
export const CHECK_EVERY = Duration.seconds(1)
/** The longest one vacuum holds the schema's vacuum lease (one whose owner died frees it then). */
export const LEASE = Duration.minutes(2)
/**
 * The pause after a vacuum before the next may start: at least a second (the dead-row counts lag behind by up to a
 * second), and four times as long as the vacuum took (a long queue's vacuum costs more: vacuuming then takes at most
 * a fifth of the time).
 */
export const GAP = Duration.seconds(1)
export const GAP_FACTOR = 4

export interface VacuumRound {
  /** One round: waits for an execution to end, looks at the dead rows, then lets a second pass. */
  readonly round: Effect.Effect<void>
}

export const make = (options: {
  readonly config: SchedulerConfig
  readonly queueStore: QueueStore["Type"]
  readonly owner: string
  /** Raised when an execution ends (any kind): no look while none ends. */
  readonly executionEnded: Signal.Signal
}): VacuumRound => {
  const { config, executionEnded, owner, queueStore } = options
  let refused = false
  let failing = false
  const look = Effect.gen(function* () {
    const outcome = yield* queueStore.vacuum({
      owner,
      now: yield* clockNow,
      deadRows: config.vacuumDeadRows,
      leaseMs: Duration.toMillis(LEASE),
      gapMs: Duration.toMillis(GAP),
      gapFactor: GAP_FACTOR
    })
    if (failing) {
      failing = false
      yield* Effect.logInfo("queue vacuum: the dead rows can be read again")
    }
    switch (outcome._tag) {
      case "NotPermitted":
        refused = true
        yield* Effect.logWarning(
          `queue vacuum: ${outcome.reason}; this worker leaves the queue's dead rows to autovacuum (a long ` +
            `backlog then drains slower as it goes): run a worker as the owner, or see docs/operations.md`
        )
        return
      case "Vacuumed":
        // Debug, not info: on a long backlog a vacuum comes every second or two, routine upkeep a worker's log
        // should not fill with; what needs a person (a role that may not, a failure) is a warning.
        for (const t of outcome.tables)
          yield* Effect.logDebug(
            `queue vacuum: vacuumed ${t.table} (${Math.round(t.deadRows).toLocaleString("en-US")} dead rows) ` +
              `in ${Math.round(t.ms)} ms`
          )
        return
      default:
        return
    }
  }).pipe(
    Effect.catchAll((e) =>
      failing
        ? Effect.void
        : Effect.zipRight(
            Effect.sync(() => {
              failing = true
            }),
            Effect.logWarning(`queue vacuum failed (trying again while work runs): ${e.message}`)
          )
    )
  )
  const round = Effect.gen(function* () {
    // Refused: nothing more to ask (the role does not change while the runner runs).
    if (refused) return yield* Effect.never
    // Idle until an execution ends (a runner with nothing to do wakes for nothing), then at most one look a second.
    yield* executionEnded.take
    yield* look
    yield* Effect.sleep(CHECK_EVERY)
  })
  return { round }
}
