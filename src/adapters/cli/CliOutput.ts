/**
 * Where the CLI's text goes, and the one module of kairos (with the runner's exit hook) that writes to the process's
 * streams. A command's output (tables, JSON documents, the worker's lines) is printed through Effect's `Console`,
 * and `console` is the CLI's: stdout for `log`, stderr for `error`, as Node's console prints them. Diagnostics go
 * through Effect's `Logger`: the CLI's own (`notice`, `failure`) are a `kairos: ...` line on stderr, printed by
 * `logger` through the Console in use; every other line (the runner's, the dashboard's) goes where it went before.
 * A test replaces the Console (`Effect.withConsole`) or the logger and sees every line.
 */
import { Console as NodeConsole } from "node:console"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as DefaultServices from "effect/DefaultServices"
import * as Effect from "effect/Effect"
import * as FiberRefs from "effect/FiberRefs"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"

/** An Effect Console printing with `unsafe` (Effect's default Console, over any console-like object). */
export const fromUnsafe = (unsafe: Console.UnsafeConsole): Console.Console => ({
  [Console.TypeId]: Console.TypeId,
  assert: (condition, ...args) => Effect.sync(() => unsafe.assert(condition, ...args)),
  clear: Effect.sync(() => unsafe.clear()),
  count: (label) => Effect.sync(() => unsafe.count(label)),
  countReset: (label) => Effect.sync(() => unsafe.countReset(label)),
  debug: (...args) => Effect.sync(() => unsafe.debug(...args)),
  dir: (item, options) => Effect.sync(() => unsafe.dir(item, options)),
  dirxml: (...args) => Effect.sync(() => unsafe.dirxml(...args)),
  error: (...args) => Effect.sync(() => unsafe.error(...args)),
  group: (options) =>
    Effect.sync(() => (options?.collapsed ? unsafe.groupCollapsed(options.label) : unsafe.group(options?.label))),
  groupEnd: Effect.sync(() => unsafe.groupEnd()),
  info: (...args) => Effect.sync(() => unsafe.info(...args)),
  log: (...args) => Effect.sync(() => unsafe.log(...args)),
  table: (tabularData, properties) => Effect.sync(() => unsafe.table(tabularData, properties)),
  time: (label) => Effect.sync(() => unsafe.time(label)),
  timeEnd: (label) => Effect.sync(() => unsafe.timeEnd(label)),
  timeLog: (label, ...args) => Effect.sync(() => unsafe.timeLog(label, ...args)),
  trace: (...args) => Effect.sync(() => unsafe.trace(...args)),
  warn: (...args) => Effect.sync(() => unsafe.warn(...args)),
  unsafe
})

/** The CLI's Console: the process's stdout and stderr (a string argument is printed as is, then a newline). */
export const console: Console.Console = fromUnsafe(new NodeConsole({ stdout: process.stdout, stderr: process.stderr }))

/** On a terminal, replaces the line the cursor is on with `line` (no newline: the worker's live status line). */
export const redraw = (line: string): void => void process.stdout.write(`\r\u001b[2K${line}`)

/** The annotation that marks the CLI's own diagnostics (`notice`, `failure`), printed as `kairos: ...`. */
const NOTICE = "kairos/cli"

/** A notice of the CLI (the development database started): `kairos: <text>` on stderr, text as given. */
export const notice = (text: string): Effect.Effect<void> => Effect.annotateLogs(Effect.logWarning(text), NOTICE, true)

/** Why a command failed: `kairos: <text>` on stderr, text as given (escaped by the caller). */
export const failure = (text: string): Effect.Effect<void> => Effect.annotateLogs(Effect.logError(text), NOTICE, true)

/** `other`, except that the CLI's own lines (`notice`, `failure`) are printed as `kairos: <text>` on stderr. */
export const withNotices = <A>(other: Logger.Logger<unknown, A>): Logger.Logger<unknown, A | void> =>
  Logger.make((options) => {
    if (!HashMap.has(options.annotations, NOTICE)) return other.log(options)
    const services = FiberRefs.getOrDefault(options.context, DefaultServices.currentServices)
    // Effect passes the message as the array of what was logged: here, one string.
    const text = Array.isArray(options.message) ? options.message.join(" ") : String(options.message)
    Context.get(services, Console.Console).unsafe.error(`kairos: ${text}`)
  })

/** The CLI's logger: Effect's default one (the runner's and the dashboard's lines), and the CLI's notices. */
export const logger = withNotices(Logger.defaultLogger)
