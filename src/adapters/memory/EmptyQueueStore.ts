/**
 * A QueueStore with no items that accepts none: for runners that only run scheduled jobs. It says so instead of
 * dropping work: `enqueue` fails.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { QueueStore, QueueStoreError } from "../../ports/QueueStore.js"
import { make as makeMemory } from "./MemoryQueueStore.js"
import { layer as databaseLayer, MemoryDatabase } from "./MemoryDatabase.js"

/** The empty queue over the MemoryDatabase in context. */
export const layerFromDatabase: Layer.Layer<QueueStore, never, MemoryDatabase> = Layer.effect(
  QueueStore,
  Effect.map(makeMemory, ({ store }) =>
    QueueStore.of({
      ...store,
      enqueue: (input) =>
        Effect.fail(
          new QueueStoreError({
            reason: "Unknown",
            message: `this runner has no queue: cannot enqueue a "${input.taskType}" item (provide a QueueStore)`
          })
        ),
      enqueueMany: (inputs) =>
        inputs.length === 0
          ? Effect.succeed([])
          : Effect.fail(
              new QueueStoreError({
                reason: "Unknown",
                message: "this runner has no queue: cannot enqueue items (provide a QueueStore)"
              })
            ),
      enqueueFlow: (steps) =>
        steps.length === 0
          ? Effect.succeed({})
          : Effect.fail(
              new QueueStoreError({
                reason: "Unknown",
                message: "this runner has no queue: cannot enqueue a flow (provide a QueueStore)"
              })
            ),
      claimBatch: () => Effect.succeed([])
    })
  )
)

/** The empty queue, with a MemoryDatabase of its own. */
export const layer: Layer.Layer<QueueStore | MemoryDatabase> = layerFromDatabase.pipe(
  Layer.provideMerge(databaseLayer())
)
