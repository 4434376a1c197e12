/**
 * The runner composed with Layers in an Effect program, on Postgres: `DATABASE_URL` when set, otherwise a
 * throwaway embedded Postgres. Defines two recurring jobs, runs a few seconds, prints the runs, stops gracefully.
 *
 *   npm run example examples/effect-program.ts          (KAIROS_EXAMPLE_SECONDS=3 to shorten)
 */
import { SqlClient } from "@effect/sql"
import { Effect, Logger, LogLevel } from "effect"
import { PgKairos, Runner, Schedule } from "kairos"
import { EmbeddedPostgres } from "kairos/dev"

const seconds = Number(process.env["KAIROS_EXAMPLE_SECONDS"] ?? 6)

const program = Effect.gen(function* () {
  const runner = yield* Runner.Runner
  yield* runner.register("heartbeat", (job) => Effect.succeed({ beat: job.scheduledFor.toISOString() }))
  yield* runner.register("report", async (job) => ({ sentAt: new Date().toISOString(), attempt: job.attempt }))
  yield* runner.defineJobs([
    { name: "heartbeat", taskType: "heartbeat", schedule: Schedule.interval({ every: "1 second" }) },
    {
      name: "morning-report",
      taskType: "report",
      schedule: Schedule.daily({ hour: 8, minute: 0, tz: "Europe/Berlin" })
    }
  ])
  yield* runner.start
  yield* Effect.sleep(`${seconds} seconds`)
  yield* runner.stop

  const sql = yield* SqlClient.SqlClient
  const runs = yield* sql<{ job: string; scheduled_for: Date; attempt: number; status: string; output: unknown }>`
    SELECT j.name AS job, r.scheduled_for, r.attempt, r.status, r.output
    FROM job_runs r JOIN scheduled_jobs j ON j.id = r.job_id ORDER BY r.id`
  console.log(`${runs.length} runs:`)
  for (const r of runs) {
    console.log(
      `  ${r.job.padEnd(10)} ${new Date(r.scheduled_for).toISOString()}  attempt ${r.attempt}  ${r.status.padEnd(8)} ${JSON.stringify(r.output)}`
    )
  }
  const jobs = yield* sql<{
    name: string
    next_run_at: Date
  }>`SELECT name, next_run_at FROM scheduled_jobs ORDER BY name`
  for (const j of jobs) console.log(`next ${j.name}: ${new Date(j.next_run_at).toISOString()}`)
})

const main = (url: string) =>
  Effect.runPromise(
    program.pipe(
      Effect.provide(PgKairos.layer({ url, workers: 4 })),
      Effect.scoped,
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  )

EmbeddedPostgres.withDatabaseUrl(main).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
