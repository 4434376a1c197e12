/**
 * How to test your own recurring job: no database, no real waiting. The fake clock moves months in milliseconds,
 * and the fake store shows every run the runner recorded.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Runner, Schedule } from "kairos"
import { FakeClock, FakeStore, TestRunner } from "kairos/testing"

// Your code: a handler that sends a digest (here it only returns what it would send).
const sendDigest = (job: { readonly payload: string }) =>
  Effect.succeed({ sentTo: JSON.parse(job.payload).to as string })

describe("the morning digest", () => {
  it.scoped("goes out at 08:00 Paris time every day, also across the DST change", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-03-27T00:00:00Z")
      const runner = yield* Runner.Runner
      const store = yield* FakeStore.FakeStore

      yield* runner.register("digest", sendDigest)
      yield* store.addJob({
        name: "morning-digest",
        taskType: "digest",
        schedule: Schedule.daily({ hour: 8, minute: 0, tz: "Europe/Paris" }),
        payload: JSON.stringify({ to: "team@example.com" })
      })
      yield* runner.start
      yield* FakeClock.advance("4 days")

      const runs = yield* store.runsOf("morning-digest")
      expect(runs.map((r) => r.scheduledFor.toISOString())).toEqual([
        "2026-03-27T07:00:00.000Z", // 08:00 CET
        "2026-03-28T07:00:00.000Z",
        "2026-03-29T06:00:00.000Z", // 08:00 CEST: the clocks moved that night
        "2026-03-30T06:00:00.000Z"
      ])
      expect(runs.every((r) => r.status === "success")).toBe(true)
      expect(runs[0]!.output).toBe(`{"sentTo":"team@example.com"}`)
    }).pipe(Effect.provide(TestRunner.layer()))
  )

  it.scoped("is retried after a failure, with backoff", () =>
    Effect.gen(function* () {
      yield* FakeClock.set("2026-06-01T00:00:00Z")
      const runner = yield* Runner.Runner
      const store = yield* FakeStore.FakeStore
      let calls = 0
      yield* runner.register("digest", async () => {
        calls++
        if (calls === 1) throw new Error("mail server down")
        return "sent"
      })
      yield* store.addJob({ name: "digest", taskType: "digest", schedule: Schedule.daily({ hour: 8, minute: 0 }) })
      yield* runner.start
      yield* FakeClock.advanceTo("2026-06-01T09:00:00Z")

      const runs = yield* store.runsOf("digest")
      expect(runs.map((r) => [r.attempt, r.status, r.error])).toEqual([
        [1, "failed", "mail server down"],
        [2, "success", null]
      ])
    }).pipe(Effect.provide(TestRunner.layer({ retryBackoff: "5 minutes" })))
  )
})
