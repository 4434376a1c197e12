/**
 * The QueueStore contract: one suite, run against the memory store and the Postgres store (with their WakeUps, which
 * a new item must wake). Each test uses task types of its own, so the tests of one suite never see each other's items.
 */
import { expect, layer } from "@effect/vitest"
import { Context, Deferred, Effect, type Layer, Option } from "effect"
import {
  EXACT_DEPTH_UP_TO,
  type ProcessedItem,
  QueueStore,
  type QueueClaim,
  type WakeTopic,
  WakeUps
} from "../../src/index.js"
import { gaveUpMessage, MAX_UNFINISHED } from "../../src/domain/QueueItem.js"
import * as Retry from "../../src/domain/Retry.js"

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
const type = (label: string) => `${label}-${Math.random().toString(36).slice(2, 10)}`
/** Claim options at `now`: leases for 30 s, a forever-repeating item paced 10 s. */
const claimOpts = (taskTypes: ReadonlyArray<string>, limit = 10, owner = "w1", now = at(0)) => ({
  limit,
  taskTypes,
  owner,
  leaseUntil: new Date(now.getTime() + 30_000),
  now,
  repeatAfter: new Date(now.getTime() + 10_000)
})
/** A finished execution to record. */
const done = (claim: QueueClaim, startedAt = at(0), finishedAt = at(1), error?: string) => ({
  claim,
  result: { startedAt, finishedAt, error }
})
const ids = (claims: ReadonlyArray<QueueClaim>) => claims.map((c) => c.item.id)

/** How the suite reads the execution log (the port has no reader: the runtime never reads it). */
export class QueueInspector extends Context.Tag("kairos/test/QueueInspector")<
  QueueInspector,
  { readonly processed: (n: number) => Effect.Effect<ReadonlyArray<ProcessedItem.ProcessedItem>> }
>() {}

/** The last `n` executions, newest first. */
const recentProcessed = (n: number) => Effect.flatMap(QueueInspector, (inspector) => inspector.processed(n))
/** A wake-up subscription until the scope closes. */
const subscribe = (wake: (topic: WakeTopic) => void) => Effect.flatMap(WakeUps, (wakeUps) => wakeUps.subscribe(wake))

