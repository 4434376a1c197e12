/**
 * Scheduled jobs: `kairos jobs` (and `jobs run|pause|resume <name>`) and `kairos runs`.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "../../../domain/Schedule.js"
import * as PgInspect from "../../postgres/PgInspect.js"
import * as PgJobStore from "../../postgres/PgJobStore.js"
import { CliError } from "../errors.js"
import { escapeControls, snakeKeys, table } from "../format.js"
import { common, output, withDb, handledCell, withInspect, count, databaseNow } from "../common.js"

/** A job's schedule as people read it; a stored value that does not decode is shown as it is. */
const scheduleCell = (schedule: PgInspect.StoredSchedule) =>
  schedule._tag === "Valid" ? Schedule.format(schedule.schedule) : `invalid: ${JSON.stringify(schedule.stored)}`

const jobName = Args.text({ name: "name" }).pipe(Args.withDescription("the job's name (as `kairos jobs` lists it)"))
const noSuchJob = (name: string) =>
  new CliError({ message: `no job named ${JSON.stringify(escapeControls(name))}: \`kairos jobs\` lists them` })

/** `kairos jobs pause|resume <name>`. */
export const setEnabledCommand = (verb: "pause" | "resume") =>
  Command.make(verb, { ...common, name: jobName }, (c) =>
    withDb(c, (sql, schema) =>
      Effect.gen(function* () {
        const store = yield* PgJobStore.make({ schema })
        const job = yield* store.setJobEnabled(c.name, verb === "resume", yield* databaseNow(sql))
        if (Option.isNone(job)) return yield* Effect.fail(noSuchJob(c.name))
        const name = escapeControls(job.value.name)
        yield* output(
          c,
          verb === "pause"
            ? `paused ${name}: no slot of it starts until \`kairos jobs resume ${name}\` (a re-definition in code keeps it paused)`
            : `resumed ${name}: next slot ${job.value.nextRunAt?.toISOString() ?? "computed by the next runner"}`,
          { name: job.value.name, enabled: job.value.enabled, next_run_at: job.value.nextRunAt }
        )
      })
    )
  ).pipe(
    Command.withDescription(
      verb === "pause"
        ? "pause a job: its slots stop starting (running ones finish); code that defines it again keeps it paused"
        : "resume a paused job; slots missed meanwhile follow its missedSlots policy"
    )
  )

export const jobsRunCommand = Command.make("run", { ...common, name: jobName }, (c) =>
  withDb(c, (sql, schema) =>
    Effect.gen(function* () {
      const store = yield* PgJobStore.make({ schema })
      const run = yield* store.runJobNow(c.name, yield* databaseNow(sql))
      if (Option.isNone(run)) return yield* Effect.fail(noSuchJob(c.name))
      yield* output(
        c,
        `fired ${escapeControls(c.name)}: run ${run.value.id} for ${run.value.scheduledFor.toISOString()}, due now (\`kairos runs\` shows it)`,
        { run_id: run.value.id, job: c.name, scheduled_for: run.value.scheduledFor, status: run.value.status }
      )
    })
  )
).pipe(
  Command.withDescription(
    "fire a job now, as an extra slot beside its schedule (it waits while the job is paused, or while another run of an overlap-skip job goes)"
  )
)

export const jobsCommand = Command.make("jobs", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const jobs = yield* inspect.jobs()
      const live = c.json ? 0 : (yield* inspect.workers()).length
      yield* output(
        c,
        table(
          ["id", "name", "task_type", "schedule", "enabled", "next_run_at", "handled"],
          jobs.map((job) => [
            job.id,
            job.name,
            job.taskType,
            scheduleCell(job.schedule),
            job.enabled ? "yes" : "no",
            job.nextRunAt,
            handledCell(job.handled, live > 0)
          ])
        ),
        jobs.map((job) => snakeKeys({ ...job, schedule: job.schedule.stored }))
      )
    })
  )
).pipe(
  Command.withDescription("scheduled jobs, their next slot and whether a live worker runs them"),
  Command.withSubcommands([jobsRunCommand, setEnabledCommand("pause"), setEnabledCommand("resume")])
)

export const runsCommand = Command.make("runs", { ...common, n: count("runs") }, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const runs = yield* inspect.runs(c.n)
      yield* output(
        c,
        table(
          ["id", "job", "scheduled_for", "attempt", "status", "started_at", "finished_at", "error"],
          runs.map((run) => [
            run.id,
            run.job,
            run.scheduledFor,
            run.attempt,
            run.status,
            run.startedAt,
            run.finishedAt,
            run.error
          ])
        ),
        runs.map(snakeKeys)
      )
    })
  )
).pipe(Command.withDescription("the last N runs of scheduled jobs, newest first"))
