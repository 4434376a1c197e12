import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Layer } from "effect"
import * as DurationInput from "../../src/domain/DurationInput.js"
import { InvalidConfigError, QueueItem, Runner, SchedulerConfig } from "../../src/index.js"
import { TestRunner } from "../../src/testing.js"

describe("SchedulerConfig.withDefaults", () => {
  it("fills every default", () => {
    const c = SchedulerConfig.withDefaults()
    expect(c.enabled).toBe(true)
    expect(Duration.toMillis(c.interval)).toBe(60_000)
    expect(c.batchSize).toBe(20)
    expect(c.workers).toBe(1)
    expect(c.retryAttempts).toBe(3)
    expect(Duration.toMillis(c.retryBackoff)).toBe(60_000)
    expect(Duration.toMillis(c.retryBackoffMax)).toBe(3_600_000)
    expect(c.rateLimit).toBe(0)
    expect(Duration.toMillis(c.timeout)).toBe(15 * 60_000)
    expect(c.missedSlots).toBe("latest")
  })

  it("turns a non-positive interval or retry backoff into one minute", () => {
    for (const bad of [0, -1, Number.NaN, "-5 seconds", Duration.zero, Duration.infinity] as const) {
      const c = SchedulerConfig.withDefaults({
        interval: bad as Duration.DurationInput,
        retryBackoff: bad as Duration.DurationInput
      })
      expect(Duration.toMillis(c.interval)).toBe(60_000)
      expect(Duration.toMillis(c.retryBackoff)).toBe(60_000)
    }
  })

  it("keeps valid values, including zero retries", () => {
    const c = SchedulerConfig.withDefaults({
      enabled: false,
      interval: "5 seconds",
      batchSize: 100,
      workers: 4,
      retryAttempts: 0,
      retryBackoff: 250,
      rateLimit: 10,
      missedSlots: "skip"
    })
    expect(c).toMatchObject({
      enabled: false,
      batchSize: 100,
      workers: 4,
      retryAttempts: 0,
      rateLimit: 10,
      missedSlots: "skip"
    })
    expect(Duration.toMillis(c.interval)).toBe(5_000)
    expect(Duration.toMillis(c.retryBackoff)).toBe(250)
  })

  it("replaces non-positive or fractional counts by their defaults", () => {
    const c = SchedulerConfig.withDefaults({ batchSize: 0, workers: -2, retryAttempts: -1, rateLimit: -3 })
    expect(c).toMatchObject({ batchSize: 20, workers: 1, retryAttempts: 3, rateLimit: 0 })
    expect(SchedulerConfig.withDefaults({ workers: 2.5 }).workers).toBe(1)
  })

  it("configFromRoot copies the root's scheduler section", () => {
    const root = { scheduler: { workers: 8, interval: "10 seconds" as const }, http: { port: 80 } }
    const c = SchedulerConfig.configFromRoot(root)
    expect(c.workers).toBe(8)
    expect(Duration.toMillis(c.interval)).toBe(10_000)
    expect(SchedulerConfig.configFromRoot({})).toEqual(SchedulerConfig.withDefaults())
    // A copy: changing the root afterwards changes nothing.
    root.scheduler.workers = 1
    expect(c.workers).toBe(8)
  })
})

