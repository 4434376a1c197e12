/**
 * The examples run as a newcomer runs them (integration: real processes).
 */
import { describe, expect, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { projectRoot } from "./support/process.js"

describe("examples", () => {
  it("schedules.ts (npm start) prints the DST-aware fire times and exits 0", { timeout: 60_000 }, () => {
    const run = spawnSync(process.execPath, ["--import", "tsx", "examples/schedules.ts"], {
      cwd: projectRoot,
      encoding: "utf8"
    })
    expect(run.stderr).toBe("")
    expect(run.status).toBe(0)
    expect(run.stdout).toContain("Sun 2026-03-08 03:30 -04:00")
    expect(run.stdout).toContain("2026-03-08T07:30:00Z  02:30 did not exist: shifted by the gap")
    expect(run.stdout).toContain("2026-11-01T05:30:00Z  occurs twice: fired once, at the earlier")
    expect(run.stdout).not.toContain("2026-11-01T06:30:00Z")
  })

  it("effect-program.ts composes the runner on Postgres and prints its runs", { timeout: 90_000 }, () => {
    const run = spawnSync(process.execPath, ["--import", "tsx", "examples/effect-program.ts"], {
      cwd: projectRoot,
      encoding: "utf8",
      // Its own embedded server unless the run has DATABASE_URL; then a schema of its own would be needed,
      // so give it the embedded one too.
      env: { ...process.env, KAIROS_EXAMPLE_SECONDS: "3", DATABASE_URL: "" },
      timeout: 80_000
    })
    expect(run.stderr).toBe("")
    expect(run.status).toBe(0)
    expect(run.stdout).toMatch(/^\d+ runs:/)
    expect(run.stdout).toMatch(/heartbeat +\S+ +attempt 1 +success +\{"beat":/)
    expect(run.stdout).toContain("next morning-report: ")
  })
})
