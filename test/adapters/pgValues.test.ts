/**
 * Values kairos encodes or decodes itself on its hot path, checked against what Postgres reads and writes: the array
 * literals that carry a batch of results (PgArrays). Integration: a real Postgres, no schema.
 */
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { arrayLiteral } from "../../src/adapters/postgres/PgArrays.js"
import { databaseUrl } from "../support/database.js"

const pool = new pg.Pool({ connectionString: databaseUrl(), max: 1 })
afterAll(() => pool.end())

const roundTrip = async (literal: string, type: string): Promise<unknown> =>
  (await pool.query<{ a: unknown }>(`SELECT $1::${type} AS a`, [literal])).rows[0]!.a

describe("arrayLiteral", () => {
  it("carries any text, quotes, backslashes, braces, commas, white space, empty and the word NULL included", async () => {
    const texts = [
      "plain",
      "",
      "NULL",
      "null",
      'say "hi"',
      "back\\slash",
      "\\",
      '"',
      "{braces}",
      "a,b",
      " leading and trailing ",
      "tab\there",
      "line\nbreak",
      "ünïcødé ✓ 日本",
      "x".repeat(10_000),
      "'single'",
      "NULLs"
    ]
    expect(await roundTrip(arrayLiteral(texts), "text[]")).toEqual(texts)
    expect(await roundTrip(arrayLiteral(["a", null, undefined, "NULL"]), "text[]")).toEqual(["a", null, null, "NULL"])
  })

  it("carries numbers, booleans, times and NULLs as the statement's cast reads them", async () => {
    expect(await roundTrip(arrayLiteral(["1", "9007199254740993", null]), "bigint[]")).toEqual([
      "1",
      "9007199254740993",
      null
    ])
    expect(await roundTrip(arrayLiteral([0, -5, 2_147_483_647, null]), "int[]")).toEqual([0, -5, 2_147_483_647, null])
    expect(await roundTrip(arrayLiteral([true, false, null]), "boolean[]")).toEqual([true, false, null])
    const times = [new Date("2026-03-29T01:59:59.999Z"), new Date(0)]
    expect(await roundTrip(arrayLiteral([...times.map((t) => t.toISOString()), null]), "timestamptz[]")).toEqual([
      ...times,
      null
    ])
    expect(await roundTrip(arrayLiteral([]), "text[]")).toEqual([])
  })
})
