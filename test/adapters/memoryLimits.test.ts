/**
 * Flow control on the memory adapters (the queue, the limits and wake-ups over one MemoryDatabase) against the
 * contract suite shared with Postgres.
 */
import { Effect, Layer } from "effect"
import * as MemoryDatabase from "../../src/adapters/memory/MemoryDatabase.js"
import * as MemoryLimits from "../../src/adapters/memory/MemoryLimits.js"
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import * as MemoryWakeUps from "../../src/adapters/memory/MemoryWakeUps.js"
import { suite } from "../contracts/LimitsContract.js"

suite(
  "memory",
  Layer.mergeAll(MemoryQueueStore.layerFromDatabase, MemoryLimits.layer, MemoryWakeUps.layer).pipe(
    Layer.provideMerge(MemoryDatabase.layer())
  ),
  // Windows by the claim's `now`: the tests' later claims are in the next window.
  { closeWindows: () => Effect.void }
)
