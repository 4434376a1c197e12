/**
 * Cron schedules: the expression syntax and its validation, the stored JSON, the description, fixed DST cases
 * (America/New_York 2026, Pacific/Apia 2011, America/Nuuk 2026) and catching up after long downtime.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { InvalidScheduleError, Schedule, ScheduledJob, ScheduleDecodeError } from "../../src/index.js"

const fires = (schedule: Schedule.Schedule, from: string, n: number): Array<string> => {
  const out: Array<string> = []
  let t = new Date(from)
  for (let i = 0; i < n; i++) {
    t = Schedule.next(schedule, t)
    out.push(t.toISOString().replace(".000Z", "Z"))
  }
  return out
}

const refusal = (expression: string, tz?: string): InvalidScheduleError => {
  try {
    Schedule.cron(expression, tz === undefined ? undefined : { tz })
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidScheduleError)
    return e as InvalidScheduleError
  }
  return expect.unreachable(`${expression} was accepted`)
}

describe("Schedule.cron validation", () => {
  it.each([
    ["61 * * * *", `cron "61 * * * *": minute: 61 is out of range 0-59`],
    ["* 24 * * *", `cron "* 24 * * *": hour: 24 is out of range 0-23`],
    ["* * 0 * *", `cron "* * 0 * *": day-of-month: 0 is out of range 1-31`],
    ["* * 32 * *", `cron "* * 32 * *": day-of-month: 32 is out of range 1-31`],
    ["* * * 13 *", `cron "* * * 13 *": month: 13 is out of range 1-12`],
    ["* * * * 8", `cron "* * * * 8": day-of-week: 8 is out of range 0-7`],
    [
      "0 9 * * MON-FRY",
      `cron "0 9 * * MON-FRY": day-of-week: "FRY" is not a number or a name (SUN MON TUE WED THU FRI SAT)`
    ],
    ["0 9 * JANUARY *", `cron "0 9 * JANUARY *": month: "JANUARY" is not a number or a name`],
    ["MON * * * *", `cron "MON * * * *": minute: "MON" is not a number`],
    ["*/0 * * * *", `cron "*/0 * * * *": minute: step "0" in "*/0" must be a whole number of at least 1`],
    ["*/x * * * *", `cron "*/x * * * *": minute: step "x" in "*/x" must be a whole number of at least 1`],
    ["5-1 * * * *", `cron "5-1 * * * *": minute: range 5-1 is reversed (5 > 1)`],
    ["1,,2 * * * *", `cron "1,,2 * * * *": minute: empty list item in "1,,2"`],
    ["-1 * * * *", `cron "-1 * * * *": minute: "" is not a number`],
    ["1.5 * * * *", `cron "1.5 * * * *": minute: "1.5" is not a number`],
    ["* * * *", `cron "* * * *": expected 5 fields (minute hour day-of-month month day-of-week), got 4`],
    ["0 0 * * * *", `cron "0 0 * * * *": expected 5 fields (minute hour day-of-month month day-of-week), got 6`],
    ["", `cron "": expected 5 fields (minute hour day-of-month month day-of-week), got 0`],
    ["@daily", `cron "@daily": expected 5 fields (minute hour day-of-month month day-of-week), got 1`],
    ["0 0 31 2 *", `cron "0 0 31 2 *": day-of-month: no chosen month has any of these days, so it never fires`],
    ["0 0 30,31 2 *", "no chosen month has any of these days"],
    ["0 0 31 4,6,9,11 *", "no chosen month has any of these days"],
    ["0 0 31 2 */1", "no chosen month has any of these days"]
  ])("%j is refused, naming the field and the value", (expression, message) => {
    const error = refusal(expression)
    expect(error._tag).toBe("InvalidScheduleError")
    expect(error.field).toBe("expression")
    expect(error.value).toBe(expression)
    expect(error.message).toContain(message)
    expect(error.message).toMatch(/^invalid schedule: cron "/)
  })

  it("an unknown zone is refused as the tz field", () => {
    try {
      Schedule.cron("0 9 * * *", { tz: "Mars/Olympus_Mons" })
      expect.unreachable()
    } catch (e) {
      expect(e).toMatchObject({ _tag: "InvalidScheduleError", field: "tz", value: "Mars/Olympus_Mons" })
    }
  })

  it("the message is exactly one line saying what is wrong", () => {
    expect(refusal("61 * * * *").message).toBe(`invalid schedule: cron "61 * * * *": minute: 61 is out of range 0-59`)
  })

  it.each([
    "* * * * *",
    "0 9 * * MON-FRI",
    "0 9 * * mon-fri",
    "*/15 0-6,22-23 1,15 jan-jun,DEC 0,7",
    "5/15 * * * *",
    "0 0 29 2 *", // leap days only: rare but possible
    "0 0 31 2 MON", // the 31st never comes in February, but Mondays do (either day field matches)
    "0 0 * * FRI-SUN",
    "59 23 31 12 7"
  ])("%j is accepted and stored as given", (expression) => {
    expect(Schedule.cron(expression)).toEqual({ _tag: "Cron", expression })
    expect(Schedule.cron(expression, { tz: "Europe/Paris" })).toEqual({ _tag: "Cron", expression, tz: "Europe/Paris" })
  })
})

