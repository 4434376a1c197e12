/**
 * Flow control's contract: the Limits port and the claim under limits (a concurrency limit per task type or per
 * group, ordered groups, a shared rate), one suite run against the memory adapters and Postgres. Each test uses task
 * types of its own.
 */
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, Either, type Layer, Option } from "effect"
import { InvalidLimitError, Limits, QueueStore, type QueueClaim, WakeUps } from "../../src/index.js"

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
const type = (label: string) => `${label}-${Math.random().toString(36).slice(2, 10)}`
/** Claim options at `now` for limited types: leases for 30 s. */
const claimOpts = (taskTypes: ReadonlyArray<string>, limit = 10, now = at(0), owner = "w1") => ({
  limit,
  taskTypes,
  owner,
  leaseUntil: new Date(now.getTime() + 30_000),
  now,
  repeatAfter: new Date(now.getTime() + 10_000),
  limited: taskTypes
})
const done = (claim: QueueClaim, error?: string, finishedAt = at(1)) => ({
  claim,
  result: { startedAt: at(0), finishedAt, error }
})
const payloads = (claims: ReadonlyArray<QueueClaim>) => claims.map((c) => c.item.payload).sort()

/**
 * What a store needs beside its ports: `closeWindows(taskType)` makes the type's current rate windows (its own and
 * its groups') count as past, as a day going by would. The memory store judges windows by the claim's `now` (the
 * tests then claim a day later: nothing to do); Postgres by its own clock, so its windows are moved back a day.
 */
export interface SuiteHooks<R> {
  readonly closeWindows: (taskType: string) => Effect.Effect<void, unknown, R>
}

