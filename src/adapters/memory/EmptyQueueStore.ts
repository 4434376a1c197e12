/**
 * A QueueStore with no items that accepts none: for runners that only run scheduled jobs. It says so instead of
 * dropping work: `enqueue` fails. The semaphore and workers are kept in memory, so pausing still works.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { QueueStore, QueueStoreError } from "../../ports/QueueStore.js"
import { make as makeMemory } from "./MemoryQueueStore.js"
import { layer as metaLayer, MemoryMeta } from "./MemoryMeta.js"

/** The empty queue over the MemoryMeta in context. */
export const layerFromMeta: Layer.Layer<QueueStore, never, MemoryMeta> = Layer.effect(
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
      claimBatch: () => Effect.succeed([])
    })
  )
)

/** The empty queue, with a `scheduler_meta` of its own. */
export const layer: Layer.Layer<QueueStore | MemoryMeta> = layerFromMeta.pipe(Layer.provideMerge(metaLayer()))