describe("DurationInput.parse", () => {
  it.each([
    ["500ms", 500],
    ["4s", 4_000],
    ["4 s", 4_000],
    ["10m", 600_000],
    ["1h", 3_600_000],
    ["1.5h", 5_400_000],
    ["2d", 172_800_000],
    ["1w", 604_800_000],
    ["30 seconds", 30_000],
    [" 2 minutes ", 120_000],
    ["1 minute", 60_000],
    ["10 Sec", 10_000],
    ["250 millis", 250],
    [250, 250],
    [2_000_000_000n, 2_000],
    [[3, 500_000_000], 3_500],
    [Duration.seconds(7), 7_000]
  ] as const)("reads %s as %i ms", (input, ms) => {
    const parsed = DurationInput.parse(input)
    expect(Either.isRight(parsed) && Duration.toMillis(parsed.right)).toBe(ms)
  })

  it.each([
    ["4 sekunds", "not a duration"],
    ["soon", "not a duration"],
    ["", "not a duration"],
    ["5", "not a duration"],
    ["s", "not a duration"],
    ["1h30m", "not a duration"],
    [Number.NaN, "not a duration"],
    [{}, "not a duration"],
    [null, "not a duration"],
    [true, "not a duration"],
    [0, "not positive"],
    [-5, "not positive"],
    ["0s", "not positive"],
    ["-5 seconds", "not positive"],
    ["-4s", "not positive"],
    [0n, "not positive"],
    [Duration.zero, "not positive"],
    [Number.POSITIVE_INFINITY, "not finite"],
    [Duration.infinity, "not finite"]
  ] as const)("rejects %s: %s", (input, problem) => {
    expect(DurationInput.parse(input)).toEqual(Either.left(problem))
  })
})

describe("SchedulerConfig.validate", () => {
  it("names the field and the value of a duration it cannot read", () => {
    const result = SchedulerConfig.validate({ leaseDuration: "4 sekunds" as DurationInput.Input })
    expect(result).toEqual(
      Either.left(
        new InvalidConfigError({
          field: "leaseDuration",
          value: "4 sekunds",
          message: `leaseDuration: "4 sekunds" is not a duration (use e.g. "30 seconds" or "30s")`
        })
      )
    )
  })

  it.each([
    ["interval", 0, `interval: 0 is not a positive duration`],
    ["retryBackoff", -5, `retryBackoff: -5 is not a positive duration`],
    ["retryBackoffMax", Number.NaN, `retryBackoffMax: NaN is not a duration`],
    ["timeout", Number.POSITIVE_INFINITY, `timeout: Infinity is not a finite duration`],
    ["gracePeriod", "-1s", `gracePeriod: "-1s" is not a positive duration`],
    ["heartbeatInterval", Duration.infinity, `heartbeatInterval: Infinity is not a finite duration`],
    ["leaseDuration", "x".repeat(500), `leaseDuration: "${"x".repeat(76)}... is not a duration`]
  ] as const)("rejects %s = %j with one clear message", (field, value, message) => {
    const result = SchedulerConfig.validate({ [field]: value as DurationInput.Input })
    expect(Either.isLeft(result) && result.left.field).toBe(field)
    expect(Either.isLeft(result) && result.left.message).toBe(`${message} (use e.g. "30 seconds" or "30s")`)
  })

  it("reads the short forms a user types, and keeps absent values at their defaults", () => {
    const result = SchedulerConfig.validate({ leaseDuration: "4s", interval: "500ms", timeout: "2 m" })
    expect(Either.isRight(result)).toBe(true)
    const config = Either.getOrThrow(result)
    expect(Duration.toMillis(config.leaseDuration)).toBe(4_000)
    expect(Duration.toMillis(config.interval)).toBe(500)
    expect(Duration.toMillis(config.timeout)).toBe(120_000)
    expect(config.gracePeriod).toEqual(SchedulerConfig.defaults.gracePeriod)
    expect(SchedulerConfig.validate({})).toEqual(Either.right(SchedulerConfig.withDefaults()))
  })

  it("keeps the documented fallbacks of counts", () => {
    const config = Either.getOrThrow(SchedulerConfig.validate({ batchSize: 0, workers: -3, retryAttempts: 1.5 }))
    expect(config).toMatchObject({ batchSize: 20, workers: 1, retryAttempts: 3 })
  })

  it('withDefaults reads the short forms too (no more silent 30 s for "4s")', () => {
    expect(Duration.toMillis(SchedulerConfig.withDefaults({ leaseDuration: "4s" }).leaseDuration)).toBe(4_000)
    expect(Duration.toMillis(SchedulerConfig.withDefaults({ interval: "500ms" }).interval)).toBe(500)
  })

  it.effect("a runner is not built on a bad duration; a good short form reaches its config", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Layer.build(TestRunner.layer({ leaseDuration: "4 sekunds" as DurationInput.Input })).pipe(Effect.scoped)
      )
      expect(error).toBeInstanceOf(InvalidConfigError)
      expect(error.field).toBe("leaseDuration")
      const runner = yield* Effect.provide(Runner.Runner, TestRunner.layer({ leaseDuration: "4s", gracePeriod: "1s" }))
      expect(Duration.toMillis(runner.config.leaseDuration)).toBe(4_000)
    })
  )
})

