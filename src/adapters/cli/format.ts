/**
 * Aligned tables and values for the CLI's human output.
 */

/** A cell as printed: dates in ISO form, nothing as "". */
export const cell = (value: unknown): string => {
  if (value === null || value === undefined) return ""
  if (value instanceof Date) return value.toISOString()
  if (Array.isArray(value)) return value.map(cell).join(",")
  if (typeof value === "object") return JSON.stringify(value)
  return String(value).replace(/\s+/g, " ")
}

/** An aligned table with a header row; long cells are cut to keep lines readable. */
export const table = (columns: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<unknown>>): string => {
  const cut = (s: string) => (s.length > 60 ? `${s.slice(0, 57)}...` : s)
  const text = rows.map((r) => r.map((v) => cut(cell(v))))
  const widths = columns.map((c, i) => Math.max(c.length, ...text.map((r) => r[i]?.length ?? 0)))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd()
  return [line(columns), ...text.map(line)].join("\n")
}
