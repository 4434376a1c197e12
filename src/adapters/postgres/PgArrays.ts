/**
 * Postgres array literals (`{1,2,NULL}`) for the statements that take a batch as one array per column.
 *
 * node-postgres encodes a JavaScript array element by element: a type dispatch, a quoting concatenation and a regex
 * replace per element, and a string grown one piece at a time. For the results of a drain that was the largest
 * allocation on the client (120 of 566 MB over 50,000 items). A literal is sent as text and cast by the statement
 * (`$1::bigint[]`), so the server reads exactly the values it read before.
 */

/** One element: NULL for `null` or `undefined`, `t`/`f` for a boolean, a number as JavaScript writes it. */
export type Element = string | number | boolean | null | undefined

// A string goes unquoted unless the array syntax would read it otherwise: braces, quotes, commas, backslashes,
// white space (trimmed when unquoted), the empty string and the word NULL.
const needsQuotes = /[{}",\\\s]|^$|^null$/i
const escaped = /[\\"]/g

const element = (value: Element): string => {
  if (value === null || value === undefined) return "NULL"
  if (typeof value === "string") return needsQuotes.test(value) ? `"${value.replace(escaped, (c) => `\\${c}`)}"` : value
  if (typeof value === "boolean") return value ? "t" : "f"
  return String(value)
}

/** The literal of a one-dimensional array. */
export const arrayLiteral = (values: ReadonlyArray<Element>): string => `{${values.map(element).join(",")}}`
