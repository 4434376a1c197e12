/**
 * `kairos workers`: the live workers.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { snakeKeys, table } from "../format.js"
import { common, output, withReads } from "../common.js"

export const workersCommand = Command.make("workers", common, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      const workers = yield* reads.workers()
      yield* output(
        c,
        table(
          ["id", "task_types", "started_at", "heartbeat_at"],
          workers.map((worker) => [worker.id, worker.taskTypes, worker.startedAt, worker.heartbeatAt])
        ),
        workers.map(({ liveUntil: _, ...worker }) => snakeKeys(worker))
      )
    })
  )
).pipe(Command.withDescription("live workers, their task types and last heartbeat"))
