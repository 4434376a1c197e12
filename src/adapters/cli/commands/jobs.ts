/**
 * Scheduled jobs: `kairos jobs` (and `jobs run|pause|resume <name>`) and `kairos runs`.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Schedule from "../../../domain/Schedule.js"
import type * as PgReadModel from "../../postgres/PgReadModel.js"
import { escapeControls, snakeKeys, table } from "../format.js"
import { common, output, handledCell, withReads, count, withAdmin } from "../common.js"

/** A job's schedule as people read it; a stored value that does not decode is shown as it is. */
const scheduleCell = (schedule: PgReadModel.StoredSchedule) =>
  schedule._tag === "Valid" ? Schedule.format(schedule.schedule) : `invalid: ${JSON.stringify(schedule.stored)}`

const jobName = Args.text({ name: "name" }).pipe(Args.withDescription("the job's name (as `kairos jobs` lists it)"))
/** `kairos jobs pause|resume <name>`. */
export const setEnabledCommand = (verb: "pause" | "resume") =>
  Command.make(verb, { ...common, name: jobName }, (c) =>
    withAdmin(c, (admin) =>
      Effect.gen(function* () {
        const job = yield* verb === "pause" ? admin.pauseJob(c.name) : admin.resumeJob(c.name)
        const name = escapeControls(job.name)
        yield* output(
          c,
          verb === "pause"
            ? `paused ${name}: no slot of it starts until \`kairos jobs resume ${name}\` (a re-definition in code keeps it paused)`
            : `resumed ${name}: next slot ${job.nextRunAt?.toISOString() ?? "computed by the next runner"}`,
          { name: job.name, enabled: job.enabled, next_run_at: job.nextRunAt }
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
  withAdmin(c, (admin) =>
    Effect.gen(function* () {
      const run = yield* admin.runJob(c.name)
      yield* output(
        c,
        `fired ${escapeControls(c.name)}: run ${run.id} for ${run.scheduledFor.toISOString()}, due now (\`kairos runs\` shows it)`,
        { run_id: run.id, job: c.name, scheduled_for: run.scheduledFor, status: run.status }
      )
    })
  )
).pipe(
  Command.withDescription(
    "fire a job now, as an extra slot beside its schedule (it waits while the job is paused, or while another run of an overlap-skip job goes)"
  )
)

export const jobsCommand = Command.make("jobs", common, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      // Every job; payloads are not listed.
      const jobs = yield* reads.jobs({ cut: 0 })
      const live = c.json ? 0 : (yield* reads.workers()).length
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
        jobs.map(({ payload: _, lastRuns: __, ...job }) => snakeKeys({ ...job, schedule: job.schedule.stored }))
      )
    })
  )
).pipe(
  Command.withDescription("scheduled jobs, their next slot and whether a live worker runs them"),
  Command.withSubcommands([jobsRunCommand, setEnabledCommand("pause"), setEnabledCommand("resume")])
)

export const runsCommand = Command.make("runs", { ...common, n: count("runs") }, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      // The newest created first, across jobs, errors whole.
      const { rows: runs } = yield* reads.runs({ order: "id", limit: c.n })
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
        runs.map(({ jobId: _, ...run }) => snakeKeys(run))
      )
    })
  )
).pipe(Command.withDescription("the last N runs of scheduled jobs, newest first"))
