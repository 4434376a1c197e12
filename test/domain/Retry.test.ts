import { describe, expect, it } from "vitest"
import { InvalidRetryError } from "../../src/index.js"
import * as Retry from "../../src/domain/Retry.js"

describe("Retry.policy", () => {
  it("reads attempts and a backoff written as a duration (fixed), or with its type", () => {
    expect(Retry.policy({ attempts: 3, backoff: "30s" })).toEqual({
      attempts: 3,
      backoffMs: 30_000,
      exponential: false,
      maxBackoffMs: 30_000
    })
    expect(Retry.policy({ attempts: 2, backoff: { type: "fixed", delay: 500 } })).toMatchObject({ backoffMs: 500 })
    expect(Retry.policy({ attempts: 4, backoff: { type: "exponential", delay: "2 seconds", max: "1m" } })).toEqual({
      attempts: 4,
      backoffMs: 2_000,
      exponential: true,
      maxBackoffMs: 60_000
    })
    expect(Retry.policy({ attempts: 1, backoff: 0 })).toMatchObject({ backoffMs: 0 })
  })

  it("defaults to exponential from a second, at most an hour", () => {
    expect(Retry.policy({ attempts: 5 })).toEqual({
      attempts: 5,
      backoffMs: 1_000,
      exponential: true,
      maxBackoffMs: 3_600_000
    })
    // A first delay above the default max raises the max with it.
    expect(Retry.policy({ attempts: 5, backoff: { type: "exponential", delay: "2h" } })).toMatchObject({
      maxBackoffMs: 7_200_000
    })
  })

  it.each([
    [{ attempts: 0 }, "attempts", "attempts must be a whole number from 1 to 1000, got 0"],
    [{ attempts: 1.5 }, "attempts", "got 1.5"],
    [{ attempts: 1001 }, "attempts", "got 1001"],
    [{ attempts: "3" }, "attempts", 'got "3"'],
    [
      { attempts: 2, backoff: "soon" },
      "backoff",
      'backoff must be a duration such as "30s", "5m" or a number of milliseconds, got "soon"'
    ],
    [{ attempts: 2, backoff: -5 }, "backoff", "got -5"],
    [{ attempts: 2, backoff: "400d" }, "backoff", "backoff must be at most a year"],
    [
      { attempts: 2, backoff: { type: "linear", delay: "1s" } },
      "backoff",
      'backoff type must be "fixed" or "exponential"'
    ],
    [
      { attempts: 2, backoff: { type: "exponential", delay: "1m", max: "1s" } },
      "max",
      "max must be at least the first delay"
    ]
  ])("refuses %j, naming the field", (input, field, message) => {
    let thrown: unknown
    try {
      Retry.policy(input as unknown as Retry.Input)
    } catch (e) {
      thrown = e
    }
    expect(thrown).toBeInstanceOf(InvalidRetryError)
    expect(thrown).toMatchObject({ field })
    expect((thrown as InvalidRetryError).message).toContain(message)
    expect(Retry.parse(input as unknown as Retry.Input)._tag).toBe("Left")
  })
})

describe("Retry.delayMs and Retry.settle", () => {
  const exp = Retry.policy({ attempts: 10, backoff: { type: "exponential", delay: "1s", max: "10s" } })

  it("doubles per earlier failure up to the max; fixed stays fixed; a huge count does not overflow", () => {
    expect([0, 1, 2, 3, 4].map((n) => Retry.delayMs(exp, n))).toEqual([1_000, 2_000, 4_000, 8_000, 10_000])
    expect(Retry.delayMs(exp, 10_000)).toBe(10_000)
    expect(Retry.delayMs(Retry.policy({ attempts: 3, backoff: "7s" }), 2)).toBe(7_000)
  })

  it("one execution at a time: retries while attempts last, then uses up the run and resets", () => {
    const p = Retry.policy({ attempts: 3, backoff: "5s" })
    expect(Retry.settle(p, 0, 1, 1)).toEqual({ retried: 1, runsUsed: 0, failuresAfter: 1, delayMs: 5_000 })
    expect(Retry.settle(p, 1, 1, 1)).toEqual({ retried: 1, runsUsed: 0, failuresAfter: 2, delayMs: 5_000 })
    expect(Retry.settle(p, 2, 1, 1)).toEqual({ retried: 0, runsUsed: 1, failuresAfter: 0, delayMs: 0 })
    expect(Retry.settle(p, 2, 0, 1)).toEqual({ retried: 0, runsUsed: 1, failuresAfter: 0, delayMs: 0 })
    expect(Retry.settle(Retry.none, 0, 1, 1)).toEqual({ retried: 0, runsUsed: 1, failuresAfter: 0, delayMs: 0 })
  })

  it("repetitions recorded together: the first failures retry, the rest use up runs", () => {
    const p = Retry.policy({ attempts: 2, backoff: { type: "exponential", delay: "1s" } })
    expect(Retry.settle(p, 0, 2, 3)).toEqual({ retried: 1, runsUsed: 2, failuresAfter: 0, delayMs: 1_000 })
    expect(Retry.settle(exp, 1, 3, 3)).toEqual({ retried: 3, runsUsed: 0, failuresAfter: 4, delayMs: 8_000 })
  })
})

describe("Retry.fromColumns", () => {
  it("reads an item's columns as plain SQL may leave them", () => {
    const cols = { attempts: null, backoffMs: null, exponential: null, maxBackoffMs: null }
    expect(Retry.fromColumns(cols)).toBeNull()
    expect(Retry.fromColumns({ ...cols, attempts: 3 })).toEqual(Retry.policy({ attempts: 3 }))
    expect(Retry.fromColumns({ ...cols, attempts: 3, backoffMs: 2_000 })).toEqual(
      Retry.policy({ attempts: 3, backoff: "2s" })
    )
    expect(Retry.fromColumns({ ...cols, attempts: 3, backoffMs: 2_000, exponential: true })).toEqual(
      Retry.policy({ attempts: 3, backoff: { type: "exponential", delay: "2s" } })
    )
  })

  it("describes a policy in words", () => {
    expect(Retry.describe(Retry.none)).toBe("no retry")
    expect(Retry.describe(Retry.policy({ attempts: 3, backoff: "30s" }))).toBe("3 attempts, backoff 30s")
    expect(Retry.describe(Retry.policy({ attempts: 5 }))).toBe("5 attempts, backoff 1s doubling to 1h")
  })
})
