import { describe, expect, it } from "@effect/vitest"
import { cell, escapeControls, MAX_CELL, table, terminalSafeJson } from "../../src/adapters/cli/format.js"

describe("the CLI's human output", () => {
  it("escapes every control character a terminal acts on", () => {
    expect(escapeControls("a\u001b[2Jb")).toBe("a\\x1b[2Jb")
    expect(escapeControls("line\nnext\r\ttab")).toBe("line\\nnext\\r\\ttab")
    expect(escapeControls("\u0000\u0007\u007f\u009b\u0085")).toBe("\\x00\\x07\\x7f\\x9b\\x85")
    expect(escapeControls("\u2028\u202e\u2066")).toBe("\\u2028\\u202e\\u2066")
    expect(escapeControls("plain, ünïcode and emoji 😀")).toBe("plain, ünïcode and emoji 😀")
  })

  it("cells: escaped, cut to MAX_CELL, never half a surrogate pair", () => {
    expect(cell("evil\u001b]0;title\u0007")).toBe("evil\\x1b]0;title\\x07")
    expect(cell({ k: "\u009b" })).toBe(`{"k":"\\x9b"}`)
    expect(cell(null)).toBe("")
    const long = cell("x".repeat(10_000_000))
    expect(long).toBe(`${"x".repeat(MAX_CELL - 3)}...`)
    expect(cell("\u001b".repeat(1000)).length).toBeLessThanOrEqual(MAX_CELL)
    expect(cell("a".repeat(MAX_CELL - 4) + "😀".repeat(5))).toBe(`${"a".repeat(MAX_CELL - 4)}...`)
  })

  it("a newline inside a value does not break a table row", () => {
    const printed = table(["id", "task_type"], [["1", "a\nb\u001b[1A"]])
    expect(printed.split("\n")).toEqual(["id  task_type", "1   a\\nb\\x1b[1A"])
  })

  it("JSON stays the same value, with nothing a terminal acts on", () => {
    const value = { s: "a\u001b\u009b\u007f\u2028\u202e\n" }
    const json = terminalSafeJson(JSON.stringify(value))
    expect(json).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u202e]/)
    expect(JSON.parse(json)).toEqual(value)
  })
})
