/**
 * `kairos dashboard`: serves the web dashboard (its HTTP modules are loaded only by this command).
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { CliError } from "../errors.js"
import { common, directUrlOption, output, resolveDirectUrl, withDb } from "../common.js"

export const dashboardCommand = Command.make(
  "dashboard",
  {
    ...common,
    directUrl: directUrlOption,
    port: Options.integer("port").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("the TCP port (default 4500; 0 picks a free one)"),
      Options.withDefault(4500)
    ),
    host: Options.text("host").pipe(
      Options.withPseudoName("HOST"),
      Options.withDescription(
        "the address to listen on (default 127.0.0.1); beyond loopback every page needs the token too, unless --public-read"
      ),
      Options.withDefault("127.0.0.1")
    ),
    token: Options.text("token").pipe(
      Options.withPseudoName("TOKEN"),
      Options.withDescription(
        "the token actions need (pause, run now, cancel, retry), and beyond loopback every page (default: a random one, printed in the URL at start)"
      ),
      Options.optional
    ),
    readOnly: Options.boolean("read-only").pipe(Options.withDescription("no actions: pages only")),
    publicRead: Options.boolean("public-read").pipe(
      Options.withDescription(
        "beyond loopback, let anyone who reaches the port read every page, payloads and errors included (actions still need the token)"
      )
    )
  },
  (c) =>
    Effect.gen(function* () {
      if (c.readOnly && Option.isSome(c.token))
        return yield* Effect.fail(new CliError({ message: "--token and --read-only exclude each other" }))
      if (Option.isSome(c.token) && c.token.value.length < 8)
        return yield* Effect.fail(new CliError({ message: "--token: use at least 8 characters" }))
      // Loaded here, not at the top: every other command starts without the HTTP server's modules.
      const Dashboard = yield* Effect.promise(() => import("../../dashboard/Dashboard.js"))
      const generated = !c.readOnly && Option.isNone(c.token)
      const token = c.readOnly ? undefined : Option.getOrElse(c.token, Dashboard.generateToken)
      const directUrl = yield* resolveDirectUrl(c.directUrl)
      yield* withDb(c, (_sql, schema) =>
        Effect.gen(function* () {
          const served = yield* Dashboard.serve({
            schema,
            host: c.host,
            port: c.port,
            token,
            publicRead: c.publicRead,
            directUrl
          }).pipe(Effect.mapError((e) => new CliError({ message: e.message })))
          // Beyond loopback, the pages need the token too unless --public-read.
          const pagesNeedToken = served.tokenForReads
          // A generated token is shown once, in the URL; the dashboard moves it out of the address bar at once.
          const url = generated && token !== undefined ? `${served.url}?token=${token}` : served.url
          const unlocks = pagesNeedToken ? "the pages and actions" : "actions"
          const mode = c.readOnly
            ? "read-only"
            : generated
              ? `the token in this URL unlocks ${unlocks}`
              : pagesNeedToken
                ? "the pages and actions need --token: open this URL with ?token=<it> once"
                : "actions need --token"
          yield* output(c, `kairos dashboard: ${url} (schema ${schema}; ${mode}; Ctrl-C stops)`, {
            url,
            schema,
            read_only: c.readOnly,
            pages_need_token: pagesNeedToken
          })
          return yield* Effect.never
        }).pipe(Effect.scoped)
      )
    })
).pipe(
  Command.withDescription(
    "serve the web dashboard: queue, executions, jobs, workers and the pause switch, live; actions need the token, and beyond loopback every page"
  )
)
