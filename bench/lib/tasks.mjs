// A tasks module in plain JavaScript, for `npm run bench:cli`: a worker's start without tsx. The same task types as
// examples/tasks.ts, which it times beside this one.
import { Effect } from "effect"
import { Schedule } from "kairos"

export default {
  send_email: async (job) => ({ sent: JSON.parse(job.payload).to }),
  cleanup: (job) => Effect.log(`cleanup for slot ${job.scheduledFor.toISOString()}`)
}

export const schedules = [
  {
    name: "nightly-cleanup",
    taskType: "cleanup",
    schedule: Schedule.daily({ hour: 3, minute: 0, tz: "Europe/Berlin" })
  },
  { name: "heartbeat", taskType: "cleanup", schedule: Schedule.interval({ every: "10 seconds" }) }
]