describe("SchedulerConfig retention", () => {
  it("is off by default, decodes ages and counts, and validate refuses a bad one naming it", () => {
    expect(SchedulerConfig.withDefaults({}).retention).toEqual({
      processedItems: undefined,
      jobRuns: undefined,
      every: Duration.minutes(10)
    })
    const on = SchedulerConfig.withDefaults({
      retention: { processedItems: { maxAge: "30d", keepLast: 100 }, jobRuns: { keepLast: 5 }, every: "1h" }
    }).retention
    expect(on.processedItems).toEqual({ maxAge: Duration.days(30), keepLast: 100 })
    expect(on.jobRuns).toEqual({ maxAge: undefined, keepLast: 5 })
    expect(on.every).toEqual(Duration.hours(1))
    const badAge = SchedulerConfig.validate({
      retention: { processedItems: { maxAge: "5 sekunds" as DurationInput.Input } }
    })
    expect(Either.isLeft(badAge) && badAge.left.message).toBe(
      'retention.processedItems.maxAge: "5 sekunds" is not a duration (use e.g. "30 seconds" or "30s")'
    )
    const badCount = SchedulerConfig.validate({ retention: { jobRuns: { keepLast: -1 } } })
    expect(Either.isLeft(badCount) && badCount.left.message).toBe(
      "retention.jobRuns.keepLast: -1 is not a count (a whole number, 0 or more)"
    )
  })
})

describe("SchedulerConfig.retryDelay", () => {
  const c = SchedulerConfig.withDefaults({ retryBackoff: "1 minute", retryBackoffMax: "5 minutes" })
  it("doubles per retry, capped, times the jitter clamped to [0.9, 1.1]", () => {
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 1, 1))).toBe(60_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 2, 1))).toBe(120_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 3, 1))).toBe(240_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 4, 1))).toBe(300_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 10, 1))).toBe(300_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 1, 0.9))).toBe(54_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 1, 1.1))).toBe(66_000)
    expect(Duration.toMillis(SchedulerConfig.retryDelay(c, 1, 5))).toBe(66_000)
  })
})

describe("QueueItem normalisation", () => {
  it.each([
    [1, 1],
    [3, 3],
    [-1, -1],
    [0, 1],
    [-2, 1],
    [-100, 1],
    [2.5, 1],
    [null, 1],
    [undefined, 1]
  ])("maxRuns %s is stored as %s", (input, expected) => {
    expect(QueueItem.normalizeMaxRuns(input)).toBe(expected)
  })

  it.each([
    [0, 0],
    [1, 1],
    [2, 0],
    [-1, 0],
    [null, 0]
  ])("thread %s is stored as %s", (input, expected) => {
    expect(QueueItem.normalizeThread(input)).toBe(expected)
  })
})

describe("SchedulerConfig.leaseTimes", () => {
  it("derives every lease time once: renew at a third, give a renewal up at a sixth, a tenth of trust margin, a stop's step a third", () => {
    expect(SchedulerConfig.leaseTimes(SchedulerConfig.withDefaults({ leaseDuration: "30 seconds" }))).toEqual({
      leaseMs: 30_000,
      renewEveryMs: 10_000,
      renewalTimeoutMs: 5_000,
      trustMarginMs: 3_000,
      freshnessMs: 10_000,
      stopStepMs: 10_000
    })
    // Never zero, however short the lease.
    expect(SchedulerConfig.leaseTimes(SchedulerConfig.withDefaults({ leaseDuration: 5 }))).toMatchObject({
      renewEveryMs: 1,
      renewalTimeoutMs: 1,
      trustMarginMs: 1,
      stopStepMs: 1
    })
  })
})
