/**
 * The runtime stays in named parts a reader can hold in their head: no function or arrow in `src/runtime` is longer
 * than `MAX_LINES` lines (issue 33). A behaviour that grows past it is a module of its own.
 */
import fs from "node:fs"
import path from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"
import { projectRoot } from "./support/process.js"

const MAX_LINES = 120

const runtimeDir = path.join(projectRoot, "src", "runtime")

/** Every function-like node of a file longer than `MAX_LINES`: where it starts, its name and its length. */
const longFunctions = (file: string): Array<string> => {
  const text = fs.readFileSync(file, "utf8")
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const found: Array<string> = []
  const nameOf = (node: ts.Node): string => {
    if ((ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node)) && node.name !== undefined)
      return node.name.getText(source)
    const parent = node.parent
    if (parent !== undefined && ts.isVariableDeclaration(parent)) return parent.name.getText(source)
    if (parent !== undefined && ts.isPropertyAssignment(parent)) return parent.name.getText(source)
    return "(anonymous)"
  }
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line + 1
      const lines = end - start + 1
      if (lines > MAX_LINES) {
        found.push(`${path.relative(projectRoot, file)}:${start} ${nameOf(node)} (${lines} lines)`)
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

describe("the runtime's shape", () => {
  it(`has no function longer than ${MAX_LINES} lines`, () => {
    const files = fs
      .readdirSync(runtimeDir)
      .filter((f) => f.endsWith(".ts"))
      .map((f) => path.join(runtimeDir, f))
    expect(files.length).toBeGreaterThan(0)
    expect(files.flatMap(longFunctions)).toEqual([])
  })

  it("the check finds a long function (it is not vacuous)", () => {
    const dir = fs.mkdtempSync(path.join(projectRoot, "node_modules", ".runtime-shape-"))
    try {
      const file = path.join(dir, "Long.ts")
      fs.writeFileSync(file, `export const long = () => {\n${"  void 0\n".repeat(MAX_LINES)}}\n`)
      expect(longFunctions(file)).toEqual([expect.stringMatching(/Long\.ts:1 long \(122 lines\)$/)])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
