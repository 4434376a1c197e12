/**
 * `kairos semaphore [green|red]`: show or set the pause switch every worker obeys.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { common, output, withAdmin } from "../common.js"

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
    withAdmin(c, (admin) =>
      Effect.gen(function* () {
        if (Option.isSome(c.value)) yield* c.value.value === "green" ? admin.resume : admin.pause
        const green = !(yield* admin.isPaused)
        yield* output(c, green ? "green (work runs)" : "red (nothing new starts)", {
          semaphore: green ? "green" : "red"
        })
      })
    )
).pipe(Command.withDescription("show or set the kill switch (every worker obeys it on its next tick)"))
