/**
 * The in-database queue: `queue_items`, the insert-only `processed_items` log and the semaphore.
 * (Implemented on memory and Postgres by the queue work; the runner uses it once those land.)
 */
import { Context, Data, type Effect } from "effect"
import type { ProcessedItem } from "../domain/ProcessedItem.js"
import type { QueueItem } from "../domain/QueueItem.js"

/** A QueueStore failure. */
export class QueueStoreError extends Data.TaggedError("QueueStoreError")<{
  readonly reason: "Unavailable" | "Decode" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** What `enqueue` stores; `maxRuns` and `thread` are normalised as the contract says. */
export interface EnqueueInput {
  readonly taskType: string
  readonly payload?: string | undefined
  readonly priority?: number | undefined
  readonly maxRuns?: number | undefined
  readonly thread?: number | undefined
}

/** One claimed execution of an item, fenced by its lease token. */
export interface QueueClaim {
  readonly item: QueueItem
  readonly leaseId: string
  readonly token: string
}

/** The queue store. Every method takes `now` from the Clock port. */
export class QueueStore extends Context.Tag("kairos/QueueStore")<
  QueueStore,
  {
    readonly enqueue: (input: EnqueueInput, now: Date) => Effect.Effect<QueueItem, QueueStoreError>
    /** Claims up to `limit` executions of the given task types (priority desc, then insertion order). */
    readonly claimBatch: (options: {
      readonly limit: number
      readonly taskTypes: ReadonlyArray<string>
      readonly owner: string
      readonly leaseUntil: Date
      readonly now: Date
    }) => Effect.Effect<ReadonlyArray<QueueClaim>, QueueStoreError>
    /** Renews an execution's lease; false when it was lost. */
    readonly renewLease: (claim: QueueClaim, leaseUntil: Date, now: Date) => Effect.Effect<boolean, QueueStoreError>
    /**
     * Records one finished execution: inserts its `processed_items` row and deletes or re-queues the item, fenced by
     * the lease token. False (and nothing written) when the lease was lost.
     */
    readonly recordResult: (
      claim: QueueClaim,
      result: { readonly startedAt: Date; readonly finishedAt: Date; readonly error?: string | undefined }
    ) => Effect.Effect<boolean, QueueStoreError>
    /** Takes back executions whose lease expired (and, with `owner`, that owner's own); returns how many. */
    readonly recoverStuck: (now: Date, owner?: string) => Effect.Effect<number, QueueStoreError>
    /** Items pending or processing. */
    readonly pendingCount: () => Effect.Effect<number, QueueStoreError>
    /** The last `n` executions, newest first. */
    readonly recentProcessed: (n: number) => Effect.Effect<ReadonlyArray<ProcessedItem>, QueueStoreError>
    /** True when green (work may start). A missing row is green. */
    readonly getSemaphore: () => Effect.Effect<boolean, QueueStoreError>
    readonly setSemaphore: (green: boolean, now: Date) => Effect.Effect<void, QueueStoreError>
  }
>() {}