describe("Schedule.cron fields", () => {
  const utc = (expression: string, from: string, n: number) => fires(Schedule.cron(expression), from, n)

  it("lists, ranges and steps", () => {
    expect(utc("*/20 9-10 * * *", "2026-01-05T00:00:00Z", 7)).toEqual([
      "2026-01-05T09:00:00Z",
      "2026-01-05T09:20:00Z",
      "2026-01-05T09:40:00Z",
      "2026-01-05T10:00:00Z",
      "2026-01-05T10:20:00Z",
      "2026-01-05T10:40:00Z",
      "2026-01-06T09:00:00Z"
    ])
    expect(utc("5,7 0-12/6 * * *", "2026-01-05T00:00:00Z", 7)).toEqual([
      "2026-01-05T00:05:00Z",
      "2026-01-05T00:07:00Z",
      "2026-01-05T06:05:00Z",
      "2026-01-05T06:07:00Z",
      "2026-01-05T12:05:00Z",
      "2026-01-05T12:07:00Z",
      "2026-01-06T00:05:00Z"
    ])
    // `a/step` runs from a to the field's end.
    expect(utc("50/5 0 * * *", "2026-01-05T00:00:00Z", 3)).toEqual([
      "2026-01-05T00:50:00Z",
      "2026-01-05T00:55:00Z",
      "2026-01-06T00:50:00Z"
    ])
  })

  it("names, and 0 and 7 both Sunday", () => {
    // 2026-01-04 is a Sunday.
    const sundays = ["2026-01-04T12:00:00Z", "2026-01-11T12:00:00Z"]
    expect(utc("0 12 * * 0", "2026-01-01T00:00:00Z", 2)).toEqual(sundays)
    expect(utc("0 12 * * 7", "2026-01-01T00:00:00Z", 2)).toEqual(sundays)
    expect(utc("0 12 * * sun", "2026-01-01T00:00:00Z", 2)).toEqual(sundays)
    expect(utc("0 12 * * FRI-SUN", "2026-01-01T00:00:00Z", 4)).toEqual([
      "2026-01-02T12:00:00Z",
      "2026-01-03T12:00:00Z",
      "2026-01-04T12:00:00Z",
      "2026-01-09T12:00:00Z"
    ])
    // A range that starts and ends on one day is that day alone, whichever way Sunday is written (Vixie cron).
    for (const sundayOnly of ["SUN-SUN", "0-0", "7-7", "0-SUN", "sun-sun"]) {
      expect(utc(`0 12 * * ${sundayOnly}`, "2026-01-01T00:00:00Z", 2), sundayOnly).toEqual(sundays)
    }
    expect(utc("0 12 * * MON-MON", "2026-01-01T00:00:00Z", 2)).toEqual(["2026-01-05T12:00:00Z", "2026-01-12T12:00:00Z"])
    // Sunday through Sunday written with 7 at the end is the whole week, as 0-7 is.
    expect(utc("0 12 * * SUN-7", "2026-01-01T00:00:00Z", 3)).toEqual(utc("0 12 * * *", "2026-01-01T00:00:00Z", 3))
    expect(utc("0 0 1 FEB,aug *", "2026-01-01T00:00:00Z", 3)).toEqual([
      "2026-02-01T00:00:00Z",
      "2026-08-01T00:00:00Z",
      "2027-02-01T00:00:00Z"
    ])
  })

  it("day-of-month and day-of-week: either, when both are restricted; both, when one starts with *", () => {
    // January 2026: the 13th is a Tuesday; Fridays are the 2nd, 9th, 16th.
    expect(utc("0 0 13 * FRI", "2026-01-01T00:00:00Z", 4)).toEqual([
      "2026-01-02T00:00:00Z",
      "2026-01-09T00:00:00Z",
      "2026-01-13T00:00:00Z",
      "2026-01-16T00:00:00Z"
    ])
    expect(utc("0 0 13 * *", "2026-01-01T00:00:00Z", 2)).toEqual(["2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"])
    expect(utc("0 0 * * FRI", "2026-01-01T00:00:00Z", 2)).toEqual(["2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"])
    // Vixie cron: a field starting with * (even */2) makes the two day fields both required: odd-dated Fridays.
    expect(utc("0 0 */2 * FRI", "2026-01-01T00:00:00Z", 3)).toEqual([
      "2026-01-09T00:00:00Z",
      "2026-01-23T00:00:00Z",
      "2026-02-13T00:00:00Z"
    ])
  })

  it("the 31st skips shorter months; 29 February waits for leap years, across 2100", () => {
    expect(utc("0 0 31 * *", "2026-01-31T00:00:00Z", 3)).toEqual([
      "2026-03-31T00:00:00Z",
      "2026-05-31T00:00:00Z",
      "2026-07-31T00:00:00Z"
    ])
    expect(utc("0 0 29 2 *", "2096-02-29T00:00:00Z", 2)).toEqual(["2104-02-29T00:00:00Z", "2108-02-29T00:00:00Z"])
  })

  it("next is strictly after `from`, including from inside a matching minute", () => {
    const everyMinute = Schedule.cron("* * * * *")
    expect(Schedule.next(everyMinute, new Date("2026-01-01T00:00:00Z")).toISOString()).toBe("2026-01-01T00:01:00.000Z")
    expect(Schedule.next(everyMinute, new Date("2026-01-01T00:00:59.999Z")).toISOString()).toBe(
      "2026-01-01T00:01:00.000Z"
    )
    expect(Schedule.next(everyMinute, new Date("2026-01-01T00:00:00.001Z")).toISOString()).toBe(
      "2026-01-01T00:01:00.000Z"
    )
  })

  it("at the ends of the dates a Date can hold: a slot when one fits, else a clear error", () => {
    expect(Schedule.next(Schedule.cron("0 0 1 1 *"), new Date(-8.64e15)).toISOString()).toBe(
      "-271820-01-01T00:00:00.000Z"
    )
    expect(Schedule.next(Schedule.cron("* * * * *"), new Date(8.64e15 - 30_000)).toISOString()).toBe(
      "+275760-09-13T00:00:00.000Z"
    )
    expect(() => Schedule.next(Schedule.cron("0 0 1 1 *", { tz: "Europe/Paris" }), new Date(8.64e15 - 30_000))).toThrow(
      expect.objectContaining({
        _tag: "ScheduleComputationError",
        message: expect.stringContaining("before the last date a Date can hold")
      })
    )
  })

  it("a stored expression that never fires (bypassing validation) fails with a clear error instead of looping", () => {
    const never = { _tag: "Cron", expression: "0 0 31 2 *" } as unknown as Schedule.Schedule
    expect(() => Schedule.next(never, new Date("2026-01-01T00:00:00Z"))).toThrow(
      expect.objectContaining({
        _tag: "ScheduleComputationError",
        message: `Schedule.next: cron "0 0 31 2 *": day-of-month: no chosen month has any of these days, so it never fires`
      })
    )
  })
})

