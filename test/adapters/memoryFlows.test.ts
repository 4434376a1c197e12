/**
 * The memory QueueStore against the flow contract shared with Postgres: items that wait for other items, flows,
 * outputs passed downstream.
 */
import { Effect, Layer } from "effect"
import * as MemoryDatabase from "../../src/adapters/memory/MemoryDatabase.js"
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import * as MemoryWakeUps from "../../src/adapters/memory/MemoryWakeUps.js"
import { suite } from "../contracts/FlowContract.js"
import { QueueInspector } from "../contracts/QueueStoreContract.js"

const inspector = Layer.effect(
  QueueInspector,
  Effect.map(MemoryQueueStore.MemoryQueue, (memory) =>
    QueueInspector.of({
      processed: (n) => Effect.map(memory.processed, (log) => [...log].reverse().slice(0, n))
    })
  )
)

suite(
  "memory",
  Layer.merge(inspector, MemoryWakeUps.layer).pipe(
    Layer.provideMerge(MemoryQueueStore.layerFromDatabase),
    Layer.provideMerge(MemoryDatabase.layer())
  )
)
