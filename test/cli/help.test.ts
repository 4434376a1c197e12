import { describe, expect, it } from "@effect/vitest"
import { commandLine, compactCommands } from "../../src/adapters/cli/help.js"

// What @effect/cli writes for a group with a subcommand (two options each) and a command with a long usage.
const effectCli = [
  "USAGE",
  "",
  "$ kairos",
  "",
  "COMMANDS",
  "",
  "  - jobs [--schema NAME] [--json]                                                  scheduled jobs",
  "",
  "  - jobs [--schema NAME] [--json] run [--schema NAME] [--json] <name>              fire a job now",
  "",
  "  - db                                                                              ",
  "",
  "  - db stop [--json]                                                                stop it",
  "",
  "  - worker [--schema NAME] --tasks MODULE [--concurrency N] [--interval DURATION]   run a worker",
  ""
].join("\n")

describe("the CLI's help", () => {
  it("a command's line keeps its words, required options and arguments, and drops the bracketed options", () => {
    expect(commandLine("jobs [--schema NAME] [--json] run [--schema NAME] [--json] <name>")).toBe("jobs run <name>")
    expect(commandLine("worker [--schema NAME] --tasks MODULE [--concurrency N]")).toBe("worker --tasks MODULE")
    expect(commandLine("semaphore [--json] [<green|red> green | red]")).toBe("semaphore [<green|red>]")
    expect(commandLine("processed [--json] [<N>]")).toBe("processed [<N>]")
    expect(commandLine("enqueue [--run-after 10m|TIME] [--after ID,ID] <taskType> [<payload>]")).toBe(
      "enqueue <taskType> [<payload>]"
    )
  })

  it("COMMANDS: one line per command, descriptions in a column after the longest command, a group's bare line gone", () => {
    expect(compactCommands(effectCli, [])).toBe(
      [
        "USAGE",
        "",
        "$ kairos",
        "",
        "COMMANDS",
        "",
        "  jobs                   scheduled jobs",
        "  jobs run <name>        fire a job now",
        "  db stop                stop it",
        "  worker --tasks MODULE  run a worker",
        "",
        "Every command takes --json and --verbose, and those that read the database --database-url URL and --schema NAME;",
        "`kairos <command> --help` lists a command's options."
      ].join("\n")
    )
  })

  it("a group's help writes the group before each subcommand; text without COMMANDS stays as it is", () => {
    const group = "COMMANDS\n\n  - run [--json] <name>   fire a job now\n\n  - pause [--json] <name>  pause a job\n"
    expect(compactCommands(group, ["jobs"]).split("\n").slice(0, 4)).toEqual([
      "COMMANDS",
      "",
      "  jobs run <name>    fire a job now",
      "  jobs pause <name>  pause a job"
    ])
    const usage = "USAGE\n\n$ kairos enqueue [--json] <taskType>\n\nOPTIONS\n\n--json\n\n  print JSON\n"
    expect(compactCommands(usage, ["enqueue"])).toBe(usage)
  })
})
