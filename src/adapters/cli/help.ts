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

/**
 * A command's line in a COMMANDS list without its bracketed options: its words, required options and arguments.
 * @effect/cli writes every option of a command and of the group above it, so that `jobs run` read
 * `jobs [--database-url URL] [--schema NAME] [--json] [--verbose] run [--database-url URL] ... <name>`.
 */
export const commandLine = (usage: string): string => {
  const tokens: Array<string> = []
  let depth = 0
  let current = ""
  for (const ch of usage) {
    if (ch === " " && depth === 0) {
      if (current !== "") tokens.push(current)
      current = ""
      continue
    }
    if (ch === "[") depth++
    if (ch === "]") depth--
    current += ch
  }
  if (current !== "") tokens.push(current)
  return tokens
    .flatMap((token) => {
      if (!token.startsWith("[")) return [token]
      // An optional argument stays, written once: `[<green|red> green | red]` is `[<green|red>]`.
      const argument = /^\[(<[^>]*>)/.exec(token)
      return argument === null ? [] : [`[${argument[1]}]`]
    })
    .join(" ")
}

/**
 * `text` with its COMMANDS list as one line per command, `  jobs run <name>   fire a job now...`, its description
 * in a column after the longest command, and a line saying which options every command takes. @effect/cli aligns the
 * descriptions after the longest usage with every option in it (the worker's: ~280 columns), so piped into a file
 * or read in a terminal of usual width, the list was mostly blanks. `path` is the command words the help is for
 * (`jobs` for `kairos jobs --help`), written before each subcommand.
 */
export const compactCommands = (text: string, path: ReadonlyArray<string>): string => {
  const lines = text.split("\n")
  const at = lines.findIndex((l) => l.replace(ANSI, "") === "COMMANDS")
  if (at === -1) return text
  let end = at + 1
  while (end < lines.length && !/^[A-Z][A-Z ]*$/.test(lines[end]!.replace(ANSI, ""))) end++
  const entries = lines
    .slice(at + 1, end)
    .map((l) => /^\s+- (.*)$/.exec(l.replace(ANSI, ""))?.[1])
    .filter((l): l is string => l !== undefined)
    .map((l) => {
      const [usage = "", ...rest] = l.trim().split(/\s{2,}/)
      return { command: [...path, commandLine(usage)].join(" "), description: rest.join(" ") }
    })
  // A group's own line (`db`, which has no description) goes: its subcommands follow with theirs.
  const shown = entries.filter(
    (e) => e.description !== "" || !entries.some((o) => o !== e && o.command.startsWith(`${e.command} `))
  )
  if (shown.length === 0) return text
  const width = Math.max(...shown.map((e) => e.command.length))
  const list = shown.map((e) => `  ${e.command.padEnd(width)}  ${e.description}`.trimEnd())
  const note = [
    "",
    "Every command takes --json and --verbose, and those that read the database --database-url URL and --schema NAME;",
    `\`kairos <command> --help\` lists a command's options.`
  ]
  return [
    ...lines.slice(0, at + 1),
    "",
    ...list,
    ...note,
    ...(end < lines.length ? ["", ...lines.slice(end)] : [])
  ].join("\n")
}

// @effect/cli's text ends with a newline of its own, which `log` doubles: `--version` printed a blank line after it.
const render = (value: unknown, stream: NodeJS.WriteStream, path: ReadonlyArray<string>): unknown =>
  typeof value === "string"
    ? compactCommands(dropFiller(fullUsage(colours(stream) ? value : value.replace(ANSI, ""), path)), path).replace(
        /\n+$/,
        ""
      )
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
