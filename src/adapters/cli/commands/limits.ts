/**
 * Flow control's commands: `kairos limits` (every task type's limits, and how many of its executions hold a lease
 * now), `kairos limits set <type> …` and `kairos limits clear <type>`. Every worker hears of a change at once.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Limits from "../../../domain/Limits.js"
import * as PgLimits from "../../postgres/PgLimits.js"
import * as PgReadModel from "../../postgres/PgReadModel.js"
import { CliError } from "../errors.js"
import { escapeControls, table } from "../format.js"
import { common, countOption, output, withDb } from "../common.js"

const taskType = Args.text({ name: "taskType" }).pipe(Args.withDescription("the task type the limits apply to"))

/** A limit as the JSON output gives it. */
const limitJson = (limit: Limits.FlowLimit, running?: number) => ({
  task_type: limit.taskType,
  concurrency: limit.concurrency,
  per_group: limit.perGroup,
  rate: limit.rate?.limit ?? null,
  rate_per_ms: limit.rate?.perMs ?? null,
  rate_per_group: limit.ratePerGroup,
  ...(running === undefined ? {} : { running })
})

export const limitsSetCommand = Command.make(
  "set",
  {
    ...common,
    taskType,
    concurrency: countOption("concurrency", 1).pipe(
      Options.withPseudoName("N"),
      Options.withDescription(
        "at most N executions of the type at once, across all workers (per group with --per-group)"
      ),
      Options.optional
    ),
    perGroup: Options.boolean("per-group").pipe(
      Options.withDescription(
        "the concurrency bound applies to each group (an item's --group): 1 per group runs each group's items one at a time, in order"
      )
    ),
    rate: countOption("rate", 1).pipe(
      Options.withPseudoName("N"),
      Options.withDescription(
        "at most N executions start per --per window, across all workers (per group with --rate-per-group)"
      ),
      Options.optional
    ),
    ratePerGroup: Options.boolean("rate-per-group").pipe(
      Options.withDescription(
        "the rate applies to each group (an item's --group): each group starts at most --rate N per window"
      )
    ),
    per: Options.text("per").pipe(
      Options.withPseudoName("1s"),
      Options.withDescription("the rate's window, by the database's clock (default 1s)"),
      Options.optional
    )
  },
  (c) =>
    Effect.gen(function* () {
      // Checked before connecting: a bad combination is a usage error, whatever the database.
      const input: Limits.FlowLimitInput = {
        taskType: c.taskType,
        concurrency: Option.getOrUndefined(c.concurrency),
        perGroup: c.perGroup,
        rate: Option.getOrUndefined(c.rate),
        per: Option.getOrUndefined(c.per) as Limits.FlowLimitInput["per"],
        ratePerGroup: c.ratePerGroup
      }
      const parsed = Limits.parse(input)
      if (parsed._tag === "Left") return yield* new CliError({ message: flagMessage(parsed.left) })
      return yield* withDb(c, (_sql, schema) =>
        Effect.gen(function* () {
          const limits = yield* PgLimits.make({ schema })
          const limit = yield* limits.set(input)
          yield* output(
            c,
            `limits of ${escapeControls(limit.taskType)}: ${Limits.describe(limit)} (every worker obeys them now)`,
            limitJson(limit)
          )
        })
      )
    })
).pipe(Command.withDescription("set a task type's limits (replacing what it had) for every worker"))

/** An invalid limit as the command line says it: in its flags, not the API's fields. */
const flagMessage = (e: Limits.InvalidLimitError): string => {
  switch (e.field) {
    case "perGroup":
      return "--per-group bounds the concurrency of each group: give --concurrency N too"
    case "ratePerGroup":
      return "--rate-per-group bounds the starts of each group per window: give --rate N too"
    case "per":
      return e.message.startsWith("per is the window")
        ? "--per is the window of a rate: give --rate N too"
        : `--${e.message}`
    case "taskType":
      return "give the task type the limits apply to"
    default:
      return e.message.startsWith("a limit needs")
        ? "give --concurrency N, --rate N (--per 1s), or both (`kairos limits clear <type>` removes a type's limits)"
        : `--${e.message}`
  }
}

export const limitsClearCommand = Command.make("clear", { ...common, taskType }, (c) =>
  withDb(c, (_sql, schema) =>
    Effect.gen(function* () {
      const limits = yield* PgLimits.make({ schema })
      const had = yield* limits.clear(c.taskType)
      const name = escapeControls(c.taskType)
      yield* output(c, had ? `cleared the limits of ${name}` : `${name} had no limits`, {
        task_type: c.taskType,
        cleared: had
      })
    })
  )
).pipe(Command.withDescription("remove a task type's limits"))

export const limitsCommand = Command.make("limits", common, (c) =>
  withDb(c, (_sql, schema) =>
    Effect.gen(function* () {
      const limits = yield* (yield* PgLimits.make({ schema })).list
      // Executions holding a live lease now, per limited type: what the limits count (read as the dashboard does).
      const running = yield* (yield* PgReadModel.make({ schema })).holding(limits.map((l) => l.taskType))
      const runningOf = new Map(running.map((r) => [r.taskType, r.running] as const))
      yield* output(
        c,
        table(
          ["task_type", "concurrency", "per_group", "rate", "rate_per_group", "running"],
          limits.map((l) => [
            l.taskType,
            l.concurrency ?? "-",
            l.perGroup ? "yes" : "no",
            l.rate === null ? "-" : Limits.describeRate(l.rate),
            l.rate === null ? "-" : l.ratePerGroup ? "yes" : "no",
            runningOf.get(l.taskType) ?? 0
          ])
        ),
        limits.map((l) => limitJson(l, runningOf.get(l.taskType) ?? 0))
      )
    })
  )
).pipe(
  Command.withDescription("task types' flow limits, and how many executions of each hold a lease now"),
  Command.withSubcommands([limitsSetCommand, limitsClearCommand])
)