export const suite = <R = never>(
  name: string,
  portsLayer: Layer.Layer<QueueStore | Limits | WakeUps | R, unknown>,
  hooks: SuiteHooks<R>
) =>
  layer(portsLayer, { timeout: "60 seconds", excludeTestServices: true })(`Limits contract: ${name}`, (it) => {
    it.effect("set, list and clear a type's limits; a change wakes the runners", () =>
      Effect.gen(function* () {
        const limits = yield* Limits
        const t = type("crud")
        const woken = yield* Deferred.make<void>()
        yield* Effect.scoped(
          Effect.gen(function* () {
            const wakeUps = yield* WakeUps
            yield* wakeUps.subscribe((topic) => {
              if (topic === "settings") Deferred.unsafeDone(woken, Effect.void)
            })
            const set = yield* limits.set({ taskType: t, concurrency: 3, rate: 10, per: "1 minute" })
            expect(set).toEqual({
              taskType: t,
              concurrency: 3,
              perGroup: false,
              rate: { limit: 10, perMs: 60_000 },
              ratePerGroup: false
            })
            yield* Deferred.await(woken).pipe(
              Effect.timeoutFail({ duration: "3 seconds", onTimeout: () => "no wake-up" })
            )
          })
        )
        expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([
          {
            taskType: t,
            concurrency: 3,
            perGroup: false,
            rate: { limit: 10, perMs: 60_000 },
            ratePerGroup: false
          }
        ])
        // Set again: replaced whole.
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true })
        expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([
          { taskType: t, concurrency: 1, perGroup: true, rate: null, ratePerGroup: false }
        ])
        expect(yield* limits.clear(t)).toBe(true)
        expect(yield* limits.clear(t)).toBe(false)
        expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([])
      })
    )

    it.effect("a limit that cannot be stored is one InvalidLimitError naming its field, and changes nothing", () =>
      Effect.gen(function* () {
        const limits = yield* Limits
        const t = type("bad")
        const cases = [
          [{ taskType: t, concurrency: 0 }, "concurrency"],
          [{ taskType: t, concurrency: 1.5 }, "concurrency"],
          [{ taskType: t, rate: -1 }, "rate"],
          [{ taskType: t, rate: 5, per: "soon" }, "per"],
          [{ taskType: t, per: "1s", concurrency: 2 }, "per"],
          [{ taskType: t, perGroup: true }, "perGroup"],
          // perGroup is the concurrency's scope, ratePerGroup the rate's: each needs its bound.
          [{ taskType: t, perGroup: true, rate: 5 }, "perGroup"],
          [{ taskType: t, ratePerGroup: true }, "ratePerGroup"],
          [{ taskType: t, ratePerGroup: true, concurrency: 2 }, "ratePerGroup"],
          [{ taskType: t }, "concurrency"],
          [{ taskType: "", concurrency: 1 }, "taskType"]
        ] as const
        for (const [input, field] of cases) {
          const result = yield* Effect.either(limits.set(input as Parameters<typeof limits.set>[0]))
          expect(Either.isLeft(result), JSON.stringify(input)).toBe(true)
          const error = Either.getLeft(result).pipe(Option.getOrThrow)
          expect(error).toBeInstanceOf(InvalidLimitError)
          expect((error as InvalidLimitError).field).toBe(field)
        }
        const messageOf = (input: Parameters<typeof limits.set>[0]) =>
          Effect.flip(limits.set(input)).pipe(Effect.map((e) => e.message))
        expect(yield* messageOf({ taskType: t, perGroup: true, rate: 5 })).toBe(
          "perGroup bounds the concurrency of each group: give concurrency"
        )
        expect(yield* messageOf({ taskType: t, ratePerGroup: true, concurrency: 2 })).toBe(
          "ratePerGroup bounds the starts of each group per window: give rate"
        )
        expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([])
      })
    )

    it.effect("a concurrency limit bounds the executions holding a lease; a finished one frees its slot", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("conc")
        yield* limits.set({ taskType: t, concurrency: 3 })
        yield* q.enqueueMany(
          Array.from({ length: 8 }, (_, i) => ({ taskType: t, payload: `p${i}`, thread: 1 })),
          T0
        )
        const first = yield* q.claimBatch(claimOpts([t], 10))
        expect(first).toHaveLength(3)
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        // One finishes: one more, claimed along with its record too.
        const { claims, recorded } = yield* q.recordAndClaim([done(first[0]!)], claimOpts([t], 10))
        expect(recorded).toEqual([true])
        expect(claims).toHaveLength(1)
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        // Raised live: the new bound holds at the next claim.
        yield* limits.set({ taskType: t, concurrency: 5 })
        expect(yield* q.claimBatch(claimOpts([t], 10))).toHaveLength(2)
        yield* limits.clear(t)
      })
    )

    it.effect("a holder whose lease expired holds no slot: the limit frees it at the lease's end", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("expiry")
        yield* limits.set({ taskType: t, concurrency: 2 })
        yield* q.enqueueMany(
          Array.from({ length: 5 }, (_, i) => ({ taskType: t, payload: `p${i}`, thread: 1, maxRuns: 1 })),
          T0
        )
        expect(yield* q.claimBatch(claimOpts([t], 10, at(0), "dead"))).toHaveLength(2)
        // Still leased (30 s): nothing.
        expect(yield* q.claimBatch(claimOpts([t], 10, at(29), "live"))).toEqual([])
        // Past the dead owner's leases: two slots, without any rescue first.
        expect(yield* q.claimBatch(claimOpts([t], 10, at(31), "live"))).toHaveLength(2)
        yield* limits.clear(t)
      })
    )

    it.effect("sequential items (thread 0) stay one at a time under a larger limit", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("seq")
        yield* limits.set({ taskType: t, concurrency: 3 })
        yield* q.enqueueMany(
          Array.from({ length: 4 }, (_, i) => ({ taskType: t, payload: `s${i}`, thread: 0 })),
          T0
        )
        expect(yield* q.claimBatch(claimOpts([t], 10))).toHaveLength(1)
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        yield* limits.clear(t)
      })
    )

    it.effect("an item with a group is concurrent unless it sets thread; the group is stored", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("grp-thread")
        expect((yield* q.enqueue({ taskType: t, payload: "a", group: "g" }, T0)).thread).toBe(1)
        expect((yield* q.enqueue({ taskType: t, payload: "b", group: "g", thread: 0 }, T0)).thread).toBe(0)
        expect((yield* q.enqueue({ taskType: t, payload: "c" }, T0)).thread).toBe(0)
      })
    )

    it.effect("1 per group: each group's head runs, in priority then enqueue order; the groups side by side", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("ordered")
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true })
        yield* q.enqueueMany(
          [
            { taskType: t, payload: "a1", group: "a" },
            { taskType: t, payload: "a2", group: "a" },
            { taskType: t, payload: "b1", group: "b" },
            { taskType: t, payload: "a0", group: "a", priority: 5 },
            { taskType: t, payload: "b2", group: "b" }
          ],
          T0
        )
        const order: Array<string> = []
        let claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(payloads(claims)).toEqual(["a0", "b1"])
        for (let round = 0; round < 5 && claims.length > 0; round++) {
          for (const c of claims) order.push(c.item.payload!)
          // Nothing more while each group's head runs.
          expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
          const next = yield* q.recordAndClaim(
            claims.map((c) => done(c)),
            claimOpts([t], 10)
          )
          claims = next.claims
        }
        expect(order.filter((p) => p.startsWith("a"))).toEqual(["a0", "a1", "a2"])
        expect(order.filter((p) => p.startsWith("b"))).toEqual(["b1", "b2"])
        yield* limits.clear(t)
      })
    )

    it.effect("1 per group: a head waiting for its retry holds its group until it is cancelled", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("held")
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true })
        const head = yield* q.enqueue(
          { taskType: t, payload: "head", group: "g", retry: { attempts: 3, backoff: "1 minute" } },
          T0
        )
        yield* q.enqueue({ taskType: t, payload: "next", group: "g" }, T0)
        yield* q.enqueue({ taskType: t, payload: "other", group: "h" }, T0)
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(payloads(claims)).toEqual(["head", "other"])
        const failed = claims.find((c) => c.item.payload === "head")!
        expect(yield* q.recordResults([done(failed, "boom")])).toEqual([true])
        // The head waits a minute for its retry: its follower waits too.
        expect(yield* q.claimBatch(claimOpts([t], 10, at(2)))).toEqual([])
        expect(yield* q.cancel(head.id)).toEqual(Option.some("pending"))
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10, at(2))))).toEqual(["next"])
        yield* limits.clear(t)
      })
    )

    it.effect("N per group bounds each group; the groups share the claim", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("per-group")
        yield* limits.set({ taskType: t, concurrency: 2, perGroup: true })
        yield* q.enqueueMany(
          ["x", "y", "z"].flatMap((g) =>
            Array.from({ length: 4 }, (_, i) => ({ taskType: t, payload: `${g}${i}`, group: g }))
          ),
          T0
        )
        const claims = yield* q.claimBatch(claimOpts([t], 100))
        expect(payloads(claims)).toEqual(["x0", "x1", "y0", "y1", "z0", "z1"])
        expect(yield* q.claimBatch(claimOpts([t], 100))).toEqual([])
        yield* limits.clear(t)
      })
    )

    it.effect("N per group with items that run several times: each run holds a slot of its group until recorded", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("per-group-runs")
        yield* limits.set({ taskType: t, concurrency: 2, perGroup: true })
        // Concurrent items run 3 times each.
        yield* q.enqueueMany(
          ["x", "y"].flatMap((g) =>
            Array.from({ length: 2 }, (_, i) => ({ taskType: t, payload: `${g}${i}`, group: g, thread: 1, maxRuns: 3 }))
          ),
          T0
        )
        const runs = new Map<string, number>()
        for (let round = 0; round < 20; round++) {
          const claims = yield* q.claimBatch(claimOpts([t], 100, at(round)))
          if (claims.length === 0) break
          // Never more than 2 of a group at once, whichever of its items they are.
          for (const g of ["x", "y"]) expect(claims.filter((c) => c.item.group === g).length).toBeLessThanOrEqual(2)
          for (const c of claims) {
            // (maxRuns is what is left: an item's last run holds its lease on the item row, the runs before on rows
            // of their own.)
            expect(c.leaseId === String(-Number(c.item.id))).toBe(c.item.maxRuns === 1)
            runs.set(String(c.item.payload), (runs.get(String(c.item.payload)) ?? 0) + 1)
          }
          expect(yield* q.claimBatch(claimOpts([t], 100, at(round)))).toEqual([])
          expect(yield* q.recordResults(claims.map((c) => done(c, undefined, at(round))))).toEqual(
            claims.map(() => true)
          )
        }
        expect(Object.fromEntries(runs)).toEqual({ x0: 3, x1: 3, y0: 3, y1: 3 })
        yield* limits.clear(t)
      })
    )

    it.effect("under a limit per group, an item without a group waits (it is in no group to serve)", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("groupless")
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true })
        yield* q.enqueue({ taskType: t, payload: "none", thread: 1 }, T0)
        yield* q.enqueue({ taskType: t, payload: "in", group: "g" }, T0)
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10)))).toEqual(["in"])
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        // Cleared: it runs as any item does.
        yield* limits.clear(t)
        expect(payloads(yield* q.claimBatch({ ...claimOpts([t], 10), limited: [] }))).toEqual(["none"])
      })
    )

    it.effect("an item that waited for another keeps its group: released, it is served in that group", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("waited")
        const first = type("first")
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true })
        const a = yield* q.enqueue({ taskType: first, payload: "a" }, T0)
        const waiting = yield* q.enqueue({ taskType: t, payload: "after-a", group: "h", after: [a.id] }, T0)
        // In a group, concurrent unless it says otherwise, as any item.
        expect(waiting.thread).toBe(1)
        yield* q.enqueue({ taskType: t, payload: "g1", group: "g" }, T0)
        // g's item holds g's slot; the waiting one is not claimable yet.
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10)))).toEqual(["g1"])
        const [claimA] = yield* q.claimBatch({ ...claimOpts([first], 1), limited: [] })
        yield* q.recordResults([done(claimA!)])
        // Released in group h (an item without a group would wait under a limit per group): served beside g's.
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10)))).toEqual(["after-a"])
      })
    )

    it.effect("an item carries its group: enqueue returns it, every claim hands it to the handler, empty is none", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const plain = type("grp-plain")
        const limited = type("grp-limited")
        const first = type("grp-first")
        yield* limits.set({ taskType: limited, concurrency: 1, perGroup: true })
        const a = yield* q.enqueue({ taskType: plain, payload: "a", group: "ga" }, T0)
        expect(a.group).toBe("ga")
        expect((yield* q.enqueue({ taskType: plain, payload: "none", thread: 1 }, T0)).group).toBeNull()
        expect((yield* q.enqueue({ taskType: plain, payload: "empty", group: "", thread: 1 }, T0)).group).toBeNull()
        // Already queued under its unique key: the queued item, with its own group.
        const keyed = yield* q.enqueue({ taskType: plain, payload: "k", group: "gk", uniqueKey: `${plain}-k` }, T0)
        expect(keyed.group).toBe("gk")
        expect(
          yield* q.enqueue({ taskType: plain, payload: "k2", group: "other", uniqueKey: `${plain}-k` }, T0)
        ).toEqual(keyed)
        yield* q.enqueueMany(
          [
            { taskType: limited, payload: "l1", group: "g1" },
            { taskType: limited, payload: "l2", group: "g2" }
          ],
          T0
        )
        const prior = yield* q.enqueue({ taskType: first, payload: "first" }, T0)
        const waiting = yield* q.enqueue({ taskType: plain, payload: "w", group: "gw", after: [prior.id] }, T0)
        expect(waiting.group).toBe("gw")
        const groups = (claims: ReadonlyArray<QueueClaim>) =>
          Object.fromEntries(claims.map((c) => [c.item.payload, c.item.group]))
        // The plain claim, and the limited one.
        const plainClaims = yield* q.claimBatch({ ...claimOpts([plain], 2), limited: [] })
        expect(groups(plainClaims)).toEqual({ a: "ga", none: null })
        expect(groups(yield* q.claimBatch(claimOpts([limited], 1)))).toEqual({ l1: "g1" })
        // Claimed along with a record: one result (the next item's claim) and several.
        const next = yield* q.recordAndClaim([done(plainClaims[0]!)], { ...claimOpts([plain], 1), limited: [] })
        expect(groups(next.claims)).toEqual({ empty: null })
        const more = yield* q.recordAndClaim([done(plainClaims[1]!), done(next.claims[0]!)], claimOpts([limited], 5))
        expect(groups(more.claims)).toEqual({ l2: "g2" })
        // A waiting item, released, keeps its group on the claimed item too.
        const [claimPrior] = yield* q.claimBatch({ ...claimOpts([first], 1), limited: [] })
        yield* q.recordResults([done(claimPrior!)])
        expect(groups(yield* q.claimBatch({ ...claimOpts([plain], 5), limited: [] }))).toEqual({ k: "gk", w: "gw" })
        yield* limits.clear(limited)
      })
    )

    it.effect("a claim that does not know a type has limits (a runner yet to read them) leaves its items alone", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("unread")
        const plainType = type("plain")
        yield* limits.set({ taskType: t, concurrency: 1 })
        yield* q.enqueueMany(
          [
            { taskType: t, payload: "t1", thread: 1 },
            { taskType: t, payload: "t2", thread: 1 },
            { taskType: plainType, payload: "p1", thread: 1 }
          ],
          T0
        )
        // As the plain claim: the limited type's items stay queued.
        expect(payloads(yield* q.claimBatch({ ...claimOpts([t, plainType], 10), limited: [] }))).toEqual(["p1"])
        // Known as limited: served under its limit.
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10)))).toEqual(["t1"])
        // Cleared: the plain claim takes it again.
        yield* limits.clear(t)
        expect(payloads(yield* q.claimBatch({ ...claimOpts([t], 10), limited: [] }))).toEqual(["t2"])
      })
    )

    it.effect("a rate limit bounds the starts per window, whatever the claims ask", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("rate")
        // A day's window: the test never crosses into the next one.
        yield* limits.set({ taskType: t, rate: 3, per: "1 day" })
        yield* q.enqueueMany(
          Array.from({ length: 6 }, (_, i) => ({ taskType: t, payload: `r${i}`, thread: 1 })),
          T0
        )
        expect(yield* q.claimBatch(claimOpts([t], 2))).toHaveLength(2)
        expect(yield* q.claimBatch(claimOpts([t], 10, at(0), "w2"))).toHaveLength(1)
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        yield* limits.clear(t)
      })
    )

    it.effect(
      "a rate per group: each group starts at most N per window, the groups side by side; N again next window",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const limits = yield* Limits
          const t = type("grp-rate")
          expect(yield* limits.set({ taskType: t, rate: 2, per: "1 day", ratePerGroup: true })).toEqual({
            taskType: t,
            concurrency: null,
            perGroup: false,
            rate: { limit: 2, perMs: 86_400_000 },
            ratePerGroup: true
          })
          expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([
            {
              taskType: t,
              concurrency: null,
              perGroup: false,
              rate: { limit: 2, perMs: 86_400_000 },
              ratePerGroup: true
            }
          ])
          yield* q.enqueueMany(
            [
              ...["a", "b", "c"].flatMap((g) =>
                Array.from({ length: 3 }, (_, i) => ({ taskType: t, payload: `${g}${i}`, group: g }))
              ),
              { taskType: t, payload: "alone", thread: 1 }
            ],
            T0
          )
          // Two of each group, side by side, in one claim (no concurrency bound: all of them at once).
          const first = yield* q.claimBatch(claimOpts([t], 20))
          expect(payloads(first)).toEqual(["a0", "a1", "b0", "b1", "c0", "c1"])
          // Finished, they free no start: the window's count is spent, whoever claims.
          yield* q.recordResults(first.map((c) => done(c)))
          expect(yield* q.claimBatch(claimOpts([t], 20, at(2)))).toEqual([])
          expect(yield* q.claimBatch(claimOpts([t], 20, at(2), "w2"))).toEqual([])
          // A new group has its own count.
          yield* q.enqueueMany(
            Array.from({ length: 3 }, (_, i) => ({ taskType: t, payload: `d${i}`, group: "d" })),
            at(3)
          )
          expect(payloads(yield* q.claimBatch(claimOpts([t], 1, at(3))))).toEqual(["d0"])
          expect(payloads(yield* q.claimBatch(claimOpts([t], 20, at(3))))).toEqual(["d1"])
          expect(yield* q.claimBatch(claimOpts([t], 20, at(3)))).toEqual([])
          // The next window: each group may start two again (one is left in each; the item without a group waits).
          yield* hooks.closeWindows(t)
          expect(payloads(yield* q.claimBatch(claimOpts([t], 20, at(86_401))))).toEqual(["a2", "b2", "c2", "d2"])
          yield* limits.clear(t)
        })
    )

    it.effect("1 per group with a rate per group: each group in order, at most N starts per window each", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const t = type("grp-rate-ordered")
        yield* limits.set({ taskType: t, concurrency: 1, perGroup: true, rate: 2, per: "1 day", ratePerGroup: true })
        yield* q.enqueueMany(
          [
            ...Array.from({ length: 4 }, (_, i) => ({ taskType: t, payload: `g${i}`, group: "g" })),
            { taskType: t, payload: "h0", group: "h" }
          ],
          T0
        )
        const [g0, h0] = yield* q.claimBatch(claimOpts([t], 10))
        expect([g0!.item.payload, h0!.item.payload]).toEqual(["g0", "h0"])
        // g's head runs: its group waits (concurrency), whatever the rate has left.
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        yield* q.recordResults([done(g0!)])
        const [g1] = yield* q.claimBatch(claimOpts([t], 10, at(2)))
        expect(g1!.item.payload).toBe("g1")
        // Its second start in the window was the last: g2 waits for the next window, in order.
        yield* q.recordResults([done(g1!, undefined, at(3))])
        expect(yield* q.claimBatch(claimOpts([t], 10, at(4)))).toEqual([])
        yield* hooks.closeWindows(t)
        expect(payloads(yield* q.claimBatch(claimOpts([t], 10, at(86_401))))).toEqual(["g2"])
        yield* limits.clear(t)
      })
    )

    it.effect(
      "1 per group with a rate for the whole type (the meaning before 0024, kept): groups in order, the type's starts per window bounded",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const limits = yield* Limits
          const t = type("grp-type-rate")
          const set = yield* limits.set({ taskType: t, concurrency: 1, perGroup: true, rate: 3, per: "1 day" })
          expect(set).toEqual({
            taskType: t,
            concurrency: 1,
            perGroup: true,
            rate: { limit: 3, perMs: 86_400_000 },
            ratePerGroup: false
          })
          expect((yield* limits.list).filter((l) => l.taskType === t)).toEqual([set])
          yield* q.enqueueMany(
            ["a", "b", "c", "d", "e"].flatMap((g) =>
              Array.from({ length: 2 }, (_, i) => ({ taskType: t, payload: `${g}${i}`, group: g }))
            ),
            T0
          )
          // Three starts in all for the window (not three per group): the heads of the first three groups.
          const first = yield* q.claimBatch(claimOpts([t], 20))
          expect(payloads(first)).toEqual(["a0", "b0", "c0"])
          expect(yield* q.claimBatch(claimOpts([t], 20, at(1), "w2"))).toEqual([])
          // Finished, they free their groups, but the type's window is spent: d and e, never started, wait too.
          yield* q.recordResults(first.map((c) => done(c)))
          expect(yield* q.claimBatch(claimOpts([t], 20, at(2)))).toEqual([])
          // The next window: three more, the rotation going on from where it stopped; each group still in order.
          yield* hooks.closeWindows(t)
          const next = yield* q.claimBatch(claimOpts([t], 20, at(86_401)))
          expect(payloads(next)).toEqual(["a1", "d0", "e0"])
          // d's and e's heads run: their followers wait for them, whatever the window.
          yield* q.recordResults(next.filter((c) => c.item.payload === "a1").map((c) => done(c, undefined, at(86_402))))
          yield* hooks.closeWindows(t)
          expect(payloads(yield* q.claimBatch(claimOpts([t], 20, at(2 * 86_400 + 1))))).toEqual(["b1", "c1"])
          yield* limits.clear(t)
        })
    )

    it.effect(
      "a concurrency for the whole type with a rate per group: the type's executions bounded, each group's starts per window",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const limits = yield* Limits
          const t = type("grp-rate-type-conc")
          const set = yield* limits.set({ taskType: t, concurrency: 3, rate: 2, per: "1 day", ratePerGroup: true })
          expect(set).toEqual({
            taskType: t,
            concurrency: 3,
            perGroup: false,
            rate: { limit: 2, perMs: 86_400_000 },
            ratePerGroup: true
          })
          yield* q.enqueueMany(
            ["a", "b", "c"].flatMap((g) =>
              Array.from({ length: 4 }, (_, i) => ({ taskType: t, payload: `${g}${i}`, group: g }))
            ),
            T0
          )
          // Three at once in all: a's two starts, then one of b's.
          const first = yield* q.claimBatch(claimOpts([t], 20))
          expect(payloads(first)).toEqual(["a0", "a1", "b0"])
          expect(yield* q.claimBatch(claimOpts([t], 20, at(1), "w2"))).toEqual([])
          // Finished, they free the type's slots; a has spent its window, b has one start left, c two.
          yield* q.recordResults(first.map((c) => done(c)))
          const second = yield* q.claimBatch(claimOpts([t], 20, at(2)))
          expect(payloads(second)).toEqual(["b1", "c0", "c1"])
          yield* q.recordResults(second.map((c) => done(c, undefined, at(3))))
          // Slots free, every group's window spent.
          expect(yield* q.claimBatch(claimOpts([t], 20, at(4)))).toEqual([])
          // The next window: two per group again, three at once in all.
          yield* hooks.closeWindows(t)
          expect(payloads(yield* q.claimBatch(claimOpts([t], 20, at(86_401))))).toEqual(["a2", "c2", "c3"])
          yield* limits.clear(t)
        })
    )

    it.effect("forever items of a limited type claimed together go behind their peers in claim order", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        for (const perGroup of [false, true]) {
          const t = type("lim-forever")
          yield* limits.set({ taskType: t, concurrency: 5, perGroup })
          const group = perGroup ? { group: "g" } : {}
          const a = yield* q.enqueue({ taskType: t, payload: "a", maxRuns: -1, thread: 1, ...group }, T0)
          const b = yield* q.enqueue({ taskType: t, payload: "b", maxRuns: -1, thread: 1, ...group }, T0)
          // a runs alone and goes behind b: from then on the queue's order is not the order of the ids.
          const [first] = yield* q.claimBatch(claimOpts([t], 1, at(1)))
          expect(first!.item.id).toBe(a.id)
          yield* q.recordResults([done(first!, undefined, at(2))])
          for (const [round, now] of [20, 40, 60].entries()) {
            const both = yield* q.claimBatch(claimOpts([t], 2, at(now)))
            expect(
              both.map((c) => c.item.id),
              `perGroup ${perGroup}, round ${round}`
            ).toEqual([b.id, a.id])
            yield* q.recordResults(both.map((c) => done(c, undefined, at(now))))
          }
          yield* limits.clear(t)
        }
      })
    )

    it.effect("a limited type and a plain one claimed together: the plain one takes what is left", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const limits = yield* Limits
        const limited = type("lim")
        const plain = type("plain")
        yield* limits.set({ taskType: limited, concurrency: 1 })
        yield* q.enqueueMany(
          [
            ...Array.from({ length: 3 }, (_, i) => ({ taskType: limited, payload: `l${i}`, thread: 1 })),
            ...Array.from({ length: 3 }, (_, i) => ({ taskType: plain, payload: `p${i}`, thread: 1 }))
          ],
          T0
        )
        const claims = yield* q.claimBatch({ ...claimOpts([limited, plain], 10), limited: [limited] })
        expect(payloads(claims)).toEqual(["l0", "p0", "p1", "p2"])
        yield* limits.clear(limited)
      })
    )
  })
