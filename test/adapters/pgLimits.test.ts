/**
 * Flow control on Postgres (the queue store, the limits and wake-ups over one schema) against the contract suite
 * shared with the memory adapters. Integration: a real Postgres.
 */
import { SqlClient } from "@effect/sql"
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
  ).pipe(Layer.provideMerge(PgMigrated("limits"))),
  {
    // Windows by the database's clock: the type's current ones are moved back a day, as if it had gone by.
    closeWindows: (taskType) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const schema = yield* TestSchema
        for (const name of ["kairos_limit_state", "kairos_limit_group_windows"])
          yield* sql`UPDATE ${sql(schema)}.${sql(name)} SET window_start = window_start - interval '1 day'
                     WHERE task_type = ${taskType}`
      })
  }
)
