/**
 * `kairos db status|start|stop`: the development database in the project's `.kairos` folder.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import * as DevDatabase from "../../postgres/DevDatabase.js"
import { snakeKeys } from "../format.js"
import { common, output, ensureDev } from "../common.js"

export const dbOptions = { json: common.json, verbose: common.verbose }

export const dbStatus = Command.make("status", dbOptions, (c) =>
  Effect.gen(function* () {
    const s = yield* Effect.promise(() => DevDatabase.status(process.cwd()))
    yield* output(
      c,
      s.running ? `running: ${s.url} (data in ${s.dataDir})` : `not running (data in ${s.dataDir})`,
      snakeKeys(s)
    )
  })
).pipe(Command.withDescription("whether the development database runs, its URL and data folder"))

export const dbStart = Command.make("start", dbOptions, (c) =>
  Effect.gen(function* () {
    const dev = yield* ensureDev
    yield* output(c, `running: ${dev.url} (data in ${dev.dataDir})`, {
      running: true,
      started: dev.started,
      url: dev.url,
      data_dir: dev.dataDir
    })
  })
).pipe(Command.withDescription("start the development database (if it is not running) and print its URL"))

export const dbStop = Command.make("stop", dbOptions, (c) =>
  Effect.gen(function* () {
    const stopped = yield* Effect.promise(() => DevDatabase.stop(process.cwd()))
    yield* output(c, stopped ? "stopped the development database" : "the development database was not running", {
      stopped
    })
  })
).pipe(Command.withDescription("stop the development database (its data stays)"))

export const dbCommand = Command.make("db").pipe(
  Command.withSubcommands([dbStatus, dbStart, dbStop]),
  Command.withDescription(
    "the development database: an embedded Postgres in the project's .kairos folder, used when no URL is given"
  )
)
