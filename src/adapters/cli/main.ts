/**
 * `kairos`: the command line. Every command takes `--database-url` (default `$DATABASE_URL`, else the embedded
 * development database in the project's `.kairos`), `--schema` and `--json` (snake_case keys, like the tables).
 */
import * as Command from "@effect/cli/Command"
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import type * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { CliError, describe } from "./errors.js"
import { escapeControls } from "./format.js"
import { plainConsole, withCliConsole } from "./help.js"
import * as CliOutput from "./CliOutput.js"
import { flags } from "./common.js"
import { dashboardCommand } from "./commands/dashboard.js"
import { dbCommand } from "./commands/db.js"
import { grantCommand } from "./commands/grant.js"
import { jobsCommand, runsCommand } from "./commands/jobs.js"
import { limitsCommand } from "./commands/limits.js"
import { migrateCommand } from "./commands/migrate.js"
import {
  cancelCommand,
  enqueueCommand,
  processedCommand,
  pruneCommand,
  queueCommand,
  retryCommand,
  truncateCommand
} from "./commands/queue.js"
import { semaphoreCommand } from "./commands/semaphore.js"
import { statsCommand } from "./commands/stats.js"
import { workerCommand } from "./commands/worker.js"
import { workersCommand } from "./commands/workers.js"

export { CliError } from "./errors.js"

const root = Command.make("kairos").pipe(
  Command.withDescription(
    "a durable job scheduler on Postgres. Run `kairos <command> --help` for a command's options; durations read like 200ms, 1s, 30s, 5m, 1h"
  ),
  Command.withSubcommands([
    migrateCommand,
    grantCommand,
    workerCommand,
    enqueueCommand,
    queueCommand,
    processedCommand,
    jobsCommand,
    runsCommand,
    semaphoreCommand,
    truncateCommand,
    workersCommand,
    cancelCommand,
    retryCommand,
    pruneCommand,
    statsCommand,
    limitsCommand,
    dashboardCommand,
    dbCommand
  ])
)

// The handlers print through the Console as it is, outside the rewrite of @effect/cli's help (see withCliConsole).
const cli = Command.run(root.pipe(Command.transformHandler(plainConsole)), { name: "kairos", version: "0.1.0" })

/**
 * The command line on `argv` (as `process.argv`), printing through `console`: succeeds with the exit code, 0, or 1
 * after one clear line. What `main` runs; a test runs it inside the test's process, with a Console that collects
 * the text.
 */
export const program = (argv: ReadonlyArray<string>, console: Console.Console): Effect.Effect<number> => {
  flags.verbose = argv.includes("--verbose")
  const args = argv.filter((a) => a !== "--verbose")
  return cli(args).pipe(
    withCliConsole(args.slice(2)),
    Effect.as(0),
    Effect.catchAllCause((cause) => {
      const failure = Cause.failureOption(cause)
      if (failure._tag === "Some" && ValidationError.isValidationError(failure.value)) {
        // @effect/cli has already printed what was wrong with the arguments.
        return Effect.succeed(1)
      }
      if (Cause.isInterruptedOnly(cause)) return Effect.succeed(0)
      const error = failure._tag === "Some" ? failure.value : Cause.squash(cause)
      // One line, whatever the database or a tasks module put in the message; with --verbose, the full cause.
      const line = escapeControls(error instanceof CliError ? error.message : describe(error))
      return CliOutput.failure(flags.verbose ? `${line}\n${Cause.pretty(cause)}` : line).pipe(Effect.as(1))
    }),
    Effect.withConsole(console),
    Effect.provide(NodeContext.layer),
    Effect.provide(Logger.replace(Logger.defaultLogger, CliOutput.logger)),
    Logger.withMinimumLogLevel(flags.verbose ? LogLevel.Debug : LogLevel.Warning)
  )
}

/** Runs the CLI on `argv` (as `process.argv`) in this process, which exits with the code `program` gives. */
export const main = (argv: ReadonlyArray<string>): void => {
  const run = program(argv, CliOutput.console).pipe(Effect.map((code) => void (process.exitCode = code)))
  NodeRuntime.runMain(run, { disableErrorReporting: true, disablePrettyLogger: true })
}
