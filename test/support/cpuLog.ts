/**
 * A setup file for measuring where a run's CPU goes: with KAIROS_TEST_CPU_LOG=<file>, each postgres test file appends
 * one JSON line, {file, pid, start, wall, self, children} (seconds; `start` since the epoch), to it. `pid` is the
 * test process, `self` its own CPU over the file's tests, `children` that of the processes it started and reaped
 * (workers, CLI commands, npm, tsc) — from /proc/self/stat, so Linux only. The unit files are left out: they run in a thread of vitest's main process, whose
 * CPU /proc/self/stat would count with theirs. Module loading (collection) happens before and is not counted; nor is
 * the Postgres server's CPU (pg_ctl detaches it). docs/development.md shows how to sum it up.
 */
import fs from "node:fs"
import { isMainThread } from "node:worker_threads"
import { afterAll, beforeAll, expect } from "vitest"

const out = process.env["KAIROS_TEST_CPU_LOG"]

/** Clock ticks (1/100 s) of this process and of its reaped children: fields 14-17 of /proc/self/stat. */
const ticks = (): { self: number; children: number } => {
  const stat = fs.readFileSync("/proc/self/stat", "utf8")
  // The command name (field 2) may hold spaces: count fields from after its closing parenthesis.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return { self: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]) }
}

if (out !== undefined && out.length > 0 && isMainThread) {
  let start = { self: 0, children: 0 }
  let startedAt = 0
  beforeAll(() => {
    start = ticks()
    startedAt = Date.now()
  })
  afterAll(() => {
    const end = ticks()
    const line = {
      file: expect.getState().testPath ?? "",
      pid: process.pid,
      start: startedAt / 1000,
      wall: (Date.now() - startedAt) / 1000,
      self: (end.self - start.self) / 100,
      children: (end.children - start.children) / 100
    }
    fs.appendFileSync(out, JSON.stringify(line) + "\n")
  })
}
