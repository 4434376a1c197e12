/**
 * kairos's metrics and spans through OpenTelemetry: `@effect/opentelemetry`'s NodeSdk layer exports Effect's
 * metrics and spans as they are. This example uses in-memory exporters and prints what they received; in production
 * put an OTLP exporter (e.g. @opentelemetry/exporter-trace-otlp-http) in their place.
 *
 *   npm run example examples/opentelemetry.ts
 *
 * Uses DATABASE_URL, or a throwaway embedded Postgres.
 */
import { NodeSdk } from "@effect/opentelemetry"
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader
} from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { PgKairos, QueueStore, Runner } from "kairos"
import { EmbeddedPostgres } from "kairos/dev"

const schema = `kairos_example_otel_${process.pid}`
const spans = new InMemorySpanExporter()
const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 60_000 })
const Telemetry = NodeSdk.layer(() => ({
  resource: { serviceName: "kairos-example" },
  spanProcessor: new SimpleSpanProcessor(spans),
  metricReader: reader
}))

const program = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  const queue = yield* QueueStore
  yield* runner.register("send_email", (job) =>
    job.payload === "nobody" ? Effect.fail(new Error("not an address")) : Effect.log(`sent to ${job.payload}`)
  )
  yield* runner.start
  yield* queue.enqueueMany(
    ["ada@example.com", "grace@example.com", "nobody"].map((payload) => ({
      taskType: "send_email",
      payload,
      thread: 1
    })),
    new Date()
  )
})

const waitForThree = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  while (true) {
    const s = yield* runner.stats
    if (s.ok + s.failed >= 3) return
    yield* Effect.sleep("50 millis")
  }
})

/** What the exporters received: read before the SDK shuts down with its scope (shutting down clears them). */
const report = Effect.gen(function* () {
  yield* Effect.promise(() => reader.forceFlush())
  console.log("spans:")
  for (const span of spans.getFinishedSpans().filter((s) => s.name === "kairos.execute")) {
    const a = span.attributes
    console.log(
      `  ${span.name}  kind=${a["kairos.kind"]}  task_type=${a["kairos.task_type"]}  id=${a["kairos.id"]}  attempt=${a["kairos.attempt"]}  outcome=${a["kairos.outcome"]}${a["kairos.error"] === undefined ? "" : ` (${a["kairos.error"]})`}`
    )
  }
  console.log("metrics:")
  for (const scope of metrics.getMetrics().at(-1)?.scopeMetrics ?? []) {
    for (const metric of scope.metrics) {
      if (!metric.descriptor.name.startsWith("kairos_executions_total")) continue
      for (const point of metric.dataPoints) {
        console.log(`  ${metric.descriptor.name} ${JSON.stringify(point.attributes)} ${JSON.stringify(point.value)}`)
      }
    }
  }
})

const main = (url: string) =>
  Effect.runPromise(
    Effect.gen(function* () {
      yield* program
      yield* waitForThree
      yield* report
      // A schema of this run's own, dropped at the end (DATABASE_URL may be your database).
      yield* Effect.flatMap(Runner.Runner, (runner) => runner.stop)
      const sql = yield* SqlClient.SqlClient
      yield* sql`DROP SCHEMA ${sql(schema)} CASCADE`
    }).pipe(
      Effect.provide(PgKairos.layer({ url, schema, workers: 2, interval: "1 second" })),
      Effect.provide(Layer.merge(Telemetry, Logger.minimumLogLevel(LogLevel.Warning))),
      Effect.scoped
    )
  )

await EmbeddedPostgres.withDatabaseUrl(main, { log: () => undefined })
process.exit(0)
