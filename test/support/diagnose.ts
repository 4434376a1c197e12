/**
 * What a child process was doing when a test gave up waiting for it: a silent `kairos worker` at start (twice in
 * loaded runs, never reproduced) should tell where it stood the next time. Children started with `reportFlags` write
 * a Node.js diagnostic report on SIGUSR2 (the JavaScript stack, the open sockets and timers); a main thread blocked in
 * a synchronous wait (`Atomics.wait`: module loader hooks, esbuild's synchronous transform) writes none, and saying so
 * is itself the answer. The threads' kernel wait channels come from /proc either way.
 */
import type { ChildProcess } from "node:child_process"
import { mkdirSync } from "node:fs"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"

// One folder for every run (a report is named by its process id): created once, written only when a wait times out.
const reportDir = path.join(os.tmpdir(), "kairos-test-reports")
// Node writes no report into a folder that does not exist.
mkdirSync(reportDir, { recursive: true })

/** Node flags for a spawned `node`: a report into that folder on SIGUSR2. */
export const reportFlags: ReadonlyArray<string> = ["--report-on-signal", `--report-directory=${reportDir}`]

const read = (file: string) =>
  fs.readFile(file, "utf8").then(
    (s) => s.trim(),
    () => "?"
  )

/** The process's threads: name, state and what each waits for in the kernel; and its child processes. */
const threads = async (pid: number): Promise<string> => {
  const tids = await fs.readdir(`/proc/${pid}/task`).catch(() => [] as Array<string>)
  const lines = await Promise.all(
    tids.map(async (tid) => {
      const at = `/proc/${pid}/task/${tid}`
      const stat = (await read(`${at}/stat`)).split(") ").at(-1)?.split(" ") ?? []
      return `  thread ${tid} ${await read(`${at}/comm`)}: state ${stat[0]}, waits in ${await read(`${at}/wchan`)}, cpu ${stat[11]}+${stat[12]} ticks`
    })
  )
  const children: Array<string> = []
  for (const entry of await fs.readdir("/proc").catch(() => [] as Array<string>)) {
    if (!/^\d+$/.test(entry)) continue
    const stat = await read(`/proc/${entry}/stat`)
    if (stat.split(") ").at(-1)?.split(" ")[1] === String(pid))
      children.push(`  child ${entry}: ${(await read(`/proc/${entry}/cmdline`)).replace(/\0/g, " ")}`)
  }
  return [...lines, ...children].join("\n")
}

interface Report {
  readonly javascriptStack?: { readonly message?: string; readonly stack?: ReadonlyArray<string> }
  readonly libuv?: ReadonlyArray<{
    readonly type: string
    readonly is_active?: boolean
    readonly remoteEndpoint?: unknown
  }>
}

/** Asks the child for a report (SIGUSR2) and summarizes it; says so when none comes within `ms`. */
const report = async (pid: number, ms: number): Promise<string> => {
  const mine = (files: ReadonlyArray<string>) => files.filter((f) => f.includes(`.${pid}.`) && f.endsWith(".json"))
  const before = new Set(mine(await fs.readdir(reportDir).catch(() => [])))
  try {
    process.kill(pid, "SIGUSR2")
  } catch {
    return "  (gone before a report could be asked for)"
  }
  for (const until = Date.now() + ms; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
    const file = mine(await fs.readdir(reportDir).catch(() => [])).find((f) => !before.has(f))
    if (file === undefined) continue
    await new Promise((r) => setTimeout(r, 200))
    const r = JSON.parse(await fs.readFile(path.join(reportDir, file), "utf8")) as Report
    const handles = (r.libuv ?? [])
      .filter((h) => h.is_active === true)
      .map((h) => (h.remoteEndpoint === undefined ? h.type : `${h.type}→${JSON.stringify(h.remoteEndpoint)}`))
    return [
      `  report: ${r.javascriptStack?.message ?? ""}`,
      ...(r.javascriptStack?.stack ?? []).slice(0, 12).map((l) => `    ${l.trim()}`),
      `  active handles: ${handles.join(", ") || "none"}`
    ].join("\n")
  }
  return `  no report within ${ms} ms: the main thread does not take interrupts (a synchronous wait, e.g. Atomics.wait)`
}

/** A few lines on what `child` is doing now; `withReport` for a child started with `reportFlags`. Never fails. */
export const diagnose = async (child: ChildProcess, withReport: boolean): Promise<string> => {
  const pid = child.pid
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return "(the process has ended)"
  try {
    const t = await threads(pid)
    return `what process ${pid} was doing:\n${t}${withReport ? `\n${await report(pid, 3000)}` : ""}`
  } catch (e) {
    return `(could not diagnose process ${pid}: ${String(e)})`
  }
}
