/**
 * Row ids as text: every id kairos hands out (queue items, executions, jobs, runs) is a Postgres `bigint` from a
 * sequence, so a positive one, at most 9223372036854775807. Checked here once for every place an id comes from a
 * person (the CLI's arguments, the dashboard's forms and links, the Promise API).
 */

/** The largest id a `bigint` column holds. */
export const MAX_ID = 9_223_372_036_854_775_807n

/** Digits without a leading zero, of a length a `bigint` may have. */
const DIGITS = /^[1-9][0-9]{0,18}$/

/** Whether `text` is an id: a whole number from 1 to `MAX_ID`, written plainly (no sign, no leading zero). */
export const isId = (text: string): boolean => DIGITS.test(text) && BigInt(text) <= MAX_ID
