/**
 * The memory QueueStore against the contract suite shared with Postgres.
 */
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import { suite } from "../contracts/QueueStoreContract.js"

suite("memory", MemoryQueueStore.layer)
