/**
 * A reporter that names, at the end of a run, the tests that took more than half of their time limit. Tests written on
 * a quick machine have failed on a slower or busier one (CI's) by running past a bound that looked wide; a test at 60 %
 * of its limit in a passing run is the next such failure, and this says so before it happens. It prints nothing when no
 * test came near its limit, and fails nothing: speed is not what the suite asserts.
 */
import path from "node:path"
import type { RunnerTask, RunnerTestFile } from "vitest"
import type { Reporter } from "vitest/node"

/** The share of its limit past which a passing test is named. */
const SHARE = 0.5

interface Near {
  readonly name: string
  readonly ms: number
  readonly limitMs: number
}

const collect = (task: RunnerTask, trail: ReadonlyArray<string>, into: Array<Near>): void => {
  if (task.type === "test") {
    const ms = task.result?.duration
    if (task.result?.state === "pass" && ms !== undefined && task.timeout > 0 && ms > task.timeout * SHARE)
      into.push({ name: [...trail, task.name].join(" > "), ms, limitMs: task.timeout })
    return
  }
  if (task.type === "suite") for (const child of task.tasks) collect(child, [...trail, task.name], into)
}

export default class BoundsReporter implements Reporter {
  onFinished(files: ReadonlyArray<RunnerTestFile> = []): void {
    const near: Array<Near> = []
    for (const file of files) {
      const name = path.relative(process.cwd(), file.filepath)
      for (const task of file.tasks) collect(task, [name], near)
    }
    if (near.length === 0) return
    near.sort((a, b) => b.ms / b.limitMs - a.ms / a.limitMs)
    const lines = near.map(
      (n) =>
        `  ${Math.round((n.ms / n.limitMs) * 100)} %  ${(n.ms / 1000).toFixed(1)} s of ${n.limitMs / 1000} s  ${n.name}`
    )
    console.log(
      `\nTests that took more than half their time limit (a slower or busier machine may fail them):\n${lines.join("\n")}\n`
    )
  }
}
