/**
 * Migrated Postgres stores in a test file's own schema.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as PgSettings from "../../src/adapters/postgres/PgSettings.js"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { JobRun } from "../../src/domain/ScheduledJob.js"
import { StoreInspector } from "../contracts/JobStoreContract.js"
import { PgTest, TestSchema } from "./database.js"

/** A client, a fresh schema and kairos's tables in it. */
export const PgMigrated = (label: string) =>
  Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema }))).pipe(
    Layer.provideMerge(PgTest(label))
  )

/** JobStore and Settings on Postgres, plus the inspector the contract suite reads with. */
export const PgStores = (label: string) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(PgJobStore.layer({ schema }), PgSettings.layer({ schema }), inspectorLayer(schema))
    )
  ).pipe(Layer.provideMerge(PgMigrated(label)))

const RunRows = Schema.Array(
  Schema.Struct({
    id: Schema.String,
    jobId: Schema.String,
    scheduledFor: Schema.DateFromSelf,
    attempt: Schema.Int,
    status: JobRun.fields.status,
    startedAt: Schema.NullOr(Schema.DateFromSelf),
    finishedAt: Schema.NullOr(Schema.DateFromSelf),
    output: Schema.NullOr(Schema.String),
    error: Schema.NullOr(Schema.String),
    dueAt: Schema.NullOr(Schema.DateFromSelf),
    owner: Schema.NullOr(Schema.String),
    leaseUntil: Schema.NullOr(Schema.DateFromSelf),
    leaseToken: Schema.NullOr(Schema.String)
  })
)

const inspectorLayer = (schema: string) =>
  Layer.effect(
    StoreInspector,
    Effect.gen(function* () {
      const sql = (yield* SqlClient.SqlClient).withoutTransforms()
      return StoreInspector.of({
        runs: (jobId) =>
          sql`SELECT id::text AS "id", job_id::text AS "jobId", scheduled_for AS "scheduledFor", attempt, status,
                     started_at AS "startedAt", finished_at AS "finishedAt", output::text AS output, error,
                     due_at AS "dueAt", owner, lease_until AS "leaseUntil", lease_token AS "leaseToken"
              FROM ${sql(`${schema}.job_runs`)} WHERE job_id = ${jobId}::bigint ORDER BY id`.pipe(
            Effect.flatMap(Schema.decodeUnknown(RunRows)),
            Effect.map((rows) =>
              rows.map((r) => ({ ...r, output: r.output === null ? null : JSON.stringify(JSON.parse(r.output)) }))
            ),
            Effect.orDie
          ),
        job: (jobId) =>
          sql<{
            id: string
            name: string
            task_type: string
            payload: string | null
            schedule: unknown
            enabled: boolean
            next_run_at: Date | null
            missed_slots: "latest" | "skip" | null
            overlap: "skip" | "allow"
            created_at: Date
            updated_at: Date
          }>`SELECT id::text AS id, name, task_type, payload, schedule, enabled, next_run_at, missed_slots, overlap,
                    created_at, updated_at
             FROM ${sql(`${schema}.scheduled_jobs`)} WHERE id = ${jobId}::bigint`.pipe(
            Effect.map((rows) => {
              const r = rows[0]
              return r === undefined
                ? undefined
                : {
                    id: r.id,
                    name: r.name,
                    taskType: r.task_type,
                    payload: r.payload ?? "",
                    schedule: r.schedule,
                    enabled: r.enabled,
                    nextRunAt: r.next_run_at,
                    missedSlots: r.missed_slots,
                    overlap: r.overlap,
                    createdAt: r.created_at,
                    updatedAt: r.updated_at
                  }
            }),
            Effect.orDie
          )
      })
    })
  )
