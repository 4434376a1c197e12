/**
 * Invalid schedules throw InvalidScheduleError naming the field; the JSON codec round-trips and rejects bad input.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Either } from "effect"
import { InvalidScheduleError, Schedule, ScheduleDecodeError } from "../../src/index.js"

const expectInvalid = (build: () => unknown, field: string) => {
  let caught: unknown
  try {
    build()
  } catch (e) {
    caught = e
  }
  expect(caught).toBeInstanceOf(InvalidScheduleError)
  const error = caught as InvalidScheduleError
  expect(error._tag).toBe("InvalidScheduleError")
  expect(error.field).toBe(field)
  expect(error.message).toContain(field)
}

describe("Schedule constructors", () => {
  it.each([
    ["hour -1", () => Schedule.daily({ hour: -1, minute: 0 }), "hour"],
    ["hour 24", () => Schedule.daily({ hour: 24, minute: 0 }), "hour"],
    ["hour 9.5", () => Schedule.daily({ hour: 9.5, minute: 0 }), "hour"],
    ["hour NaN", () => Schedule.daily({ hour: Number.NaN, minute: 0 }), "hour"],
    ["minute -1", () => Schedule.daily({ hour: 0, minute: -1 }), "minute"],
    ["minute 60", () => Schedule.daily({ hour: 0, minute: 60 }), "minute"],
    ["weekly minute 60", () => Schedule.weekly({ weekday: 1, hour: 0, minute: 60 }), "minute"],
    ["weekly hour 25", () => Schedule.weekly({ weekday: 1, hour: 25, minute: 0 }), "hour"],
    ["weekday 0", () => Schedule.weekly({ weekday: 0, hour: 9, minute: 0 }), "weekday"],
    ["weekday 8", () => Schedule.weekly({ weekday: 8, hour: 9, minute: 0 }), "weekday"],
    ["unknown zone", () => Schedule.daily({ hour: 9, minute: 0, tz: "Mars/Olympus_Mons" }), "tz"],
    ["empty zone", () => Schedule.weekly({ weekday: 1, hour: 9, minute: 0, tz: "" }), "tz"],
    ["interval 0", () => Schedule.interval({ every: 0 }), "every"],
    ["interval negative", () => Schedule.interval({ every: -5 }), "every"],
    ["interval NaN", () => Schedule.interval({ every: Number.NaN }), "every"],
    ["interval Infinity", () => Schedule.interval({ every: Number.POSITIVE_INFINITY }), "every"],
    ["interval infinite duration", () => Schedule.interval({ every: Duration.infinity }), "every"],
    ["interval zero duration", () => Schedule.interval({ every: Duration.zero }), "every"],
    ["interval 1.5 ms", () => Schedule.interval({ every: 1.5 }), "every"],
    ["interval in nanoseconds", () => Schedule.interval({ every: Duration.nanos(1500n) }), "every"],
    ["interval unparsable", () => Schedule.interval({ every: "5 parsecs" as Duration.DurationInput }), "every"]
  ])("%s throws InvalidScheduleError naming the field", (_name, build, field) => {
    expectInvalid(build, field)
  })

  it("the error is a tagged Effect error carrying the value", () => {
    try {
      Schedule.daily({ hour: 24, minute: 0 })
      expect.unreachable()
    } catch (e) {
      expect(e).toMatchObject({ _tag: "InvalidScheduleError", field: "hour", value: 24 })
      expect((e as Error).message).toBe("invalid schedule: hour must be an integer from 0 to 23 (got 24)")
    }
  })

  it("accepts valid schedules, zone aliases and UTC", () => {
    expect(Schedule.daily({ hour: 0, minute: 0 })).toEqual({ _tag: "Daily", hour: 0, minute: 0 })
    expect(Schedule.daily({ hour: 23, minute: 59, tz: "Asia/Calcutta" })).toEqual({
      _tag: "Daily",
      hour: 23,
      minute: 59,
      tz: "Asia/Calcutta"
    })
    expect(Schedule.weekly({ weekday: 7, hour: 9, minute: 0, tz: "UTC" }).weekday).toBe(7)
    expect(Schedule.interval({ every: "5 minutes" })).toEqual({ _tag: "Interval", everyMillis: 300_000 })
    expect(Schedule.interval({ every: Duration.seconds(30) }).everyMillis).toBe(30_000)
    expect(Schedule.interval({ every: 1 }).everyMillis).toBe(1)
    expect(Schedule.interval({ every: Duration.nanos(2_000_000n) }).everyMillis).toBe(2)
  })
})

describe("Schedule codec", () => {
  const schedules: ReadonlyArray<Schedule.Schedule> = [
    Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" }),
    Schedule.daily({ hour: 0, minute: 59 }),
    Schedule.weekly({ weekday: 1, hour: 9, minute: 0, tz: "Europe/Berlin" }),
    Schedule.weekly({ weekday: 7, hour: 23, minute: 30 }),
    Schedule.interval({ every: "5 minutes" }),
    Schedule.interval({ every: 1 })
  ]

  it.each(schedules)("round-trips %j", (schedule) => {
    const json = Schedule.encodeJson(schedule)
    expect(Schedule.decodeJson(json)).toEqual(Either.right(schedule))
    expect(Schedule.decode(JSON.parse(json))).toEqual(Either.right(schedule))
    expect(Schedule.decode(Schedule.encode(schedule))).toEqual(Either.right(schedule))
  })

  it("uses exactly the JSON shapes of the contract", () => {
    expect(Schedule.encodeJson(Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" }))).toBe(
      `{"_tag":"Daily","hour":9,"minute":0,"tz":"Europe/Berlin"}`
    )
    expect(Schedule.encodeJson(Schedule.weekly({ weekday: 1, hour: 9, minute: 0, tz: "Europe/Berlin" }))).toBe(
      `{"_tag":"Weekly","weekday":1,"hour":9,"minute":0,"tz":"Europe/Berlin"}`
    )
    expect(Schedule.encodeJson(Schedule.interval({ every: "5 minutes" }))).toBe(
      `{"_tag":"Interval","everyMillis":300000}`
    )
    expect(Schedule.decodeJson(`{"_tag":"Weekly","weekday":1,"hour":9,"minute":0}`)).toEqual(
      Either.right(Schedule.weekly({ weekday: 1, hour: 9, minute: 0 }))
    )
  })

  it.each([
    ["not JSON", "{_tag: Daily"],
    ["an array", "[]"],
    ["null", "null"],
    ["unknown tag", `{"_tag":"Monthly","day":1}`],
    ["missing tag", `{"hour":9,"minute":0}`],
    ["hour out of range", `{"_tag":"Daily","hour":24,"minute":0}`],
    ["minute as a string", `{"_tag":"Daily","hour":9,"minute":"0"}`],
    ["weekday out of range", `{"_tag":"Weekly","weekday":0,"hour":9,"minute":0}`],
    ["unknown zone", `{"_tag":"Daily","hour":9,"minute":0,"tz":"Nowhere/Land"}`],
    ["null zone", `{"_tag":"Daily","hour":9,"minute":0,"tz":null}`],
    ["zero interval", `{"_tag":"Interval","everyMillis":0}`],
    ["fractional interval", `{"_tag":"Interval","everyMillis":1.5}`],
    ["interval in the wrong field", `{"_tag":"Interval","every":"5 minutes"}`],
    ["an extra field", `{"_tag":"Daily","hour":9,"minute":0,"cron":"* * * * *"}`]
  ])("rejects %s with a typed ScheduleDecodeError", (_name, json) => {
    const result = Schedule.decodeJson(json)
    expect(Either.isLeft(result)).toBe(true)
    if (Either.isLeft(result)) {
      expect(result.left).toBeInstanceOf(ScheduleDecodeError)
      expect(result.left._tag).toBe("ScheduleDecodeError")
      expect(result.left.input).toBe(json)
      expect(result.left.message).toMatch(/^invalid stored schedule: /)
    }
  })

  it("names what is wrong", () => {
    const hour = Schedule.decodeJson(`{"_tag":"Daily","hour":24,"minute":0}`)
    expect(Either.isLeft(hour) && hour.left.message).toContain("hour must be an integer from 0 to 23")
    const tz = Schedule.decode({ _tag: "Daily", hour: 9, minute: 0, tz: "Nowhere/Land" })
    expect(Either.isLeft(tz) && tz.left.message).toContain("Nowhere/Land")
  })
})

describe("Schedule.format", () => {
  it("describes each kind", () => {
    expect(Schedule.format(Schedule.daily({ hour: 9, minute: 5, tz: "Europe/Berlin" }))).toBe(
      "daily 09:05 Europe/Berlin"
    )
    expect(Schedule.format(Schedule.weekly({ weekday: 1, hour: 9, minute: 0 }))).toBe("weekly Mon 09:00 UTC")
    expect(Schedule.format(Schedule.interval({ every: "5 minutes" }))).toBe("every 5m")
  })
})