describe("a stored zone this runtime does not know (bypassing validation)", () => {
  it("fails with the domain's error naming the zone, for every kind of wall-clock schedule", () => {
    const bad = [
      { _tag: "Daily", hour: 9, minute: 0, tz: "Mars/Olympus_Mons" },
      { _tag: "Weekly", weekday: 1, hour: 9, minute: 0, tz: "Mars/Olympus_Mons" },
      { _tag: "Cron", expression: "0 9 * * *", tz: "Mars/Olympus_Mons" }
    ] as unknown as ReadonlyArray<Schedule.Schedule>
    for (const schedule of bad) {
      expect(() => Schedule.next(schedule, new Date("2026-01-01T00:00:00Z")), schedule._tag).toThrow(
        expect.objectContaining({
          _tag: "ScheduleComputationError",
          message: "Schedule.next: unknown time zone: Mars/Olympus_Mons"
        })
      )
    }
  })
})

describe("Schedule.cron across DST (the daily rule)", () => {
  const newYork = (expression: string) => Schedule.cron(expression, { tz: "America/New_York" })

  it("spring forward: a wall time in the gap fires shifted forward; two shifted onto one instant fire once", () => {
    // 2026-03-08: 02:00 EST → 03:00 EDT.
    expect(fires(newYork("30 2 * * *"), "2026-03-07T12:00:00Z", 2)).toEqual([
      "2026-03-08T07:30:00Z", // 02:30 → 03:30 EDT
      "2026-03-09T06:30:00Z"
    ])
    expect(fires(newYork("*/30 1-3 * * *"), "2026-03-08T05:00:00Z", 5)).toEqual([
      "2026-03-08T06:00:00Z", // 01:00 EST
      "2026-03-08T06:30:00Z", // 01:30 EST
      "2026-03-08T07:00:00Z", // 02:00 → 03:00 EDT, and 03:00 itself: one fire
      "2026-03-08T07:30:00Z", // 02:30 → 03:30 EDT, and 03:30 itself: one fire
      "2026-03-09T05:00:00Z"
    ])
    // A later wall time can fire before a shifted earlier one: 03:10 EDT comes before 02:30 shifted to 03:30.
    expect(fires(newYork("10,30 2,3 * * *"), "2026-03-08T06:59:00Z", 3)).toEqual([
      "2026-03-08T07:10:00Z",
      "2026-03-08T07:30:00Z",
      "2026-03-09T06:10:00Z"
    ])
  })

  it("fall back: a repeated wall time fires once, at its earlier occurrence", () => {
    // 2026-11-01: 02:00 EDT → 01:00 EST; 01:00-01:59 happens twice.
    expect(fires(newYork("*/20 1 * * *"), "2026-11-01T04:00:00Z", 4)).toEqual([
      "2026-11-01T05:00:00Z",
      "2026-11-01T05:20:00Z",
      "2026-11-01T05:40:00Z",
      "2026-11-02T06:00:00Z"
    ])
    // Asked from inside the repeated hour (its second pass), the next is after it, never earlier than `from`.
    expect(fires(newYork("30 1 * * *"), "2026-11-01T06:10:00Z", 1)).toEqual(["2026-11-02T06:30:00Z"])
    expect(fires(newYork("0 * * * *"), "2026-11-01T05:30:00Z", 3)).toEqual([
      "2026-11-01T07:00:00Z", // 02:00 EST: 01:00 EST (06:00Z) was the second pass of 01:00
      "2026-11-01T08:00:00Z",
      "2026-11-01T09:00:00Z"
    ])
  })

  it("a date the zone skipped has no slots; a slot pushed past midnight still fires", () => {
    expect(fires(Schedule.cron("0 9 * * *", { tz: "Pacific/Apia" }), "2011-12-28T12:00:00Z", 3)).toEqual([
      "2011-12-28T19:00:00Z", // 28th 09:00 -10:00
      "2011-12-29T19:00:00Z", // 29th 09:00 -10:00
      "2011-12-30T19:00:00Z" // 31st 09:00 +14:00 (the 30th never happened)
    ])
    expect(fires(Schedule.cron("30 23 * * *", { tz: "America/Nuuk" }), "2026-03-27T12:00:00Z", 3)).toEqual([
      "2026-03-28T01:30:00Z", // 27th 23:30 -02:00
      "2026-03-29T01:30:00Z", // 28th 23:30 did not exist: 00:30 -01:00 on the 29th
      "2026-03-30T00:30:00Z" // 29th 23:30 -01:00
    ])
  })

  it("a wall time exactly at the end of a gap fires then, once (America/St_Johns 2000, 00:01 → 01:01)", () => {
    // Found by the oracle: asked from the transition itself, 01:01 that day is not after it; the next is a day on.
    expect(fires(Schedule.cron("1 1 * * *", { tz: "America/St_Johns" }), "2000-04-02T03:31:00Z", 2)).toEqual([
      "2000-04-03T03:31:00Z",
      "2000-04-04T03:31:00Z"
    ])
    expect(fires(Schedule.cron("1 1 * * *", { tz: "America/St_Johns" }), "2000-04-02T03:00:00Z", 2)).toEqual([
      "2000-04-02T03:31:00Z",
      "2000-04-03T03:31:00Z"
    ])
  })

  it("a 30-minute shift (Australia/Lord_Howe)", () => {
    // 2026-10-04: 02:00 +10:30 → 02:30 +11:00.
    expect(fires(Schedule.cron("15 2 * * *", { tz: "Australia/Lord_Howe" }), "2026-10-02T12:00:00Z", 3)).toEqual([
      "2026-10-02T15:45:00Z",
      "2026-10-03T15:45:00Z", // 02:15 → 02:45 +11:00
      "2026-10-04T15:15:00Z"
    ])
  })
})

