/**
 * A tasks module for the CLI worker: `kairos worker --tasks examples/tasks.ts`.
 * The default export maps task types to handlers; `schedules` are upserted by name when the worker starts.
 */
import { Effect } from "effect"
import { Schedule, type Job } from "kairos"

export default {
  // A plain async function: no Effect knowledge needed.
  send_email: async (job: Job) => {
    const { to } = JSON.parse(job.payload) as { to: string }
    return { sent: to }
  },
  // An Effect.
  cleanup: (job: Job) => Effect.log(`cleanup for slot ${job.scheduledFor.toISOString()}`)
}

export const schedules = [
  {
    name: "nightly-cleanup",
    taskType: "cleanup",
    schedule: Schedule.daily({ hour: 3, minute: 0, tz: "Europe/Berlin" })
  },
  { name: "heartbeat", taskType: "cleanup", schedule: Schedule.interval({ every: "10 seconds" }) }
]
