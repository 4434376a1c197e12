/**
 * The dashboard's pacing of live refreshes (src/adapters/dashboard/Paced.ts) under the test clock, over a load whose
 * time and answer the test sets: a refresh is given the last read while that read took less than a twentieth of its
 * age (at most a minute), shares a read in progress, and never gets a failed or cut-short one; a navigation reads
 * afresh; `forget` drops every read; the pages kept are bounded.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, TestClock } from "effect"
import * as Paced from "../../src/adapters/dashboard/Paced.js"

/** A load that takes `ms` of the test clock and answers the number of loads so far, or fails when `failing`. */
const loads = (ms: number) => {
  const state = { count: 0, failing: false, ms }
  const load = Effect.gen(function* () {
    state.count++
    const n = state.count
    yield* Effect.sleep(state.ms)
    if (state.failing) return yield* Effect.fail(`load ${n} failed`)
    return n
  })
  return { state, load }
}

const options = { share: 0.05, maxHoldMs: 60_000, minHoldMs: 1000, pages: 3 }

/** Runs `self` to its end, moving the test clock by `ms` for what it sleeps. */
const settled = <A, E>(self: Effect.Effect<A, E>, ms: number) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(self)
    yield* TestClock.adjust(ms)
    return yield* Fiber.join(fiber)
  })

describe("live refreshes paced by what a page costs", () => {
  it.effect("are given the last read until its time is a twentieth of its age, then read again", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load, state } = loads(500)
      const first = yield* settled(pages.read("/", false, load), 500)
      expect(first).toEqual({ value: 1, at: 0, ms: 500 })
      expect(pages.holdMs(500)).toBe(10_000)
      // 9.9 s after the read began: the same read, no load.
      yield* TestClock.adjust(9_400)
      expect((yield* pages.read("/", true, load)).value).toBe(1)
      expect(state.count).toBe(1)
      // 10 s after: read again.
      yield* TestClock.adjust(100)
      expect((yield* settled(pages.read("/", true, load), 500)).value).toBe(2)
      // Each path and query is a page of its own.
      expect((yield* settled(pages.read("/queue", true, load), 500)).value).toBe(3)
    })
  )

  it.effect("a navigation (no reuse) reads afresh every time, and its read serves the refreshes after it", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load, state } = loads(500)
      yield* settled(pages.read("/", false, load), 500)
      expect((yield* settled(pages.read("/", false, load), 500)).value).toBe(2)
      expect((yield* pages.read("/", true, load)).value).toBe(2)
      expect(state.count).toBe(2)
    })
  )

  it.effect("a read under 50 ms is not held (pages refresh once a second at most); a slow one at most a minute", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      expect(pages.holdMs(49)).toBe(0)
      expect(pages.holdMs(50)).toBe(1000)
      expect(pages.holdMs(5_000)).toBe(60_000)
      const { load } = loads(10)
      yield* settled(pages.read("/", false, load), 10)
      expect((yield* settled(pages.read("/", true, load), 10)).value).toBe(2)
    })
  )

  it.effect("refreshes arriving while a read is in progress share it: one load", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load, state } = loads(500)
      const reader = yield* Effect.fork(pages.read("/", false, load))
      yield* TestClock.adjust(100)
      const refreshes = yield* Effect.fork(Effect.all([pages.read("/", true, load), pages.read("/", true, load)]))
      yield* TestClock.adjust(400)
      expect((yield* Fiber.join(reader)).value).toBe(1)
      expect((yield* Fiber.join(refreshes)).map((r) => r.value)).toEqual([1, 1])
      expect(state.count).toBe(1)
    })
  )

  it.effect("a failed read fails for those who await it and is not kept: the next refresh reads again", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load, state } = loads(500)
      state.failing = true
      const reader = yield* Effect.fork(pages.read("/", false, load))
      yield* TestClock.adjust(100)
      const waiting = yield* Effect.fork(pages.read("/", true, load))
      yield* TestClock.adjust(400)
      expect(yield* Fiber.await(reader)).toEqual(Exit.fail("load 1 failed"))
      expect(yield* Fiber.await(waiting)).toEqual(Exit.fail("load 1 failed"))
      state.failing = false
      expect((yield* settled(pages.read("/", true, load), 500)).value).toBe(2)
    })
  )

  it.effect("a read cut short (its request went away) is not given to those who awaited it: they read their own", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load, state } = loads(500)
      const reader = yield* Effect.fork(pages.read("/", false, load))
      yield* TestClock.adjust(100)
      const waiting = yield* Effect.fork(pages.read("/", true, load))
      yield* TestClock.adjust(100)
      yield* Fiber.interrupt(reader)
      yield* TestClock.adjust(500)
      expect((yield* Fiber.join(waiting)).value).toBe(2)
      expect(state.count).toBe(2)
      // And the value it read serves the next refresh.
      expect((yield* pages.read("/", true, load)).value).toBe(2)
    })
  )

  it.effect("forget drops every read (an action changed something): the next refresh of any page reads afresh", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load } = loads(500)
      yield* settled(pages.read("/", false, load), 500)
      yield* settled(pages.read("/queue", false, load), 500)
      yield* pages.forget
      expect((yield* settled(pages.read("/", true, load), 500)).value).toBe(3)
      expect((yield* settled(pages.read("/queue", true, load), 500)).value).toBe(4)
    })
  )

  it.effect("keeps at most `pages` reads: the oldest goes first", () =>
    Effect.gen(function* () {
      const pages = Paced.make<number, string>(options)
      const { load } = loads(500)
      for (const path of ["/a", "/b", "/c", "/d"]) yield* settled(pages.read(path, false, load), 500)
      // /a was dropped for /d; /b, /c and /d are still given.
      expect((yield* pages.read("/d", true, load)).value).toBe(4)
      expect((yield* pages.read("/b", true, load)).value).toBe(2)
      expect((yield* settled(pages.read("/a", true, load), 500)).value).toBe(5)
    })
  )

  it.effect("a refresh awaiting a read in progress gets that read's value, not its own load's", () =>
    Effect.gen(function* () {
      // A load that waits for the test: the reader is in progress until the test completes it.
      const gate = yield* Deferred.make<void>()
      const pages = Paced.make<string, string>(options)
      const load = Effect.as(Deferred.await(gate), "ready")
      const reader = yield* Effect.fork(pages.read("/", false, load))
      yield* TestClock.adjust(1)
      const waiting = yield* Effect.fork(pages.read("/", true, Effect.succeed("own")))
      yield* TestClock.adjust(1)
      yield* Deferred.succeed(gate, undefined)
      expect((yield* Fiber.join(reader)).value).toBe("ready")
      expect((yield* Fiber.join(waiting)).value).toBe("ready")
    })
  )
})
