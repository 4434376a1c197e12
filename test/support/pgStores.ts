/**
 * Migrated Postgres stores in a test file's own schema.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgSettings from "../../src/adapters/postgres/PgSettings.js"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { decodeJobs, decodeRuns, JOB_COLUMNS, RUN_COLUMNS, toJob, toRun } from "../../src/adapters/postgres/jobRows.js"
import { StoreInspector } from "../contracts/JobStoreContract.js"
import { PgTest, TestSchema } from "./database.js"

/** A client, a fresh schema and kairos's tables in it. */
export const PgMigrated = (label: string) =>
  Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema }))).pipe(
    Layer.provideMerge(PgTest(label))
  )

/**
 * JobStore, QueueStore and Settings on Postgres over one schema (so the queue's semaphore is `scheduler.paused`, as
 * in production), plus the inspector the JobStore contract suite reads with.
 */
export const PgStores = (label: string) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(
        PgJobStore.layer({ schema }),
        PgQueueStore.layer({ schema }),
        PgSettings.layer({ schema }),
        inspectorLayer(schema)
      )
    )
  ).pipe(Layer.provideMerge(PgMigrated(label)))

const inspectorLayer = (schema: string) =>
  Layer.effect(
    StoreInspector,
    Effect.gen(function* () {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      return StoreInspector.of({
        // Read with the adapter's own select lists and decoders: what the store would read.
        runs: (jobId) =>
          sql`SELECT ${sql.literal(RUN_COLUMNS)} FROM ${sql(`${schema}.job_runs`)}
              WHERE job_id = ${jobId}::bigint ORDER BY id`.pipe(
            Effect.flatMap(decodeRuns),
            Effect.map((rows) => rows.map(toRun)),
            Effect.orDie
          ),
        job: (jobId) =>
          sql`SELECT ${sql.literal(JOB_COLUMNS)} FROM ${sql(`${schema}.scheduled_jobs`)} WHERE id = ${jobId}::bigint`.pipe(
            Effect.flatMap(decodeJobs),
            Effect.map((rows) => (rows[0] === undefined ? undefined : toJob(rows[0]))),
            Effect.orDie
          ),
        setEnabled: (jobId, enabled) =>
          sql`UPDATE ${sql(`${schema}.scheduled_jobs`)} SET enabled = ${enabled} WHERE id = ${jobId}::bigint`.pipe(
            Effect.asVoid,
            Effect.orDie
          )
      })
    })
  )
