/** A value as an error message quotes it: strings in quotes, bigints with their `n`, anything else as JSON if it can be. */
export const show = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "bigint") return `${value}n`
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
