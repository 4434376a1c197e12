/**
 * Prints the next five fire times of a few schedules in several zones, each across a DST change (or stranger),
 * in local time and UTC. Run it with `npm start`.
 */
import { DateTime } from "luxon"
import { Schedule } from "../src/index.js"

interface Example {
  readonly schedule: Schedule.Schedule
  readonly from: string
  readonly why: string
}

const examples: ReadonlyArray<Example> = [
  {
    schedule: Schedule.daily({ hour: 2, minute: 30, tz: "America/New_York" }),
    from: "2026-03-06T12:00:00Z",
    why: "spring forward: 02:30 does not exist on 2026-03-08"
  },
  {
    schedule: Schedule.daily({ hour: 1, minute: 30, tz: "America/New_York" }),
    from: "2026-10-30T12:00:00Z",
    why: "fall back: 01:30 happens twice on 2026-11-01"
  },
  {
    schedule: Schedule.weekly({ weekday: 7, hour: 2, minute: 30, tz: "Europe/Berlin" }),
    from: "2026-03-15T12:00:00Z",
    why: "weekly on Sundays across Berlin's spring change"
  },
  {
    schedule: Schedule.daily({ hour: 23, minute: 30, tz: "America/Nuuk" }),
    from: "2026-03-26T12:00:00Z",
    why: "midnight is skipped: the 28th's slot lands on the 29th"
  },
  {
    schedule: Schedule.daily({ hour: 2, minute: 15, tz: "Australia/Lord_Howe" }),
    from: "2026-10-02T12:00:00Z",
    why: "a 30-minute DST shift"
  },
  {
    schedule: Schedule.daily({ hour: 9, minute: 0, tz: "Pacific/Apia" }),
    from: "2011-12-27T12:00:00Z",
    why: "Samoa skipped 2011-12-30 entirely"
  },
  {
    schedule: Schedule.cron("*/30 1-3 * * *", { tz: "America/New_York" }),
    from: "2026-03-08T05:00:00Z",
    why: "02:00 and 02:30 do not exist: shifted onto 03:00 and 03:30, each fired once"
  },
  {
    schedule: Schedule.cron("*/30 1-2 * * *", { tz: "America/New_York" }),
    from: "2026-11-01T04:00:00Z",
    why: "the repeated 01:00-02:00 fires once, on its first pass"
  },
  {
    schedule: Schedule.interval({ every: "1 hour" }),
    from: "2026-11-01T04:00:00Z",
    why: "an interval counts real time, whatever the clocks do"
  }
]

const zoneOf = (s: Schedule.Schedule): string => (s._tag === "Interval" ? "America/New_York" : (s.tz ?? "UTC"))

const note = (s: Schedule.Schedule, instant: Date): string => {
  if (s._tag === "Interval") return ""
  const local = DateTime.fromJSDate(instant, { zone: zoneOf(s) })
  // A cron schedule has many wall times a day; its title says which were shifted.
  if (s._tag !== "Cron" && (local.hour !== s.hour || local.minute !== s.minute)) {
    const requested = `${String(s.hour).padStart(2, "0")}:${String(s.minute).padStart(2, "0")}`
    return `${requested} did not exist: shifted by the gap`
  }
  // Did the same wall time occur again later (a repeated hour)?
  for (const hours of [0.5, 1, 2]) {
    const again = DateTime.fromMillis(instant.getTime() + hours * 3_600_000, { zone: zoneOf(s) })
    if (again.hour === local.hour && again.minute === local.minute) return "occurs twice: fired once, at the earlier"
  }
  return ""
}

interface Group {
  readonly title: string
  readonly rows: Array<readonly [local: string, utc: string, note: string]>
}

const groups: Array<Group> = examples.map((example) => {
  const rows: Group["rows"] = []
  let t = new Date(example.from)
  for (let i = 0; i < 5; i++) {
    t = Schedule.next(example.schedule, t)
    const local = DateTime.fromJSDate(t, { zone: zoneOf(example.schedule) })
    const where = example.schedule._tag === "Interval" ? " (New York)" : ""
    rows.push([
      local.toFormat("ccc yyyy-MM-dd HH:mm ZZ") + where,
      t.toISOString().replace(".000Z", "Z"),
      note(example.schedule, t)
    ])
  }
  return { title: `${Schedule.format(example.schedule)} — ${example.why}`, rows }
})

const header = ["local time", "UTC", "note"] as const
const all = [header, ...groups.flatMap((g) => g.rows)]
const width = (c: number) => Math.max(...all.map((r) => r[c]!.length))
const line = (r: ReadonlyArray<string>) => `  ${r[0]!.padEnd(width(0))}  ${r[1]!.padEnd(width(1))}  ${r[2]}`.trimEnd()

console.log("kairos — the next five fire times of a few schedules, across DST changes\n")
console.log(line(header))
for (const group of groups) {
  console.log(`\n${group.title}`)
  for (const r of group.rows) console.log(line(r))
}
