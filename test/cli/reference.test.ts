/**
 * The CLI reference (docs/cli.md) is the commands' own `--help`: regenerated here and compared, so neither drifts.
 * Integration: spawns the compiled CLI (`dist/`, built by the global setup).
 */
import { describe, expect, it } from "vitest"
import { projectRoot, run as runCommand } from "../support/process.js"

describe("the CLI reference in docs/cli.md", () => {
  it("matches what `npm run docs:cli` generates from every command's --help", { timeout: 60_000 }, async () => {
    const run = await runCommand(process.execPath, ["--import", "tsx", "scripts/cli-reference.ts", "--check"], {
      cwd: projectRoot,
      encoding: "utf8"
    })
    expect(run.stderr).toBe("")
    expect(run.status).toBe(0)
  })
})
