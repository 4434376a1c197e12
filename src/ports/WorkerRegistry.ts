/**
 * The live workers (`scheduler_workers`): each running instance registers itself and the task types it handles, and
 * refreshes that on every heartbeat, so an operator (and `kairos queue`) sees which items no live worker handles.
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"

/** Registering or removing a worker failed. */
export class WorkerRegistryError extends Data.TaggedError("WorkerRegistryError")<{
  readonly reason: "Unavailable" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** A live worker, as registered. */
export interface WorkerInfo {
  readonly id: string
  readonly taskTypes: ReadonlyArray<string>
  readonly startedAt: Date
  readonly heartbeatAt: Date
  readonly liveUntil: Date
}

/** The worker registry. */
export class WorkerRegistry extends Context.Tag("kairos/WorkerRegistry")<
  WorkerRegistry,
  {
    /** Registers (or refreshes) a worker and the task types it handles; it counts as live until `liveUntil`. */
    readonly register: (
      id: string,
      taskTypes: ReadonlyArray<string>,
      now: Date,
      liveUntil: Date
    ) => Effect.Effect<void, WorkerRegistryError>
    /** Removes a worker that stops. */
    readonly unregister: (id: string) => Effect.Effect<void, WorkerRegistryError>
  }
>() {}
