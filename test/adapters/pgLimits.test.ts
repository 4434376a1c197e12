/**
 * Flow control on Postgres (the queue store, the limits and wake-ups over one schema) against the contract suite
 * shared with the memory adapters. Integration: a real Postgres.
 */
import { Effect, Layer } from "effect"
import * as PgLimits from "../../src/adapters/postgres/PgLimits.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import { suite } from "../contracts/LimitsContract.js"
import { TestSchema } from "../support/database.js"
import { PgMigrated } from "../support/pgStores.js"

suite(
  "postgres",
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(PgQueueStore.layer({ schema }), PgLimits.layer({ schema }), PgWakeUps.layer({ schema }))
    )
  ).pipe(Layer.provideMerge(PgMigrated("limits")))
)
