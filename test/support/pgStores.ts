/**
 * Migrated Postgres stores in a test file's own schema.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import * as PgJobStore from "../../src/adapters/postgres/PgJobStore.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as PgSemaphore from "../../src/adapters/postgres/PgSemaphore.js"
import * as PgSettings from "../../src/adapters/postgres/PgSettings.js"
import * as PgWakeUps from "../../src/adapters/postgres/PgWakeUps.js"
import * as PgWorkerRegistry from "../../src/adapters/postgres/PgWorkerRegistry.js"
import { migrate } from "../../src/adapters/postgres/migrations.js"
import { decodeJobs, decodeRuns, JOB_COLUMNS, RUN_COLUMNS, toJob, toRun } from "../../src/adapters/postgres/jobRows.js"
import { StoreInspector } from "../contracts/JobStoreContract.js"
import { QueueInspector } from "../contracts/QueueStoreContract.js"
import { WorkerInspector } from "../contracts/WorkerRegistryContract.js"
import { liveWorker } from "../../src/adapters/postgres/PgReadModel.js"
import { PgTest, TestSchema } from "./database.js"

/** A client, a fresh schema and kairos's tables in it. */
export const PgMigrated = (label: string) =>
  Layer.effectDiscard(Effect.flatMap(TestSchema, (schema) => migrate({ schema }))).pipe(
    Layer.provideMerge(PgTest(label))
  )

/**
 * Every Postgres port over one schema (JobStore, QueueStore, Settings, the pause switch, the worker registry and
 * wake-ups, as in production), plus the inspector the JobStore contract suite reads with.
 */
export const PgStores = (label: string) =>
  Layer.unwrapEffect(
    Effect.map(TestSchema, (schema) =>
      Layer.mergeAll(
        PgJobStore.layer({ schema }),
        PgQueueStore.layer({ schema }),
        PgSettings.layer({ schema }),
        PgSemaphore.layer({ schema }),
        PgWorkerRegistry.layer({ schema }),
        PgWakeUps.layer({ schema }),
        inspectorLayer(schema),
        queueInspector(schema),
        workerInspector(schema)
      )
    )
  ).pipe(Layer.provideMerge(PgMigrated(label)))

/** The JobStore contract's reader of job_runs and scheduled_jobs. */
export const inspectorLayer = (schema: string): Layer.Layer<StoreInspector, never, SqlClient.SqlClient> =>
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

/** The QueueStore contract's reader of `processed_items`, newest first. */
export const queueInspector = (schema: string): Layer.Layer<QueueInspector, never, SqlClient.SqlClient> =>
  Layer.effect(
    QueueInspector,
    Effect.map(SqlClient.SqlClient, (client) => {
      const sql = client.withoutTransforms()
      return QueueInspector.of({
        processed: (n) =>
          sql<{
            id: string
            queue_item_id: string
            task_type: string
            payload: string | null
            status: "ok" | "error"
            error_msg: string | null
            started_at: Date
            finished_at: Date
            duration_ms: number
            created_at: Date
            output: unknown
          }>`SELECT id::text AS id, queue_item_id::text AS queue_item_id, task_type, payload, status, error_msg,
                started_at, finished_at, duration_ms, created_at, output
              FROM ${sql(`${schema}.processed_items`)} p ORDER BY p.id DESC LIMIT ${n}`.pipe(
            Effect.map((rows) =>
              rows.map((r) => ({
                id: r.id,
                queueItemId: r.queue_item_id,
                taskType: r.task_type,
                payload: r.payload,
                status: r.status,
                errorMsg: r.error_msg ?? "",
                startedAt: r.started_at,
                finishedAt: r.finished_at,
                durationMs: r.duration_ms,
                createdAt: r.created_at,
                ...(r.output === null ? {} : { output: r.output })
              }))
            ),
            Effect.orDie
          )
      })
    })
  )

/** The WorkerRegistry contract's reader of `scheduler_workers`, under the read model's liveness rule. */
export const workerInspector = (schema: string): Layer.Layer<WorkerInspector, never, SqlClient.SqlClient> =>
  Layer.effect(
    WorkerInspector,
    Effect.map(SqlClient.SqlClient, (client) => {
      const sql = client.withoutTransforms()
      return WorkerInspector.of({
        live: (now) =>
          sql<{ id: string; task_types: Array<string>; started_at: Date; heartbeat_at: Date; live_until: Date }>`
            SELECT id, task_types, started_at, heartbeat_at, live_until FROM ${sql(`${schema}.scheduler_workers`)} w
            WHERE ${liveWorker(sql, "w", now)} ORDER BY id`.pipe(
            Effect.map((rows) =>
              rows.map((r) => ({
                id: r.id,
                taskTypes: r.task_types,
                startedAt: r.started_at,
                heartbeatAt: r.heartbeat_at,
                liveUntil: r.live_until
              }))
            ),
            Effect.orDie
          )
      })
    })
  )
