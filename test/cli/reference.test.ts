/**
 * The CLI reference (docs/cli.md) is the commands' own `--help`: generated here (scripts/cli-reference.ts, as
 * `npm run docs:cli` does) and compared, so neither drifts. Each `--help` is the CLI's program run in this process
 * (`kairosHere`); `npm run docs:cli` asks the compiled bin, and test/cli/admin.test.ts checks the bin's help.
 */
import { describe, expect, it } from "vitest"
import { current, generate } from "../../scripts/cli-reference.js"
import { kairosHere } from "../support/cli.js"

describe("the CLI reference in docs/cli.md", () => {
  it("matches what `npm run docs:cli` generates from every command's --help", { timeout: 60_000 }, async () => {
    const help = async (words: ReadonlyArray<string>) => {
      const r = await kairosHere([...words, "--help"])
      expect(r.stderr).toBe("")
      expect(r.code).toBe(0)
      return r.stdout
    }
    expect(await generate(help)).toBe(current())
  })
})
