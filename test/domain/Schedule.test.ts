/**
 * Schedule.next on hand-computed tables: UTC, and zones whose DST changes are gaps, overlaps, 30-minute shifts,
 * two-hour shifts, midnight transitions and a skipped day.
 */
import { describe, expect, it } from "@effect/vitest"
import { Settings } from "luxon"
import { Schedule } from "../../src/index.js"

interface Row {
  readonly name: string
  readonly schedule: Schedule.Schedule
  readonly from: string
  /** The next fire instants, in order, starting from `from`. */
  readonly expected: ReadonlyArray<string>
}

const daily = (hour: number, minute: number, tz?: string) => Schedule.daily({ hour, minute, tz })
const weekly = (weekday: number, hour: number, minute: number, tz?: string) =>
  Schedule.weekly({ weekday, hour, minute, tz })

const rows: ReadonlyArray<Row> = [
  // UTC
  {
    name: "UTC daily, before today's slot",
    schedule: daily(9, 0),
    from: "2026-01-01T08:59:59.999Z",
    expected: ["2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z"]
  },
  {
    name: "UTC daily, exactly at the slot: strictly after",
    schedule: daily(9, 0),
    from: "2026-01-01T09:00:00Z",
    expected: ["2026-01-02T09:00:00Z"]
  },
  {
    name: "UTC daily at midnight across a year end",
    schedule: daily(0, 0, "UTC"),
    from: "2026-12-31T00:00:00Z",
    expected: ["2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z"]
  },
  {
    name: "UTC daily 23:59 across a leap day",
    schedule: daily(23, 59),
    from: "2028-02-28T23:59:00Z",
    expected: ["2028-02-29T23:59:00Z", "2028-03-01T23:59:00Z"]
  },
  {
    name: "UTC weekly Monday from a Sunday",
    schedule: weekly(1, 9, 0),
    from: "2026-11-29T12:00:00Z",
    expected: ["2026-11-30T09:00:00Z", "2026-12-07T09:00:00Z"]
  },
  {
    name: "UTC weekly, exactly at the slot: a week later",
    schedule: weekly(1, 9, 0),
    from: "2026-11-30T09:00:00Z",
    expected: ["2026-12-07T09:00:00Z"]
  },
  {
    name: "UTC weekly Sunday (7)",
    schedule: weekly(7, 18, 45),
    from: "2026-11-29T18:45:00.001Z",
    expected: ["2026-12-06T18:45:00Z"]
  },

  // America/New_York: spring forward 2026-03-08 02:00 EST -> 03:00 EDT; fall back 2026-11-01 02:00 EDT -> 01:00 EST
  {
    name: "New York daily 02:30 in the spring gap fires 03:30 EDT",
    schedule: daily(2, 30, "America/New_York"),
    from: "2026-03-07T12:00:00Z",
    expected: ["2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]
  },
  {
    name: "New York daily 02:30, restart at 03:10 EDT on the gap day still fires 03:30",
    schedule: daily(2, 30, "America/New_York"),
    from: "2026-03-08T07:10:00Z",
    expected: ["2026-03-08T07:30:00Z"]
  },
  {
    name: "New York daily 01:30 on fall-back day fires once, at 01:30 EDT",
    schedule: daily(1, 30, "America/New_York"),
    from: "2026-10-31T12:00:00Z",
    expected: ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
  },
  {
    name: "New York daily 01:30 from inside the repeated hour: no second fire",
    schedule: daily(1, 30, "America/New_York"),
    from: "2026-11-01T06:10:00Z",
    expected: ["2026-11-02T06:30:00Z"]
  },
  {
    name: "New York daily 09:00 across spring forward",
    schedule: daily(9, 0, "America/New_York"),
    from: "2026-03-07T00:00:00Z",
    expected: ["2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"]
  },
  {
    name: "New York daily 09:00 across fall back",
    schedule: daily(9, 0, "America/New_York"),
    from: "2026-10-31T00:00:00Z",
    expected: ["2026-10-31T13:00:00Z", "2026-11-01T14:00:00Z"]
  },
  {
    name: "New York daily 02:00 exactly at the gap start",
    schedule: daily(2, 0, "America/New_York"),
    from: "2026-03-08T00:00:00Z",
    expected: ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]
  },
  {
    name: "New York daily 03:00, the first wall time after the gap",
    schedule: daily(3, 0, "America/New_York"),
    from: "2026-03-08T00:00:00Z",
    expected: ["2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"]
  },
  {
    name: "New York weekly Sunday 02:30 across spring forward",
    schedule: weekly(7, 2, 30, "America/New_York"),
    from: "2026-02-28T00:00:00Z",
    expected: ["2026-03-01T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-15T06:30:00Z"]
  },
  {
    name: "New York weekly Sunday 01:30 across fall back",
    schedule: weekly(7, 1, 30, "America/New_York"),
    from: "2026-10-25T06:00:00Z",
    expected: ["2026-11-01T05:30:00Z", "2026-11-08T06:30:00Z"]
  },

  // Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z); 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z)
  {
    name: "Berlin daily 09:00 across spring forward",
    schedule: daily(9, 0, "Europe/Berlin"),
    from: "2026-03-28T00:00:00Z",
    expected: ["2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"]
  },
  {
    name: "Berlin daily 02:30 in the spring gap fires 03:30 CEST",
    schedule: daily(2, 30, "Europe/Berlin"),
    from: "2026-03-28T12:00:00Z",
    expected: ["2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"]
  },
  {
    name: "Berlin daily 02:30 on fall-back day fires at 02:30 CEST only",
    schedule: daily(2, 30, "Europe/Berlin"),
    from: "2026-10-24T12:00:00Z",
    expected: ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
  },
  {
    name: "Berlin daily 09:00 across fall back",
    schedule: daily(9, 0, "Europe/Berlin"),
    from: "2026-10-24T12:00:00Z",
    expected: ["2026-10-25T08:00:00Z", "2026-10-26T08:00:00Z"]
  },
  {
    name: "Berlin weekly Sunday 02:30 across both changes",
    schedule: weekly(7, 2, 30, "Europe/Berlin"),
    from: "2026-03-22T12:00:00Z",
    expected: ["2026-03-29T01:30:00Z", "2026-04-05T00:30:00Z"]
  },

  // Australia/Lord_Howe: 30-minute shifts. 2026-04-05 02:00 (+11) -> 01:30 (+10:30); 2026-10-04 02:00 (+10:30) -> 02:30 (+11)
  {
    name: "Lord Howe daily 01:45 in the repeated half hour fires at the earlier (+11)",
    schedule: daily(1, 45, "Australia/Lord_Howe"),
    from: "2026-04-04T00:00:00Z",
    expected: ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]
  },
  {
    name: "Lord Howe daily 02:15 in the 30-minute gap fires at 02:45 (+11)",
    schedule: daily(2, 15, "Australia/Lord_Howe"),
    from: "2026-10-03T00:00:00Z",
    expected: ["2026-10-03T15:45:00Z", "2026-10-04T15:15:00Z"]
  },

  // Pacific/Apia skipped 2011-12-30 entirely (-10 -> +14 at local midnight)
  {
    name: "Apia daily 09:00 across the skipped day: one fire per existing date",
    schedule: daily(9, 0, "Pacific/Apia"),
    from: "2011-12-29T12:00:00Z",
    expected: ["2011-12-29T19:00:00Z", "2011-12-30T19:00:00Z", "2011-12-31T19:00:00Z"]
  },
  {
    name: "Apia weekly Friday: the skipped Friday has no slot",
    schedule: weekly(5, 9, 0, "Pacific/Apia"),
    from: "2011-12-24T00:00:00Z",
    expected: ["2012-01-05T19:00:00Z", "2012-01-12T19:00:00Z"]
  },
  {
    name: "Apia weekly Saturday right after the skipped day",
    schedule: weekly(6, 9, 0, "Pacific/Apia"),
    from: "2011-12-29T12:00:00Z",
    expected: ["2011-12-30T19:00:00Z", "2012-01-06T19:00:00Z"]
  },

  // Antarctica/Troll: two-hour shifts. 2026-03-29 01:00Z +00 -> +02; 2026-10-25 01:00Z +02 -> +00
  {
    name: "Troll daily 02:00 in the two-hour gap fires 04:00 (+02)",
    schedule: daily(2, 0, "Antarctica/Troll"),
    from: "2026-03-28T12:00:00Z",
    expected: ["2026-03-29T02:00:00Z", "2026-03-30T00:00:00Z"]
  },
  {
    name: "Troll daily 02:00 in the two-hour overlap fires at the earlier (+02)",
    schedule: daily(2, 0, "Antarctica/Troll"),
    from: "2026-10-24T12:00:00Z",
    expected: ["2026-10-25T00:00:00Z", "2026-10-26T02:00:00Z"]
  },

  // America/Nuuk: 2026-03-28 23:00 (-02) -> 00:00 (-01); 2026-10-24 24:00 (-01) -> 23:00 (-02)
  {
    name: "Nuuk daily 23:30: the 28th's slot fires 00:30 on the 29th, and the 29th's own too",
    schedule: daily(23, 30, "America/Nuuk"),
    from: "2026-03-27T12:00:00Z",
    expected: ["2026-03-28T01:30:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"]
  },
  {
    name: "Nuuk daily 23:30 restarted at 00:10 on the 29th still fires the 28th's slot",
    schedule: daily(23, 30, "America/Nuuk"),
    from: "2026-03-29T01:10:00Z",
    expected: ["2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"]
  },
  {
    name: "Nuuk daily 23:30 in the repeated hour fires at the earlier (-01)",
    schedule: daily(23, 30, "America/Nuuk"),
    from: "2026-10-24T12:00:00Z",
    expected: ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
  },
  {
    name: "Nuuk weekly Saturday 23:30 in the gap belongs to Saturday",
    schedule: weekly(6, 23, 30, "America/Nuuk"),
    from: "2026-03-27T12:00:00Z",
    expected: ["2026-03-29T01:30:00Z", "2026-04-05T00:30:00Z"]
  },

  // Africa/Cairo: 2026-04-24 00:00 (+02) -> 01:00 (+03); 2026-10-29 24:00 (+03) -> 23:00 (+02)
  {
    name: "Cairo daily 00:30 in the midnight gap fires 01:30 (+03)",
    schedule: daily(0, 30, "Africa/Cairo"),
    from: "2026-04-23T12:00:00Z",
    expected: ["2026-04-23T22:30:00Z", "2026-04-24T21:30:00Z"]
  },
  {
    name: "Cairo daily 23:30 on 2026-10-29 fires at the earlier (+03)",
    schedule: daily(23, 30, "Africa/Cairo"),
    from: "2026-10-29T12:00:00Z",
    expected: ["2026-10-29T20:30:00Z", "2026-10-30T21:30:00Z"]
  },
  {
    name: "Cairo daily 00:30 after the midnight fall back",
    schedule: daily(0, 30, "Africa/Cairo"),
    from: "2026-10-28T12:00:00Z",
    expected: ["2026-10-28T21:30:00Z", "2026-10-29T22:30:00Z"]
  },

  // Aliases and UTC spellings
  {
    name: "Asia/Calcutta is Asia/Kolkata (+05:30)",
    schedule: daily(9, 0, "Asia/Calcutta"),
    from: "2026-06-01T00:00:00Z",
    expected: ["2026-06-01T03:30:00Z"]
  },
  {
    name: "Asia/Kathmandu (+05:45)",
    schedule: daily(0, 0, "Asia/Kathmandu"),
    from: "2026-06-01T00:00:00Z",
    expected: ["2026-06-01T18:15:00Z"]
  },
  {
    name: "Pacific/Kiritimati (+14)",
    schedule: daily(0, 0, "Pacific/Kiritimati"),
    from: "2026-06-01T00:00:00Z",
    expected: ["2026-06-01T10:00:00Z"]
  },

  // Interval
  {
    name: "Interval 5 minutes",
    schedule: Schedule.interval({ every: "5 minutes" }),
    from: "2026-01-01T00:00:00.123Z",
    expected: ["2026-01-01T00:05:00.123Z", "2026-01-01T00:10:00.123Z"]
  },
  {
    name: "Interval 1 hour over the New York fall-back night is 3,600 s of real time",
    schedule: Schedule.interval({ every: "1 hour" }),
    from: "2026-11-01T04:30:00Z",
    expected: ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"]
  },
  {
    name: "Interval of 1 ms",
    schedule: Schedule.interval({ every: 1 }),
    from: "2026-01-01T00:00:00Z",
    expected: ["2026-01-01T00:00:00.001Z"]
  }
]

describe("Schedule.next", () => {
  it.each(rows)("$name", ({ expected, from, schedule }) => {
    const got: Array<string> = []
    let t = new Date(from)
    for (let i = 0; i < expected.length; i++) {
      t = Schedule.next(schedule, t)
      got.push(t.toISOString())
    }
    expect(got).toEqual(expected.map((e) => new Date(e).toISOString()))
  })

  it("rejects an invalid `from`", () => {
    expect(() => Schedule.next(daily(9, 0), new Date(Number.NaN))).toThrow(/invalid Date/)
  })
})

describe("Schedule.next does not depend on today's date", () => {
  it("resolves the New York fall-back 01:30 the same whatever Luxon believes 'now' is", () => {
    const original = Settings.now
    const s = daily(1, 30, "America/New_York")
    const from = new Date("2026-10-31T12:00:00Z")
    try {
      const results = [Date.UTC(2026, 6, 1), Date.UTC(2026, 11, 1), Date.UTC(2031, 1, 1)].map((today) => {
        Settings.now = () => today
        return Schedule.next(s, from).toISOString()
      })
      expect(results).toEqual(["2026-11-01T05:30:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-01T05:30:00.000Z"])
    } finally {
      Settings.now = original
    }
  })
})