describe("Schedule.cron codec and format", () => {
  it("stores exactly the contract's JSON and round-trips", () => {
    const paris = Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" })
    expect(Schedule.encodeJson(paris)).toBe(`{"_tag":"Cron","expression":"0 9 * * MON-FRI","tz":"Europe/Paris"}`)
    for (const schedule of [paris, Schedule.cron("*/5 * * * *")]) {
      const json = Schedule.encodeJson(schedule)
      expect(Schedule.decodeJson(json)).toEqual(Either.right(schedule))
      expect(Schedule.decode(JSON.parse(json))).toEqual(Either.right(schedule))
      expect(Schedule.decode(Schedule.encode(schedule))).toEqual(Either.right(schedule))
    }
    expect(Schedule.encodeJson(Schedule.cron("*/5 * * * *"))).toBe(`{"_tag":"Cron","expression":"*/5 * * * *"}`)
  })

  it.each([
    ["a bad field", `{"_tag":"Cron","expression":"61 * * * *"}`, `minute: 61 is out of range 0-59`],
    ["an impossible date", `{"_tag":"Cron","expression":"0 0 31 2 *"}`, "never fires"],
    ["four fields", `{"_tag":"Cron","expression":"* * * *"}`, "expected 5 fields"],
    ["no expression", `{"_tag":"Cron","tz":"UTC"}`, "expression"],
    ["the wrong field name", `{"_tag":"Cron","expr":"* * * * *"}`, "expression"],
    ["a number", `{"_tag":"Cron","expression":5}`, "expression"],
    ["an unknown zone", `{"_tag":"Cron","expression":"* * * * *","tz":"Nowhere/Land"}`, "Nowhere/Land"]
  ])("rejects %s with a ScheduleDecodeError that says why", (_name, json, why) => {
    const result = Schedule.decodeJson(json)
    expect(Either.isLeft(result)).toBe(true)
    if (Either.isLeft(result)) {
      expect(result.left).toBeInstanceOf(ScheduleDecodeError)
      expect(result.left.message).toMatch(/^invalid stored schedule: /)
      expect(result.left.message).toContain(why)
    }
  })

  it("formats in words", () => {
    expect(Schedule.format(Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" }))).toBe(
      `cron "0 9 * * MON-FRI" (Europe/Paris)`
    )
    expect(Schedule.format(Schedule.cron("*/5 * * * *"))).toBe(`cron "*/5 * * * *" (UTC)`)
  })
})

describe("a due cron job after long downtime", () => {
  const decide = (expression: string, slot: string, now: string) =>
    ScheduledJob.decideDue({
      schedule: Schedule.cron(expression),
      slot: new Date(slot),
      now: new Date(now),
      missedSlots: "latest",
      overlap: "skip",
      previousRunning: false,
      lateAfterMs: Number.POSITIVE_INFINITY
    })

  it("runs the latest slot at or before now, never a future one, even when slots are a year apart", () => {
    const yearly = decide("0 0 1 1 *", "2020-01-01T00:00:00Z", "2026-06-01T00:00:00Z")
    expect(yearly.run?.toISOString()).toBe("2026-01-01T00:00:00.000Z")
    expect(yearly.next.toISOString()).toBe("2027-01-01T00:00:00.000Z")
    expect(yearly.missed).toBe(6)
  })

  it("a slot from year 1 (a row written by SQL): the latest slot, in the right century", () => {
    const d = decide("0 3 * 2 *", "0001-02-01T03:00:00Z", "2026-06-01T00:00:00Z")
    expect(d.run?.toISOString()).toBe("2026-02-28T03:00:00.000Z")
    expect(d.next.toISOString()).toBe("2027-02-01T03:00:00.000Z")
    expect(Schedule.next(Schedule.cron("0 0 1 * *"), new Date("0050-01-15T00:00:00Z")).toISOString()).toBe(
      "0050-02-01T00:00:00.000Z"
    )
  })

  it("a minutely job down for a month: the latest minute, quickly, with the missed minutes counted roughly", () => {
    const started = performance.now()
    const d = decide("* * * * *", "2026-01-01T00:00:00Z", "2026-02-01T00:00:30Z")
    expect(performance.now() - started).toBeLessThan(5_000)
    expect(d.run?.toISOString()).toBe("2026-02-01T00:00:00.000Z")
    expect(d.next.toISOString()).toBe("2026-02-01T00:01:00.000Z")
    expect(d.missed).toBeGreaterThan(44_000)
    expect(d.missed).toBeLessThan(45_000)
  })
})
