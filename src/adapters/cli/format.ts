/**
 * Aligned tables and values for the CLI's human output. Everything printed comes from the tables, which any program
 * may write: control characters are shown escaped, so a task type, payload, job name or error cannot move the
 * cursor, clear the screen, retitle the terminal or break a row.
 */
import { escapeMatches } from "../../internal/controls.js"

/** The longest cell printed; a longer one is cut and ends with `...`. */
export const MAX_CELL = 60

/**
 * C0 controls, DEL, C1 controls (U+009B is a one-character CSI on some terminals), the line and paragraph
 * separators, and the bidirectional overrides and isolates that can make text read differently from what it is.
 */
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

const NAMED: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\u001b": "\\x1b" }

/** `text` with every control character written as an escape: ESC as `\x1b`, a newline as `\n`, U+202E as `\u202e`. */
export const escapeControls = (text: string): string => escapeMatches(text, CONTROL, NAMED)

/**
 * JSON text with DEL, the C1 controls and U+2028/U+2029 also written as `\u` escapes: the same JSON value
 * (JSON.stringify already escapes C0), but nothing a terminal acts on when the document is printed.
 */
export const terminalSafeJson = (json: string): string =>
  json.replace(
    /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`
  )

/** Cuts `text` to `max` characters, ending with `...`, without splitting a surrogate pair. */
const cut = (text: string, max: number): string => {
  if (text.length <= max) return text
  let end = max - 3
  if (/[\ud800-\udbff]/.test(text[end - 1]!)) end--
  return `${text.slice(0, end)}...`
}

/** A cell as printed: dates in ISO form, nothing as "", control characters escaped, at most `MAX_CELL` long. */
export const cell = (value: unknown): string => {
  if (value === null || value === undefined) return ""
  if (value instanceof Date) return value.toISOString()
  if (Array.isArray(value)) return cut(value.map(cell).join(","), MAX_CELL)
  const text = typeof value === "object" ? JSON.stringify(value) : String(value)
  // Escape only what can be shown (a 10 MB payload is not escaped whole); escapes may lengthen it, so cut again.
  return cut(escapeControls(text.slice(0, MAX_CELL * 2)), MAX_CELL)
}

/** An aligned table with a header row; long cells are cut to keep lines readable. */
export const table = (columns: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<unknown>>): string => {
  const text = rows.map((r) => r.map(cell))
  const widths = columns.map((c, i) => Math.max(c.length, ...text.map((r) => r[i]?.length ?? 0)))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd()
  return [line(columns), ...text.map(line)].join("\n")
}

/** `taskType` → `task_type`: the tables' style, used for every key of the CLI's JSON. */
export const snakeCase = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

/** A read model's fields under snake_case keys (one level: values stay as they are). */
export const snakeKeys = (value: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(value).map(([key, v]) => [snakeCase(key), v]))
