/**
 * What @effect/cli prints (help, usage errors) as kairos shows it: plain text when the stream is not a terminal
 * (or NO_COLOR is set), since @effect/printer-ansi always colours; and usage lines that start with the whole
 * command (`$ kairos db status`, where @effect/cli writes `$ status`); and each option described once, by its own
 * description, without the lines @effect/cli adds under every one ("A user-defined piece of text.", "This setting
 * is optional.": the type and optionality the usage line already shows).
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"

const ANSI = /\u001b\[[0-9;]*m/g

/** Whether `stream` may get colours: a terminal, and NO_COLOR unset (https://no-color.org). */
const colours = (stream: NodeJS.WriteStream): boolean =>
  stream.isTTY === true && (process.env["NO_COLOR"] ?? "") === "" && process.env["TERM"] !== "dumb"

/** The command words of `args` (the arguments after the script): those before the first option. */
export const commandPath = (args: ReadonlyArray<string>): ReadonlyArray<string> => {
  const end = args.findIndex((a) => a.startsWith("-"))
  return end === -1 ? args : args.slice(0, end)
}

/** `text` with usage lines (`$ enqueue ...`) starting `$ kairos` and the command words before the one shown. */
export const fullUsage = (text: string, path: ReadonlyArray<string>): string =>
  text.replace(/^\$ ([^\s\u001b]+)/gm, (line, first: string) => {
    if (first === "kairos") return line
    const at = path.indexOf(first)
    return `$ ${["kairos", ...(at === -1 ? [first] : path.slice(0, at + 1))].join(" ")}`
  })

/** @effect/cli's generic lines under an argument or option: its type, its choices, whether it may be left out. */
const FILLER =
  /^(?:A user-defined piece of text\.|A true or false value\.|An integer\.|One of the following: .*|This setting is optional\.|A value of type .*)$/

/** `text` without @effect/cli's filler paragraphs (an indented filler line and the blank line before it). */
export const dropFiller = (text: string): string => {
  const kept: Array<string> = []
  for (const line of text.split("\n")) {
    const plain = line.replace(ANSI, "")
    if (/^ {2}\S/.test(plain) && FILLER.test(plain.trim())) {
      if (kept.length > 0 && kept[kept.length - 1]!.replace(ANSI, "").trim() === "") kept.pop()
      continue
    }
    kept.push(line)
  }
  return kept.join("\n")
}

// @effect/cli's text ends with a newline of its own, which `log` doubles: `--version` printed a blank line after it.
const render = (value: unknown, stream: NodeJS.WriteStream, path: ReadonlyArray<string>): unknown =>
  typeof value === "string"
    ? dropFiller(fullUsage(colours(stream) ? value : value.replace(ANSI, ""), path)).replace(/\n+$/, "")
    : value

/**
 * Runs `self` (@effect/cli's run of the command line) with a Console whose `log` and `error` print @effect/cli's
 * text as described above. Only @effect/cli's own text: a command's handler prints through the Console outside
 * (see `plainConsole`), so a table or a JSON document is never rewritten.
 */
export const withCliConsole =
  (args: ReadonlyArray<string>) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
    const path = commandPath(args)
    return Effect.flatMap(Effect.console, (outer) =>
      Effect.locally(
        Effect.withConsole(self, {
          ...outer,
          log: (...values) => outer.log(...values.map((v) => render(v, process.stdout, path))),
          error: (...values) => outer.error(...values.map((v) => render(v, process.stderr, path)))
        }),
        plain,
        outer
      )
    )
  }

/** The Console outside `withCliConsole`, for the command handlers. */
const plain = FiberRef.unsafeMake<Console.Console | undefined>(undefined)

/** Runs a command's handler with the Console outside `withCliConsole`: its output is printed as it is. */
export const plainConsole = <A, E, R>(handler: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(FiberRef.get(plain), (outer) => (outer === undefined ? handler : Effect.withConsole(handler, outer)))
