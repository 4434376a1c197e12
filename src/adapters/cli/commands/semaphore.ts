/**
 * `kairos semaphore [green|red]`: show or set the pause switch every worker obeys.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as PgQueueStore from "../../postgres/PgQueueStore.js"
import { common, output, withDb } from "../common.js"

export const semaphoreCommand = Command.make(
  "semaphore",
  {
    ...common,
    value: Args.choice(
      [
        ["green", "green"],
        ["red", "red"]
      ] as const,
      { name: "green|red" }
    ).pipe(Args.withDescription("green: work runs; red: nothing new starts (without it: show)"), Args.optional)
  },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        const queue = yield* PgQueueStore.make({ schema })
        if (Option.isSome(c.value)) yield* queue.setSemaphore(c.value.value === "green", new Date())
        const green = yield* queue.getSemaphore()
        yield* output(c, green ? "green (work runs)" : "red (nothing new starts)", {
          semaphore: green ? "green" : "red"
        })
      })
    )
).pipe(Command.withDescription("show or set the kill switch (every worker obeys it on its next tick)"))