export const suite = (name: string, storeLayer: Layer.Layer<QueueStore | WakeUps | QueueInspector, unknown>) =>
  layer(storeLayer, { timeout: "60 seconds", excludeTestServices: true })(`QueueStore contract: ${name}`, (it) => {
    it.effect("enqueue normalises maxRuns, thread and priority; a new item may start at once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("norm")
        const cases = [
          [{ maxRuns: 0, thread: 7 }, 1, 0],
          [{ maxRuns: -5, thread: -1 }, 1, 0],
          [{ maxRuns: -1, thread: 1 }, -1, 1],
          [{ maxRuns: 3 }, 3, 0]
        ] as const
        for (const [input, maxRuns, thread] of cases) {
          const item = yield* q.enqueue({ taskType: t, payload: "p", ...input }, T0)
          expect(item).toMatchObject({
            taskType: t,
            payload: "p",
            status: "pending",
            maxRuns,
            thread,
            priority: 0,
            runAfter: null,
            uniqueKey: null
          })
        }
      })
    )

    it.effect("cancel deletes a pending or processing item; a result still in flight for it is refused", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("cancel")
        const running = yield* q.enqueue({ taskType: t, payload: "a", thread: 1 }, T0)
        const [claim] = yield* q.claimBatch(claimOpts([t], 1))
        expect(claim!.item.id).toBe(running.id)
        const waiting = yield* q.enqueue({ taskType: t, payload: "b", thread: 1 }, T0)
        expect(yield* q.cancel(running.id)).toEqual(Option.some("processing"))
        expect(yield* q.cancel(waiting.id)).toEqual(Option.some("pending"))
        expect(yield* q.cancel(waiting.id)).toEqual(Option.none())
        expect(yield* q.recordResults([done(claim!)])).toEqual([false])
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
      })
    )

    it.effect("retryExecution enqueues a new item with the execution's task type and payload", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry")
        const original = yield* q.enqueue({ taskType: t, payload: `{"to":"ada"}`, priority: 5 }, T0)
        const [claim] = yield* q.claimBatch(claimOpts([t]))
        expect(yield* q.recordResults([done(claim!, at(0), at(1), "boom")])).toEqual([true])
        const execution = (yield* recentProcessed(50)).find((p) => p.queueItemId === original.id)!
        const again = yield* q.retryExecution(execution.id, at(2))
        expect(Option.map(again, (i) => [i.taskType, i.payload, i.status, i.priority, i.maxRuns])).toEqual(
          Option.some([t, `{"to":"ada"}`, "pending", 0, 1])
        )
        expect(Option.getOrThrow(again).id).not.toBe(original.id)
        expect((yield* q.claimBatch(claimOpts([t], 10, "w1", at(3)))).map((c) => c.item.payload)).toEqual([
          `{"to":"ada"}`
        ])
        expect(yield* q.retryExecution("987654321", at(4))).toEqual(Option.none())
      })
    )

    it.effect("a NULL payload stays NULL: on the item, and in the execution's log row", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("nullpayload")
        const single = yield* q.enqueue({ taskType: t, payload: null, thread: 1 }, T0)
        expect(single.payload).toBeNull()
        yield* q.enqueueMany(
          [
            { taskType: t, payload: null, thread: 1 },
            { taskType: t, thread: 1 },
            { taskType: t, payload: "", thread: 1 }
          ],
          T0
        )
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.map((c) => c.item.payload)).toEqual([null, null, "", ""])
        expect(yield* q.recordResults(claims.map((c) => done(c)))).toEqual([true, true, true, true])
        const logged = (yield* recentProcessed(1000)).filter((p) => p.taskType === t)
        expect(logged.map((p) => [p.queueItemId, p.payload]).sort()).toEqual(
          claims.map((c) => [c.item.id, c.item.payload]).sort()
        )
      })
    )

    it.effect("enqueueMany adds items in order, normalised like enqueue, and wakes subscribers once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("many")
        const woken = yield* Deferred.make<void>()
        yield* subscribe(() => Deferred.unsafeDone(woken, Effect.void))
        const ids = yield* q.enqueueMany(
          [
            { taskType: t, payload: "a", maxRuns: 0, thread: 7 },
            { taskType: t, payload: "b", priority: 2, thread: 1 },
            { taskType: t, payload: "c", maxRuns: -1, thread: 1 }
          ],
          T0
        )
        expect(ids).toHaveLength(3)
        expect([...ids].sort((x, y) => Number(x) - Number(y))).toEqual(ids)
        expect(yield* q.enqueueMany([], T0)).toEqual([])
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.map((c) => [c.item.payload, c.item.maxRuns, c.item.thread, c.item.priority])).toEqual([
          ["b", 1, 1, 2],
          ["a", 1, 0, 0],
          ["c", -1, 1, 0]
        ])
        yield* Deferred.await(woken).pipe(Effect.timeout("5 seconds"))
      }).pipe(Effect.scoped)
    )

    it.effect("enqueueMany stores a value shared by every item as it stores one that differs between them", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("shared")
        const shared = { taskType: t, priority: 3, maxRuns: 2, thread: 1, runAfter: at(5) }
        const retry = { attempts: 2, backoff: "7s" } as const
        yield* q.enqueueMany(
          [
            { ...shared, payload: "x", retry },
            { ...shared, payload: "y", retry }
          ],
          T0
        )
        // The same values, each item differing from the other in every column.
        const mixed = yield* q.enqueueMany(
          [
            { ...shared, payload: "m", uniqueKey: `${t}-k`, retry },
            { taskType: t, payload: "n", priority: 1, thread: 0, runAfter: at(6) }
          ],
          T0
        )
        expect(yield* q.claimBatch(claimOpts([t], 10, "w1", at(4)))).toEqual([])
        const claims = yield* q.claimBatch(claimOpts([t], 10, "w1", at(6)))
        const view = (c: QueueClaim) => [
          c.item.payload,
          c.item.priority,
          c.item.maxRuns,
          c.item.thread,
          c.item.runAfter
        ]
        expect(claims.map(view)).toEqual([
          ["x", 3, 2, 1, at(5)],
          ["x", 3, 2, 1, at(5)],
          ["y", 3, 2, 1, at(5)],
          ["y", 3, 2, 1, at(5)],
          ["m", 3, 2, 1, at(5)],
          ["m", 3, 2, 1, at(5)],
          ["n", 1, 1, 0, at(6)]
        ])
        expect((yield* q.enqueue({ taskType: t, payload: "again", uniqueKey: `${t}-k` }, T0)).id).toBe(mixed[0])
        // The shared policy holds for each item: a failure waits its 7 s and is retried.
        const x = claims.filter((c) => c.item.payload === "x")
        expect(yield* q.recordResults([done(x[0]!, at(6), at(6), "boom")])).toEqual([true])
        expect(yield* q.recordResults([done(x[1]!, at(6), at(6))])).toEqual([true])
        expect(yield* q.claimBatch(claimOpts([t], 10, "w1", at(12)))).toEqual([])
        expect(ids(yield* q.claimBatch(claimOpts([t], 10, "w1", at(13))))).toEqual([x[0]!.item.id])
      })
    )

    it.effect("runAfter delays an item: not claimed before it, claimed from it on; an invalid Date means at once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        for (const thread of [0, 1]) {
          const t = type(`delay${thread}`)
          const later = yield* q.enqueue({ taskType: t, payload: "later", thread, runAfter: at(60) }, T0)
          expect(later).toMatchObject({ runAfter: at(60), status: "pending" })
          expect(yield* q.claimBatch(claimOpts([t], 5, "w1", at(59)))).toEqual([])
          const [c] = yield* q.claimBatch(claimOpts([t], 5, "w1", at(60)))
          expect(c!.item).toMatchObject({ id: later.id, runAfter: at(60) })
          expect(yield* q.recordResults([done(c!, at(60), at(61))])).toEqual([true])
        }
        const t = type("baddate")
        const now = yield* q.enqueue({ taskType: t, payload: "x", runAfter: new Date(Number.NaN) }, T0)
        expect(now.runAfter).toBeNull()
        expect(ids(yield* q.claimBatch(claimOpts([t], 5, "w1", at(0))))).toEqual([now.id])
      })
    )

    it.effect("a delayed item of higher priority does not hold back a ready one; enqueueMany honours runAfter", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        for (const thread of [0, 1]) {
          const t = type(`delayprio${thread}`)
          const [urgentLater, ready, plainLater] = yield* q.enqueueMany(
            [
              { taskType: t, payload: "urgent later", thread, priority: 9, runAfter: at(100) },
              { taskType: t, payload: "ready", thread },
              { taskType: t, payload: "later", thread, runAfter: at(50) }
            ],
            T0
          )
          const first = yield* q.claimBatch(claimOpts([t], 5, "w1", at(1)))
          expect(ids(first)).toEqual([ready])
          yield* q.recordResults(first.map((c) => done(c, at(1), at(2))))
          const second = yield* q.claimBatch(claimOpts([t], 5, "w1", at(50)))
          expect(ids(second)).toEqual([plainLater])
          yield* q.recordResults(second.map((c) => done(c, at(50), at(51))))
          const third = yield* q.claimBatch(claimOpts([t], 5, "w1", at(100)))
          expect(ids(third)).toEqual([urgentLater])
          yield* q.recordResults(third.map((c) => done(c, at(100), at(101))))
        }
      })
    )

    it.effect("nextRunAfter: the earliest run_after later than now among items of the given types", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const [a, b, other] = [type("nexta"), type("nextb"), type("nexto")]
        expect(Option.isNone(yield* q.nextRunAfter([a, b], at(0)))).toBe(true)
        yield* q.enqueue({ taskType: a, payload: "x", runAfter: at(90) }, T0)
        yield* q.enqueue({ taskType: b, payload: "x", runAfter: at(30), thread: 1 }, T0)
        yield* q.enqueue({ taskType: b, payload: "x" }, T0)
        yield* q.enqueue({ taskType: other, payload: "x", runAfter: at(10) }, T0)
        expect(yield* q.nextRunAfter([a, b], at(0))).toEqual(Option.some(at(30)))
        expect(yield* q.nextRunAfter([a], at(0))).toEqual(Option.some(at(90)))
        // Due already (not later than now): claimable, so no reason to wake.
        expect(yield* q.nextRunAfter([a, b], at(30))).toEqual(Option.some(at(90)))
        expect(Option.isNone(yield* q.nextRunAfter([a, b], at(90)))).toBe(true)
        expect(Option.isNone(yield* q.nextRunAfter([], at(0)))).toBe(true)
      })
    )

    it.effect("uniqueKey: while its item is pending or processing, enqueue returns that item and inserts nothing", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("uniq")
        const key = type("key")
        const first = yield* q.enqueue({ taskType: t, payload: "first", uniqueKey: key }, T0)
        expect(first.uniqueKey).toBe(key)
        const again = yield* q.enqueue({ taskType: t, payload: "second", uniqueKey: key, priority: 5 }, at(1))
        expect(again).toMatchObject({ id: first.id, payload: "first", priority: 0, uniqueKey: key })
        // Keyless items and an empty key (no key) are never deduplicated.
        const plain1 = yield* q.enqueue({ taskType: t, payload: "plain" }, at(2))
        const plain2 = yield* q.enqueue({ taskType: t, payload: "plain", uniqueKey: "" }, at(3))
        expect(new Set([first.id, plain1.id, plain2.id]).size).toBe(3)
        expect(plain2.uniqueKey).toBeNull()
        const claims = yield* q.claimBatch(claimOpts([t], 10, "w1", at(4)))
        expect(ids(claims)).toEqual([first.id])
        expect(claims[0]!.item.uniqueKey).toBe(key)
        // Processing: still the same item.
        expect((yield* q.enqueue({ taskType: t, payload: "third", uniqueKey: key }, at(5))).id).toBe(first.id)
        yield* q.recordResults(claims.map((c) => done(c, at(4), at(5))))
        // Finished (deleted): the key is free again.
        const next = yield* q.enqueue({ taskType: t, payload: "fourth", uniqueKey: key }, at(6))
        expect(next.id).not.toBe(first.id)
        expect(next.payload).toBe("fourth")
        // The key is global, not per task type.
        expect((yield* q.enqueue({ taskType: type("uniqother"), payload: "x", uniqueKey: key }, at(7))).id).toBe(
          next.id
        )
      })
    )

    it.effect(
      "enqueueMany with unique keys: the first of a key wins, duplicates (in the batch or queued) get its id",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("uniqmany")
          const [k1, k2] = [type("k1"), type("k2")]
          const queued = yield* q.enqueue({ taskType: t, payload: "queued", uniqueKey: k1 }, T0)
          const got = yield* q.enqueueMany(
            [
              { taskType: t, payload: "dup of queued", uniqueKey: k1 },
              { taskType: t, payload: "plain a" },
              { taskType: t, payload: "k2 first", uniqueKey: k2 },
              { taskType: t, payload: "k2 second", uniqueKey: k2 },
              { taskType: t, payload: "plain b" }
            ],
            at(1)
          )
          expect(got.length).toBe(5)
          expect(got[0]).toBe(queued.id)
          expect(got[3]).toBe(got[2])
          expect(new Set(got).size).toBe(4)
          const claims = yield* q.claimBatch(claimOpts([t], 10, "w1", at(2)))
          expect(claims.map((c) => c.item.payload)).toEqual(["queued"])
          yield* q.recordResults(claims.map((c) => done(c, at(2), at(3))))
          const rest: Array<string | null> = []
          for (let i = 0; i < 5; i++) {
            const more = yield* q.claimBatch(claimOpts([t], 10, "w1", at(10 + i)))
            rest.push(...more.map((c) => c.item.payload))
            yield* q.recordResults(more.map((c) => done(c, at(10 + i), at(10 + i))))
          }
          expect(rest).toEqual(["plain a", "k2 first", "plain b"])
        })
    )

    it.effect("the executions of one item recorded at the same time by separate writers: the item ends deleted", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("race")
        const before = yield* q.pendingCount()
        // Twenty items of three concurrent repetitions each; each repetition's result written on its own, all at once.
        yield* q.enqueueMany(
          Array.from({ length: 20 }, () => ({ taskType: t, payload: "x", maxRuns: 3, thread: 1 })),
          T0
        )
        const claims = yield* q.claimBatch(claimOpts([t], 60))
        expect(claims).toHaveLength(60)
        const recorded = yield* Effect.forEach(claims, (c) => q.recordResults([done(c)]), { concurrency: "unbounded" })
        expect(recorded.every((r) => r[0] === true)).toBe(true)
        // Every item is gone: none is left "processing" without a lease (the tests of a suite run one at a time).
        expect(yield* q.pendingCount()).toBe(before)
      })
    )

    it.effect("claims the given task types only, highest priority first, then oldest, up to the limit", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const [a, other] = [type("prio"), type("unhandled")]
        const low = yield* q.enqueue({ taskType: a, payload: "low", priority: 0, thread: 1 }, T0)
        const high1 = yield* q.enqueue({ taskType: a, payload: "high1", priority: 5, thread: 1 }, T0)
        const high2 = yield* q.enqueue({ taskType: a, payload: "high2", priority: 5, thread: 1 }, T0)
        yield* q.enqueue({ taskType: other, payload: "x", priority: 100, thread: 1 }, T0)
        const first = yield* q.claimBatch(claimOpts([a], 2))
        expect(ids(first)).toEqual([high1.id, high2.id])
        const next = yield* q.claimBatch(claimOpts([a], 10))
        expect(ids(next)).toEqual([low.id])
        expect(first[0]!.item.status).toBe("processing")
        expect(first.map((c) => [c.attempt, c.runsDone])).toEqual([
          [1, 0],
          [1, 0]
        ])
      })
    )

    it.effect("sequential items: one execution per task type at a time; concurrent items of that type still run", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("seq")
        const s1 = yield* q.enqueue({ taskType: t, payload: "s1" }, T0)
        const s2 = yield* q.enqueue({ taskType: t, payload: "s2" }, T0)
        const c1 = yield* q.enqueue({ taskType: t, payload: "c1", thread: 1 }, T0)
        const first = yield* q.claimBatch(claimOpts([t], 10))
        expect(ids(first).sort()).toEqual([s1.id, c1.id].sort())
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
        const seq = first.find((c) => c.item.id === s1.id)!
        expect(yield* q.recordResults([done(seq)])).toEqual([true])
        const after = yield* q.claimBatch(claimOpts([t], 10))
        expect(ids(after)).toEqual([s2.id])
      })
    )

    it.effect("a concurrent item with maxRuns 3 runs its three repetitions at once, then is gone", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("conc")
        const item = yield* q.enqueue({ taskType: t, payload: "x", maxRuns: 3, thread: 1 }, T0)
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.length).toBe(3)
        expect(new Set(ids(claims))).toEqual(new Set([item.id]))
        expect(new Set(claims.map((c) => c.leaseId)).size).toBe(3)
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
        expect(yield* q.recordResults(claims.map((c) => done(c)))).toEqual([true, true, true])
        const log = (yield* recentProcessed(100)).filter((p) => p.queueItemId === item.id)
        expect(log.length).toBe(3)
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
      })
    )

    it.effect("concurrent repetitions of one item get distinct attempts, numbered 1..N across claims", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("attempt")
        const item = yield* q.enqueue({ taskType: t, payload: "x", maxRuns: 5, thread: 1 }, T0)
        const first = yield* q.claimBatch(claimOpts([t], 2))
        expect(first.map((c) => c.attempt).sort()).toEqual([1, 2])
        expect(first.map((c) => c.runsDone)).toEqual([0, 0])
        // One of them finishes; the next claim numbers on from the executions started so far.
        expect(yield* q.recordResults([done(first[0]!)])).toEqual([true])
        const second = yield* q.claimBatch(claimOpts([t], 10, "w2", at(2)))
        expect(second.map((c) => c.attempt).sort()).toEqual([3, 4, 5])
        expect(second.map((c) => c.runsDone)).toEqual([1, 1, 1])
        expect(new Set(ids(second))).toEqual(new Set([item.id]))
        const all = [...first, ...second]
        expect(new Set(all.map((c) => c.attempt)).size).toBe(5)
        expect(yield* q.recordResults([first[1]!, ...second].map((c) => done(c, at(2), at(3))))).toEqual([
          true,
          true,
          true,
          true
        ])
        expect((yield* q.claimBatch(claimOpts([t], 10, "w3", at(4)))).length).toBe(0)
        // A sequential item numbers its executions one after the other.
        const seq = yield* q.enqueue({ taskType: t, payload: "s", maxRuns: 2 }, T0)
        const attempts: Array<number> = []
        for (let i = 0; i < 2; i++) {
          const [c] = yield* q.claimBatch(claimOpts([t], 10, "w4", at(10 + i)))
          expect(c!.item.id).toBe(seq.id)
          attempts.push(c!.attempt)
          yield* q.recordResults([done(c!, at(10 + i), at(10 + i))])
        }
        expect(attempts).toEqual([1, 2])
      })
    )

    it.effect("retry: a failure with attempts left keeps the item, waits the backoff, and uses up no run", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-fixed")
        const item = yield* q.enqueue({ taskType: t, payload: "p", retry: { attempts: 3, backoff: "10s" } }, T0)
        // Three attempts at its one run: each failure waits 10 s from its finish.
        let now = 0
        for (let attempt = 1; attempt <= 3; attempt++) {
          const [c] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(now)))
          expect(c!.item.id).toBe(item.id)
          expect(c!.item.maxRuns).toBe(1)
          expect(c!.attempt).toBe(attempt)
          expect(yield* q.recordResults([done(c!, at(now), at(now + 1), `boom ${attempt}`)])).toEqual([true])
          if (attempt === 3) break
          expect(yield* q.nextRunAfter([t], at(now + 1))).toEqual(Option.some(at(now + 11)))
          expect(yield* q.claimBatch(claimOpts([t], 1, "w1", at(now + 10)))).toEqual([])
          now += 11
        }
        // Out of attempts: the run is used up and the item gone; every attempt is in the log.
        expect(yield* q.cancel(item.id)).toEqual(Option.none())
        const log = (yield* recentProcessed(100)).filter((p) => p.queueItemId === item.id)
        expect(log.map((p) => p.errorMsg)).toEqual(["boom 3", "boom 2", "boom 1"])
      })
    )

    it.effect("retry: the task type's policy applies to items without their own; an item's own wins", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-type")
        const typePolicy = Retry.policy({ attempts: 5, backoff: { type: "fixed", delay: "1m" } })
        const plain = yield* q.enqueue({ taskType: t, payload: "plain", thread: 1 }, T0)
        const once = yield* q.enqueue({ taskType: t, payload: "once", thread: 1, retry: { attempts: 1 } }, T0)
        const claims = yield* q.claimBatch(claimOpts([t]))
        expect(ids(claims)).toEqual([plain.id, once.id])
        const recorded = yield* q.recordResults(
          claims.map((c) => ({ ...done(c, at(1), at(2), "nope"), retry: typePolicy }))
        )
        expect(recorded).toEqual([true, true])
        // `once` (its own policy: no retry) is gone; `plain` waits the type's minute.
        expect(yield* q.cancel(once.id)).toEqual(Option.none())
        expect(yield* q.nextRunAfter([t], at(2))).toEqual(Option.some(at(62)))
        expect(ids(yield* q.claimBatch(claimOpts([t], 1, "w1", at(62))))).toEqual([plain.id])
      })
    )

    it.effect("retry: exponential backoff doubles per failure up to its max; a success resets the count", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-exp")
        const retry = { attempts: 5, backoff: { type: "exponential", delay: "1s", max: "3s" } } as const
        const item = yield* q.enqueue({ taskType: t, payload: "p", maxRuns: 2, retry }, T0)
        let now = 0
        const attempt = (error?: string) =>
          Effect.gen(function* () {
            const [c] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(now)))
            expect(c!.item.id).toBe(item.id)
            expect(yield* q.recordResults([done(c!, at(now), at(now), error)])).toEqual([true])
            return c!
          })
        const waits: Array<number> = []
        for (let i = 0; i < 3; i++) {
          yield* attempt("boom")
          const next = Option.getOrThrow(yield* q.nextRunAfter([t], at(now)))
          waits.push((next.getTime() - at(now).getTime()) / 1000)
          now = (next.getTime() - T0.getTime()) / 1000
        }
        expect(waits).toEqual([1, 2, 3])
        // A success uses up the first run and resets the failures: the second run starts from the first delay.
        const ok = yield* attempt()
        expect(ok.item.maxRuns).toBe(2)
        const c = yield* attempt("again")
        expect(c.item.maxRuns).toBe(1)
        expect(yield* q.nextRunAfter([t], at(now))).toEqual(Option.some(at(now + 1)))
      })
    )

    it.effect("retry: a forever item retries after its backoff, not its repeat pace", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-forever")
        yield* q.enqueue({ taskType: t, payload: "f", maxRuns: -1, retry: { attempts: 2, backoff: "3s" } }, T0)
        const [c] = yield* q.claimBatch(claimOpts([t], 1))
        expect(yield* q.recordResults([done(c!, at(0), at(1), "boom")])).toEqual([true])
        // claimOpts paces a forever item 10 s; the retry comes 3 s after the failure.
        expect(ids(yield* q.claimBatch(claimOpts([t], 1, "w1", at(4))))).toEqual([c!.item.id])
      })
    )

    it.effect("retry: repetitions recorded together retry their first failures while attempts last", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-many")
        const item = yield* q.enqueue(
          { taskType: t, payload: "m", maxRuns: 3, thread: 1, retry: { attempts: 2, backoff: "5s" } },
          T0
        )
        const claims = yield* q.claimBatch(claimOpts([t], 3))
        expect(claims.length).toBe(3)
        // Two failures and a success: one failure retries (the one attempt left), the other and the success use
        // up runs. One run is left, after the backoff from the last finish.
        const recorded = yield* q.recordResults([
          done(claims[0]!, at(0), at(1), "a"),
          done(claims[1]!, at(0), at(2), "b"),
          done(claims[2]!, at(0), at(3))
        ])
        expect(recorded).toEqual([true, true, true])
        expect(yield* q.nextRunAfter([t], at(3))).toEqual(Option.some(at(8)))
        const [last] = yield* q.claimBatch(claimOpts([t], 3, "w1", at(8)))
        expect(last!.item.id).toBe(item.id)
        expect(last!.item.maxRuns).toBe(1)
        yield* q.recordResults([done(last!, at(8), at(9), "c")])
        // That run's first failure: it retries once more (its failures were reset when a run was used up).
        expect(yield* q.nextRunAfter([t], at(9))).toEqual(Option.some(at(14)))
      })
    )

    it.effect("retry: an execution taken back after its lease expired is no failure and uses up no attempt", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-rescue")
        const item = yield* q.enqueue({ taskType: t, payload: "r", retry: { attempts: 2, backoff: "5s" } }, T0)
        // A worker died holding it: its lease (30 s) expires and the item is taken back, at once claimable.
        expect((yield* q.claimBatch(claimOpts([t], 1))).length).toBe(1)
        expect(yield* q.recoverStuck(at(31))).toBeGreaterThanOrEqual(1)
        const [again] = yield* q.claimBatch(claimOpts([t], 1, "w2", at(31)))
        expect(again!.item.id).toBe(item.id)
        // Its first real failure still has the second attempt.
        yield* q.recordResults([done(again!, at(31), at(32), "boom")])
        expect(yield* q.nextRunAfter([t], at(32))).toEqual(Option.some(at(37)))
      })
    )

    it.effect("retry: an invalid policy refuses the item (in a batch, the whole batch) and names the field", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("retry-bad")
        const bad = yield* Effect.flip(q.enqueue({ taskType: t, payload: "x", retry: { attempts: 0 } }, T0))
        expect(bad).toMatchObject({ _tag: "InvalidRetryError", field: "attempts" })
        expect(bad.message).toContain("attempts must be a whole number from 1 to 1000, got 0")
        const batch = yield* Effect.flip(
          q.enqueueMany(
            [
              { taskType: t, payload: "fine" },
              { taskType: t, payload: "bad", retry: { attempts: 2, backoff: "soon" as unknown as Retry.BackoffInput } }
            ],
            T0
          )
        )
        expect(batch).toMatchObject({ _tag: "InvalidRetryError", field: "backoff" })
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
      })
    )

    it.effect("recordAndClaim records, then claims with a fresh look: the next sequential item of a freed type", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("chain")
        const other = type("chain-other")
        const a = yield* q.enqueue({ taskType: t, payload: "a" }, T0)
        const b = yield* q.enqueue({ taskType: t, payload: "b" }, T0)
        yield* q.enqueue({ taskType: other, payload: "o" }, T0)
        const [first] = yield* q.claimBatch(claimOpts([t], 5))
        expect(first!.item.id).toBe(a.id)
        // Sequential: nothing more of the type while `a` runs.
        expect(yield* q.claimBatch(claimOpts([t], 5))).toEqual([])
        const { claims, recorded } = yield* q.recordAndClaim([done(first!)], claimOpts([t], 5, "w1", at(1)))
        expect(recorded).toEqual([true])
        expect(ids(claims)).toEqual([b.id])
        // A lost lease records nothing; a limit of 0 claims nothing.
        const stranger = { ...claims[0]!, token: "not-mine" }
        const again = yield* q.recordAndClaim([done(stranger)], claimOpts([t, other], 0, "w1", at(2)))
        expect(again).toEqual({ recorded: [false], claims: [] })
        const last = yield* q.recordAndClaim([done(claims[0]!, at(1), at(2), "boom")], claimOpts([t], 5, "w1", at(2)))
        expect(last).toEqual({ recorded: [true], claims: [] })
        const log = (yield* recentProcessed(100)).filter((p) => p.taskType === t)
        expect(log.map((p) => [p.payload, p.status])).toEqual([
          ["b", "error"],
          ["a", "ok"]
        ])
      })
    )

    it.effect(
      "recordAndClaim of one success for one type takes the type's next item in queue order, of either kind",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("step")
          const step = (claim: QueueClaim, s: number) =>
            q.recordAndClaim([done(claim, at(s - 1), at(s))], claimOpts([t], 1, "w1", at(s)))
          const s1 = yield* q.enqueue({ taskType: t, payload: "s1" }, T0)
          const s2 = yield* q.enqueue({ taskType: t, payload: "s2" }, T0)
          const d = yield* q.enqueue({ taskType: t, payload: "d", priority: 9, runAfter: at(100) }, T0)
          const [first] = yield* q.claimBatch(claimOpts([t], 1))
          expect(first!.item.id).toBe(s1.id)
          // Not our lease: nothing recorded, and the type is still busy with s1.
          expect(yield* step({ ...first!, token: "not-mine" }, 1)).toEqual({ recorded: [false], claims: [] })
          const c = yield* q.enqueue({ taskType: t, payload: "c", thread: 1, priority: 5 }, T0)
          const e = yield* q.enqueue({ taskType: t, payload: "e", thread: 1 }, T0)
          // A concurrent item of higher priority comes before the next sequential one.
          const a = yield* step(first!, 1)
          expect(a.recorded).toEqual([true])
          expect(a.claims.map((x) => [x.item.id, x.item.status, x.attempt, x.runsDone])).toEqual([
            [c.id, "processing", 1, 0]
          ])
          // Equal priority: the older first, s2 before e.
          const b = yield* step(a.claims[0]!, 2)
          expect([b.recorded, ids(b.claims)]).toEqual([[true], [s2.id]])
          const bb = yield* step(b.claims[0]!, 3)
          expect([bb.recorded, ids(bb.claims)]).toEqual([[true], [e.id]])
          // d waits for its time.
          expect(yield* step(bb.claims[0]!, 4)).toEqual({ recorded: [true], claims: [] })
          const [late] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(100)))
          expect(late!.item.id).toBe(d.id)
          expect(yield* step(late!, 101)).toEqual({ recorded: [true], claims: [] })
          const log = (yield* recentProcessed(100)).filter((p) => p.taskType === t)
          expect(log.map((p) => [p.payload, p.status, p.durationMs])).toEqual([
            ["d", "ok", 1000],
            ["e", "ok", 1000],
            ["s2", "ok", 1000],
            ["c", "ok", 1000],
            ["s1", "ok", 1000]
          ])
          expect(yield* q.claimBatch(claimOpts([t], 5, "w1", at(200)))).toEqual([])
        })
    )

    it.effect("a chain's step whose lease was taken back records nothing and claims the item again", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("takenback")
        const item = yield* q.enqueue({ taskType: t, payload: "p" }, T0)
        const [claim] = yield* q.claimBatch(claimOpts([t], 1))
        // Its lease expired (claimOpts leases for 30 s) and another instance took it back.
        expect(yield* q.recoverStuck(at(31))).toBeGreaterThanOrEqual(1)
        const step = yield* q.recordAndClaim([done(claim!, at(31), at(32))], claimOpts([t], 1, "w1", at(32)))
        expect(step.recorded).toEqual([false])
        expect(step.claims.map((c) => [c.item.id, c.attempt])).toEqual([[item.id, 2]])
        expect((yield* recentProcessed(100)).filter((p) => p.taskType === t)).toEqual([])
        const last = yield* q.recordAndClaim([done(step.claims[0]!, at(32), at(33))], claimOpts([t], 1, "w1", at(33)))
        expect(last).toEqual({ recorded: [true], claims: [] })
      })
    )

    it.effect("maxRuns: re-queued until exhausted, then deleted; -1 forever; each execution logged once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("runs")
        const twice = yield* q.enqueue({ taskType: t, payload: "twice", maxRuns: 2 }, T0)
        const before = yield* q.pendingCount()
        for (let i = 0; i < 2; i++) {
          const [c] = yield* q.claimBatch(claimOpts([t], 1))
          expect(c!.item.id).toBe(twice.id)
          expect(c!.runsDone).toBe(i)
          expect(yield* q.recordResults([done(c!, at(i), at(i + 1), i === 0 ? "boom" : undefined)])).toEqual([true])
        }
        expect(yield* q.pendingCount()).toBe(before - 1)
        const log = (yield* recentProcessed(100)).filter((p) => p.queueItemId === twice.id)
        expect(log.map((p) => [p.status, p.errorMsg])).toEqual([
          ["ok", ""],
          ["error", "boom"]
        ])
        expect(log[1]!.durationMs).toBe(1000)
        const forever = yield* q.enqueue({ taskType: t, payload: "forever", maxRuns: -1 }, T0)
        // Each claim a poll interval after the last (claimOpts paces a repeating item 10 s).
        for (let i = 0; i < 3; i++) {
          const [c] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(100 + i * 10)))
          expect(c!.item.id).toBe(forever.id)
          expect(c!.runsDone).toBe(i)
          expect(yield* q.recordResults([done(c!, at(100 + i * 10), at(100 + i * 10))])).toEqual([true])
        }
        expect(ids(yield* q.claimBatch(claimOpts([t], 1, "w1", at(130))))).toEqual([forever.id])
        expect((yield* recentProcessed(100)).filter((p) => p.queueItemId === forever.id).length).toBe(3)
      })
    )

    it.effect("a forever item is not claimed again before repeatAfter, even once its result is recorded", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        for (const thread of [0, 1]) {
          const t = type(`pace${thread}`)
          const item = yield* q.enqueue({ taskType: t, payload: "tick", maxRuns: -1, thread }, T0)
          const [c] = yield* q.claimBatch({ ...claimOpts([t], 5, "w1", at(0)), repeatAfter: at(60) })
          expect(c!.item.id).toBe(item.id)
          expect(yield* q.claimBatch(claimOpts([t], 5, "w1", at(1)))).toEqual([])
          expect(yield* q.recordResults([done(c!, at(0), at(2))])).toEqual([true])
          expect(yield* q.claimBatch(claimOpts([t], 5, "w2", at(3)))).toEqual([])
          expect(yield* q.claimBatch(claimOpts([t], 5, "w2", at(59)))).toEqual([])
          const again = yield* q.claimBatch({ ...claimOpts([t], 5, "w2", at(60)), repeatAfter: at(120) })
          expect(ids(again)).toEqual([item.id])
          expect(again[0]!.attempt).toBe(2)
        }
      })
    )

    it.effect("a claimed forever item goes behind its peers of equal priority (fairness)", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        for (const thread of [0, 1]) {
          const t = type(`fair${thread}`)
          // The forever item is the oldest; its peers of equal priority are enqueued after it.
          const forever = yield* q.enqueue({ taskType: t, payload: "forever", maxRuns: -1, thread }, T0)
          const peer1 = yield* q.enqueue({ taskType: t, payload: "peer1", thread }, at(1))
          const peer2 = yield* q.enqueue({ taskType: t, payload: "peer2", thread }, at(2))
          const [c] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(3)))
          expect(c!.item.id).toBe(forever.id)
          yield* q.recordResults([done(c!, at(3), at(4))])
          // A higher priority still goes first, whenever it came.
          const urgent = yield* q.enqueue({ taskType: t, payload: "urgent", thread, priority: 1 }, at(5))
          const order: Array<string> = []
          for (let i = 0; i < 4; i++) {
            const [next] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(20 + i)))
            order.push(next!.item.id)
            yield* q.recordResults([done(next!, at(20 + i), at(20 + i))])
          }
          expect(order).toEqual([urgent.id, peer1.id, peer2.id, forever.id])
        }
      })
    )

    it.effect("forever items claimed together go behind their peers in the order they were claimed", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("fair-together")
        const a = yield* q.enqueue({ taskType: t, payload: "a", maxRuns: -1, thread: 1 }, T0)
        const b = yield* q.enqueue({ taskType: t, payload: "b", maxRuns: -1, thread: 1 }, T0)
        // a runs alone and goes behind b: from then on the queue's order is not the order of the ids.
        const [first] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(1)))
        expect(first!.item.id).toBe(a.id)
        yield* q.recordResults([done(first!, at(1), at(2))])
        let now = 20
        for (let round = 0; round < 3; round++) {
          const both = yield* q.claimBatch(claimOpts([t], 2, "w1", at(now)))
          expect(ids(both), `round ${round}`).toEqual([b.id, a.id])
          yield* q.recordResults(both.map((c) => done(c, at(now), at(now))))
          now += 20
        }
      })
    )

    it.effect("a result is fenced by its lease: a stranger's token or a rescued execution writes nothing", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("fence")
        const item = yield* q.enqueue({ taskType: t, payload: "x" }, T0)
        const [c] = yield* q.claimBatch(claimOpts([t], 1, "dead", at(0)))
        const forged = { ...c!, token: "forged" }
        expect(yield* q.recordResults([done(forged)])).toEqual([false])
        expect(yield* q.renewLeases([forged], at(99), at(1))).toEqual([false])
        expect(yield* q.renewLeases([c!, forged], at(20), at(1))).toEqual([true, false])
        // Its owner stops renewing; the lease expires and the execution is taken back, uncounted.
        expect(yield* q.recoverStuck(at(31))).toBeGreaterThanOrEqual(1)
        expect(yield* q.recordResults([done(c!, at(0), at(40))])).toEqual([false])
        expect(yield* q.renewLeases([c!], at(99), at(41))).toEqual([false])
        expect((yield* recentProcessed(100)).filter((p) => p.queueItemId === item.id)).toEqual([])
        const [again] = yield* q.claimBatch(claimOpts([t], 1, "alive", at(41)))
        expect(again!.item.id).toBe(item.id)
        // The execution taken back and the live one, side by side (a runner can hold both: its lease ran out during
        // an outage, and it claimed the item again): each answered for itself, in order.
        expect(yield* q.renewLeases([c!, again!], at(99), at(41))).toEqual([false, true])
        expect(yield* q.recordResults([done(again!, at(41), at(42)), done(c!, at(0), at(42))])).toEqual([true, false])
        expect((yield* recentProcessed(100)).filter((p) => p.queueItemId === item.id).length).toBe(1)
      })
    )

    it.effect("recordResults writes a batch in one go, each fenced by its own lease, counted per item", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("batch")
        const single = yield* q.enqueue({ taskType: t, payload: "single", thread: 1 }, T0)
        const triple = yield* q.enqueue({ taskType: t, payload: "triple", maxRuns: 3, thread: 1 }, T0)
        const twice = yield* q.enqueue({ taskType: t, payload: "twice", maxRuns: 2, thread: 1 }, T0)
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.length).toBe(6)
        const of = (id: string) => claims.filter((c) => c.item.id === id)
        const batch = [
          done(of(single.id)[0]!),
          ...of(triple.id).map((claim) => done(claim, at(0), at(2), "e")),
          done({ ...of(twice.id)[0]!, token: "forged" }),
          done(of(twice.id)[1]!)
        ]
        expect(yield* q.recordResults(batch)).toEqual([true, true, true, true, false, true])
        const log = yield* recentProcessed(1000)
        const count = (id: string) => log.filter((p) => p.queueItemId === id).length
        expect([count(single.id), count(triple.id), count(twice.id)]).toEqual([1, 3, 1])
        expect(
          log.filter((p) => p.queueItemId === triple.id).every((p) => p.status === "error" && p.errorMsg === "e")
        ).toBe(true)
        // single and triple are done; twice has one run left once its forged execution is taken back.
        yield* q.recoverStuck(at(1000))
        const rest = yield* q.claimBatch(claimOpts([t], 10, "w2", at(1001)))
        expect(ids(rest)).toEqual([twice.id])
        expect(yield* q.recordResults([])).toEqual([])
        expect(yield* q.renewLeases([], at(2000), at(1001))).toEqual([])
      })
    )

    it.effect("one execution listed twice in a batch is recorded once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("twice")
        const item = yield* q.enqueue({ taskType: t, payload: "x", maxRuns: 3, thread: 1 }, T0)
        const [c] = yield* q.claimBatch(claimOpts([t], 1))
        expect(yield* q.recordResults([done(c!), done(c!, at(0), at(2))])).toEqual([true, false])
        expect((yield* recentProcessed(100)).filter((p) => p.queueItemId === item.id).length).toBe(1)
        // One run done, two left.
        const rest = yield* q.claimBatch(claimOpts([t], 10, "w2", at(3)))
        expect(rest.map((r) => r.runsDone)).toEqual([1, 1])
      })
    )

    it.effect("recoverStuck takes back expired leases and the caller's own, never a live one", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("recover")
        yield* q.enqueue({ taskType: t, payload: "a", thread: 1 }, T0)
        yield* q.enqueue({ taskType: t, payload: "b", thread: 1 }, T0)
        const [live] = yield* q.claimBatch({ ...claimOpts([t], 1, "live"), leaseUntil: at(1000) })
        const [mine] = yield* q.claimBatch({ ...claimOpts([t], 1, "me"), leaseUntil: at(1000) })
        yield* q.recoverStuck(at(10), "me")
        expect(yield* q.renewLeases([live!, mine!], at(2000), at(11))).toEqual([true, false])
        const [back] = yield* q.claimBatch(claimOpts([t], 5, "other", at(12)))
        expect(back!.item.id).toBe(mine!.item.id)
      })
    )

    it.effect("releaseLeases hands back exactly the given executions, claimable again at once", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("release")
        // A run-once item and a twice-run one (a lease on the item's row, and leases of their own in Postgres).
        const once = yield* q.enqueue({ taskType: t, payload: "once", thread: 1 }, T0)
        const twice = yield* q.enqueue({ taskType: t, payload: "twice", thread: 1, maxRuns: 2 }, T0)
        const kept = yield* q.enqueue({ taskType: t, payload: "kept", thread: 1 }, T0)
        const claims = yield* q.claimBatch({ ...claimOpts([t], 10, "me"), leaseUntil: at(1000) })
        expect(claims.length).toBe(4)
        const of = (id: string) => claims.filter((c) => c.item.id === id)
        const released = [of(once.id)[0]!, of(twice.id)[0]!]
        // A stale copy (a wrong token) is not released.
        const stale = { ...of(kept.id)[0]!, token: "not-the-token" }
        expect(yield* q.releaseLeases([...released, stale], at(10))).toBe(2)
        expect(yield* q.renewLeases(claims, at(2000), at(11))).toEqual(claims.map((c) => !released.includes(c)))
        // Claimable again at once, by anyone; the kept one and the other execution of `twice` stay leased.
        const back = yield* q.claimBatch(claimOpts([t], 10, "other", at(12)))
        expect(back.map((c) => c.item.id).sort()).toEqual([once.id, twice.id].sort())
        // Released twice, nothing more.
        expect(yield* q.releaseLeases(released, at(13))).toBe(0)
      })
    )

    it.scoped("subscribers are woken by a new item", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const woken = yield* Deferred.make<void>()
        yield* subscribe(() => Deferred.unsafeDone(woken, Effect.void))
        yield* q.enqueue({ taskType: type("wake"), payload: "x" }, T0)
        yield* Deferred.await(woken).pipe(Effect.timeout("10 seconds"))
      })
    )

    it.effect(
      "an item whose executions keep ending without a result: after MAX_UNFINISHED that run is given up, recorded as an error",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const [once, thrice, released] = [type("lost1"), type("lost3"), type("released")]
          yield* q.enqueue({ taskType: once, payload: "o" }, at(0))
          yield* q.enqueue({ taskType: thrice, payload: "t", maxRuns: 3 }, at(0))
          const oneItem = yield* q.enqueue({ taskType: released, payload: "r" }, at(0))
          const gaveUp = (t: string) =>
            Effect.map(recentProcessed(1000), (rows) => rows.filter((r) => r.taskType === t))
          for (let round = 0; round < MAX_UNFINISHED; round++) {
            const start = 5000 + round * 100
            // Each execution's worker dies: the lease expires and the next rescue takes it back.
            const claims = yield* q.claimBatch(claimOpts([once, thrice], 10, "dies", at(start)))
            expect(claims.map((c) => c.item.taskType).sort()).toEqual([once, thrice].sort())
            // The released one is handed back by its owner at a stop: that is no unfinished execution.
            const kept = yield* q.claimBatch(claimOpts([released], 10, "stops", at(start)))
            expect(kept.length).toBe(1)
            yield* q.recoverStuck(at(start + 1), "stops")
            expect(yield* gaveUp(once)).toEqual([])
            yield* q.recoverStuck(at(start + 31))
          }
          const [onceRow] = yield* gaveUp(once)
          expect(onceRow).toMatchObject({ status: "error", payload: "o" })
          expect(onceRow!.errorMsg).toBe(gaveUpMessage(MAX_UNFINISHED))
          expect((yield* gaveUp(thrice)).map((r) => r.status)).toEqual(["error"])
          expect(yield* gaveUp(released)).toEqual([])
          // The run-once item is done; the three-times one has two runs left and runs again.
          const next = yield* q.claimBatch(claimOpts([once, thrice, released], 10, "w", at(9000)))
          expect(next.map((c) => [c.item.taskType, c.item.maxRuns]).sort()).toEqual(
            [
              [thrice, 2],
              [released, 1]
            ].sort()
          )
          expect(next.find((c) => c.item.taskType === released)!.item.id).toBe(oneItem.id)
          yield* q.recordResults(next.map((c) => done(c, at(9000), at(9001))))
        })
    )
    it.effect("transact: the run's value and its record commit together, fenced by the execution's lease", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("transact")
        const options = { timeoutMs: 60_000 }
        // A run-once item (its lease on its row), one that runs twice (a lease of its own per execution), and a
        // sequential one.
        const once = yield* q.enqueue({ taskType: t, payload: "once", thread: 1 }, T0)
        const twice = yield* q.enqueue({ taskType: t, payload: "twice", thread: 1, maxRuns: 2 }, T0)
        const seq = yield* q.enqueue({ taskType: t, payload: "seq", thread: 0 }, T0)
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.map((c) => c.item.payload).sort()).toEqual(["once", "seq", "twice", "twice"])
        for (const claim of claims) {
          const out = yield* q.transact(
            () => Effect.succeed(claim.item.payload),
            (value) => (value === claim.item.payload ? done(claim) : undefined),
            options
          )
          expect(out).toEqual({ _tag: "Committed", value: claim.item.payload })
        }
        const log = (yield* recentProcessed(10)).filter((p) => p.taskType === t)
        expect(log.map((p) => [p.queueItemId, p.status]).sort()).toEqual(
          [
            [once.id, "ok"],
            [seq.id, "ok"],
            [twice.id, "ok"],
            [twice.id, "ok"]
          ].sort()
        )
        // Every run used: nothing left to claim; recording any of them again is refused.
        expect(yield* q.claimBatch(claimOpts([t], 10))).toEqual([])
        expect(yield* q.recordResults(claims.map((c) => done(c)))).toEqual([false, false, false, false])
      })
    )

    it.effect(
      "transact: a lost lease refuses the record (Refused); undefined rolls back (RolledBack); a death passes",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("transact-refused")
          const options = { timeoutMs: 60_000 }
          const cancelled = yield* q.enqueue({ taskType: t, payload: "cancelled", thread: 1 }, T0)
          const [lost] = yield* q.claimBatch(claimOpts([t], 1))
          expect(yield* q.cancel(cancelled.id)).toEqual(Option.some("processing"))
          expect(
            yield* q.transact(
              () => Effect.succeed(1),
              () => done(lost!),
              options
            )
          ).toEqual({
            _tag: "Refused",
            value: 1
          })
          // Taken back from an owner whose lease expired, and claimed by another: the first owner's record is refused.
          yield* q.enqueue({ taskType: t, payload: "taken", thread: 1 }, T0)
          const [first] = yield* q.claimBatch(claimOpts([t], 1, "w1", at(0)))
          expect(yield* q.recoverStuck(at(31))).toBeGreaterThanOrEqual(1)
          const [second] = yield* q.claimBatch(claimOpts([t], 1, "w2", at(31)))
          expect(second!.item.id).toBe(first!.item.id)
          expect(
            yield* q.transact(
              () => Effect.succeed(2),
              () => done(first!),
              options
            )
          ).toEqual({
            _tag: "Refused",
            value: 2
          })
          // Not to be recorded here (a failure: the runner records it with its other results).
          expect(
            yield* q.transact(
              () => Effect.succeed(3),
              () => undefined,
              options
            )
          ).toEqual({
            _tag: "RolledBack",
            value: 3
          })
          // A run that dies: its cause comes back, nothing recorded.
          const died = yield* Effect.exit(
            q.transact(
              () => Effect.die("boom"),
              () => done(second!),
              options
            )
          )
          expect(died._tag).toBe("Failure")
          expect((yield* recentProcessed(10)).filter((p) => p.taskType === t)).toEqual([])
          // The second owner still holds its lease, and records as usual.
          expect(yield* q.recordResults([done(second!, at(31), at(32), "failed elsewhere")])).toEqual([true])
          expect((yield* recentProcessed(10)).filter((p) => p.taskType === t).map((p) => p.status)).toEqual(["error"])
        })
    )

    it.effect(
      "vacuum does nothing below its threshold, and past it vacuums or finds another doing so, never failing",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("vacuum")
          yield* q.enqueue({ taskType: t, payload: "v" }, T0)
          const [claim] = yield* q.claimBatch(claimOpts([t]))
          expect(yield* q.recordResults([done(claim!)])).toEqual([true])
          const request = { owner: "contract", now: T0, leaseMs: 120_000, gapMs: 1_000, gapFactor: 4 }
          expect(yield* q.vacuum({ ...request, deadRows: 1e12 })).toMatchObject({ _tag: "Clean" })
          // Memory has no dead rows (Clean); Postgres vacuums what its statistics count by now, through a
          // transaction pooler too (a VACUUM outside any transaction).
          const outcome = yield* q.vacuum({ ...request, deadRows: 0 })
          expect(["Clean", "Busy", "Vacuumed"]).toContain(outcome._tag)
        })
    )
    // Last: it prunes the whole (shared) log.
    it.effect(
      "pruneProcessed deletes the oldest executions beyond keepLast and before olderThan, in bounded batches",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("prune")
          for (const payload of ["p1", "p2", "p3"]) {
            yield* q.enqueue({ taskType: t, payload }, T0)
            const [claim] = yield* q.claimBatch(claimOpts([t]))
            expect(yield* q.recordResults([done(claim!)])).toEqual([true])
          }
          const all = yield* recentProcessed(1_000_000)
          expect(yield* q.pruneProcessed({ olderThan: undefined, keepLast: undefined, limit: 1000 })).toBe(0)
          expect(
            yield* q.pruneProcessed({ olderThan: new Date("2000-01-01T00:00:00Z"), keepLast: undefined, limit: 1000 })
          ).toBe(0)
          expect(yield* q.pruneProcessed({ olderThan: undefined, keepLast: 2, limit: 1000 })).toBe(all.length - 2)
          const left = yield* recentProcessed(1_000_000)
          expect(left.map((p) => p.payload)).toEqual(["p3", "p2"])
          // A batch stops at its limit, oldest first.
          const later = new Date("2200-01-01T00:00:00Z")
          expect(yield* q.pruneProcessed({ olderThan: later, keepLast: undefined, limit: 1 })).toBe(1)
          expect((yield* recentProcessed(10)).map((p) => p.payload)).toEqual(["p3"])
          expect(yield* q.pruneProcessed({ olderThan: later, keepLast: 1, limit: 10 })).toBe(0)
        })
    )

    // Last in the suite: it fills the store past the bound, and leaves it so (pgQueue.test.ts empties a queue again).
    it.effect("depth: pendingCount, exact, up to EXACT_DEPTH_UP_TO items; past them more than that, exact or not", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("depth")
        expect(yield* q.depth()).toEqual({ count: yield* q.pendingCount(), exact: true })
        const before = yield* q.pendingCount()
        yield* q.enqueueMany(
          Array.from({ length: EXACT_DEPTH_UP_TO + 50 - before }, () => ({ taskType: t, payload: "" })),
          T0
        )
        const deep = yield* q.depth()
        expect(deep.count).toBeGreaterThan(EXACT_DEPTH_UP_TO)
        // An estimate may be off (Postgres reads it from the table's statistics); an exact count may not.
        if (deep.exact) expect(deep.count).toBe(EXACT_DEPTH_UP_TO + 50)
        expect(yield* q.pendingCount()).toBe(EXACT_DEPTH_UP_TO + 50)
      })
    )
  })
