/**
 * Values kairos encodes or decodes itself on its hot path, checked against what Postgres reads and writes: the array
 * literals that carry a batch of results (PgArrays), and the times read on claims (PgTimes). Integration: a real Postgres,
 * no schema.
 */
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { arrayLiteral } from "../../src/adapters/postgres/PgArrays.js"
import { isoString, parseTimestamptz, typeParsers } from "../../src/adapters/postgres/PgTimes.js"
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

describe("parseTimestamptz", () => {
  const zones = [
    "UTC",
    "Asia/Kolkata",
    "America/St_Johns",
    "Pacific/Chatham",
    "Europe/Amsterdam",
    "America/Los_Angeles"
  ]
  const times = [
    "2026-12-02 00:30:35.773123+00",
    "2026-03-29 01:59:59.999999+00",
    "2026-10-25 01:00:00.1+00",
    "2026-06-15 12:00:00+00",
    "2000-02-29 23:59:59.12+00",
    "1970-01-01 00:00:00+00",
    "1900-01-01 00:00:00+00",
    "1850-07-01 12:34:56.5+00",
    "0050-01-01 00:00:00+00",
    "0100-01-01 00:00:00+00",
    "12345-06-07 08:09:10+00",
    "0044-03-15 12:00:00+00 BC",
    "infinity",
    "-infinity"
  ]

  it("reads every timestamptz Postgres writes, in any time zone, as node-postgres's own parser does", async () => {
    const client = await pool.connect()
    try {
      const pgParser = pg.types.getTypeParser(1184, "text")
      let read = 0
      for (const zone of zones) {
        await client.query(`SET TIME ZONE '${zone}'`)
        const { rows } = await client.query<{ text: string }>(
          "SELECT t::timestamptz::text AS text FROM unnest($1::text[]) AS t",
          [times]
        )
        for (const { text } of rows) {
          const expected = pgParser(text) as Date | number | string
          const actual = parseTimestamptz(text)
          if (expected instanceof Date) {
            expect(actual, text).toBeInstanceOf(Date)
            expect((actual as Date).getTime(), text).toBe(expected.getTime())
          } else {
            expect(actual, text).toEqual(expected)
          }
          read++
        }
      }
      expect(read).toBe(zones.length * times.length)
    } finally {
      client.release()
    }
  })

  it("is what a pool with kairos's type parsers returns for timestamptz, and only for it", async () => {
    const own = new pg.Pool({ connectionString: databaseUrl(), max: 1, types: typeParsers })
    try {
      const statement =
        "SELECT now() AS now, '2026-12-02 00:30:35.773+05:30'::timestamptz AS t, 7::int AS n, '{1,2}'::int[] AS a, " +
        "'2026-12-02 00:30:35'::timestamp AS local, 'x'::text AS s"
      const [ours] = (await own.query(statement)).rows
      const [theirs] = (await pool.query(statement)).rows
      expect(ours.t).toBeInstanceOf(Date)
      expect(ours.t.toISOString()).toBe("2026-12-01T19:00:35.773Z")
      expect(ours.now).toBeInstanceOf(Date)
      expect({ ...ours, now: undefined }).toEqual({ ...theirs, now: undefined })
    } finally {
      await own.end()
    }
  })
})

describe("isoString", () => {
  it("writes every time as toISOString does: across days, before 1970, at the ends of the four-digit years", () => {
    const times: Array<number> = []
    // Pseudo-random times from 1843 to 2096, in an order that leaves and re-enters days.
    let seed = 7
    for (let i = 0; i < 20_000; i++) {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648
      times.push(Math.floor((seed / 2_147_483_648 - 0.3) * 4e12))
    }
    for (const edge of [Date.UTC(2026, 11, 31, 23, 59, 59, 990), Date.UTC(1969, 11, 31, 23, 59, 59, 990), 0]) {
      for (let ms = 0; ms < 40; ms++) times.push(edge + ms)
    }
    const now = Date.now()
    for (let i = 0; i < 2_000; i++) times.push(now + i * 37)
    times.push(Date.UTC(9999, 11, 31, 23, 59, 59, 999), Date.UTC(10000, 0, 1), -62167219200001, -62167219200000)
    for (const ms of times) expect(isoString(new Date(ms)), String(ms)).toBe(new Date(ms).toISOString())
  })

  it("is read by Postgres as the same instant", async () => {
    const times = [Date.now(), Date.now() + 1, Date.UTC(2026, 2, 29, 1, 59, 59, 999), Date.UTC(1900, 0, 1)].map(
      (ms) => new Date(ms)
    )
    expect(await roundTrip(arrayLiteral(times.map(isoString)), "timestamptz[]")).toEqual(times)
  })
})
