import { describe, expect, it } from "@effect/vitest"
import { Duration } from "effect"
import { QueueItem, SchedulerConfig } from "../../src/index.js"

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
