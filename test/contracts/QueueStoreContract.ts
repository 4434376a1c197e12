/**
 * The QueueStore contract: one suite, run against the memory store and the Postgres store.
 * Each test uses task types of its own, so the tests of one suite never see each other's items.
 */
import { expect, layer } from "@effect/vitest"
import { Deferred, Effect, type Layer } from "effect"
import { QueueStore } from "../../src/index.js"

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
const type = (label: string) => `${label}-${Math.random().toString(36).slice(2, 10)}`
const claimOpts = (taskTypes: ReadonlyArray<string>, limit = 10, owner = "w1", now = at(0)) => ({
  limit,
  taskTypes,
  owner,
  leaseUntil: new Date(now.getTime() + 30_000),
  now
})

export const suite = (name: string, storeLayer: Layer.Layer<QueueStore, unknown>) =>
  layer(storeLayer, { timeout: "60 seconds", excludeTestServices: true })(`QueueStore contract: ${name}`, (it) => {
    it.effect("enqueue normalises maxRuns, thread and priority", () =>
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
          expect(item).toMatchObject({ taskType: t, payload: "p", status: "pending", maxRuns, thread, priority: 0 })
        }
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
        expect(first.map((c) => c.item.id)).toEqual([high1.id, high2.id])
        const next = yield* q.claimBatch(claimOpts([a], 10))
        expect(next.map((c) => c.item.id)).toEqual([low.id])
        expect(first[0]!.item.status).toBe("processing")
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
        expect(first.map((c) => c.item.id).sort()).toEqual([s1.id, c1.id].sort())
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
        const seq = first.find((c) => c.item.id === s1.id)!
        expect(yield* q.recordResult(seq, { startedAt: at(0), finishedAt: at(1) })).toBe(true)
        const after = yield* q.claimBatch(claimOpts([t], 10))
        expect(after.map((c) => c.item.id)).toEqual([s2.id])
      })
    )

    it.effect("a concurrent item with maxRuns 3 runs its three repetitions at once, then is gone", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("conc")
        const item = yield* q.enqueue({ taskType: t, payload: "x", maxRuns: 3, thread: 1 }, T0)
        const claims = yield* q.claimBatch(claimOpts([t], 10))
        expect(claims.length).toBe(3)
        expect(new Set(claims.map((c) => c.item.id))).toEqual(new Set([item.id]))
        expect(new Set(claims.map((c) => c.leaseId)).size).toBe(3)
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
        for (const c of claims) expect(yield* q.recordResult(c, { startedAt: at(0), finishedAt: at(1) })).toBe(true)
        const log = (yield* q.recentProcessed(100)).filter((p) => p.queueItemId === item.id)
        expect(log.length).toBe(3)
        expect((yield* q.claimBatch(claimOpts([t], 10))).length).toBe(0)
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
          expect(
            yield* q.recordResult(c!, { startedAt: at(i), finishedAt: at(i + 1), error: i === 0 ? "boom" : undefined })
          ).toBe(true)
        }
        expect(yield* q.pendingCount()).toBe(before - 1)
        const log = (yield* q.recentProcessed(100)).filter((p) => p.queueItemId === twice.id)
        expect(log.map((p) => [p.status, p.errorMsg])).toEqual([
          ["ok", ""],
          ["error", "boom"]
        ])
        expect(log[1]!.durationMs).toBe(1000)
        const forever = yield* q.enqueue({ taskType: t, payload: "forever", maxRuns: -1 }, T0)
        for (let i = 0; i < 3; i++) {
          const [c] = yield* q.claimBatch(claimOpts([t], 1))
          expect(c!.item.id).toBe(forever.id)
          yield* q.recordResult(c!, { startedAt: at(0), finishedAt: at(0) })
        }
        expect((yield* q.claimBatch(claimOpts([t], 1)))[0]!.item.id).toBe(forever.id)
      })
    )

    it.effect("a result is fenced by its lease: a stranger's token or a rescued execution writes nothing", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("fence")
        const item = yield* q.enqueue({ taskType: t, payload: "x" }, T0)
        const [c] = yield* q.claimBatch(claimOpts([t], 1, "dead", at(0)))
        expect(yield* q.recordResult({ ...c!, token: "forged" }, { startedAt: at(0), finishedAt: at(1) })).toBe(false)
        expect(yield* q.renewLease({ ...c!, token: "forged" }, at(99), at(1))).toBe(false)
        expect(yield* q.renewLeases([c!, { ...c!, token: "forged" }], at(20), at(1))).toEqual([c!.leaseId])
        // Its owner stops renewing; the lease expires and the execution is taken back, uncounted.
        expect(yield* q.recoverStuck(at(31))).toBeGreaterThanOrEqual(1)
        expect(yield* q.recordResult(c!, { startedAt: at(0), finishedAt: at(40) })).toBe(false)
        expect((yield* q.recentProcessed(100)).filter((p) => p.queueItemId === item.id)).toEqual([])
        const [again] = yield* q.claimBatch(claimOpts([t], 1, "alive", at(41)))
        expect(again!.item.id).toBe(item.id)
        expect(yield* q.recordResult(again!, { startedAt: at(41), finishedAt: at(42) })).toBe(true)
        expect((yield* q.recentProcessed(100)).filter((p) => p.queueItemId === item.id).length).toBe(1)
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
        const ok = (id: string) => claims.filter((c) => c.item.id === id)
        const batch = [
          { claim: ok(single.id)[0]!, result: { startedAt: at(0), finishedAt: at(1) } },
          ...ok(triple.id).map((claim) => ({ claim, result: { startedAt: at(0), finishedAt: at(2), error: "e" } })),
          { claim: { ...ok(twice.id)[0]!, token: "forged" }, result: { startedAt: at(0), finishedAt: at(1) } },
          { claim: ok(twice.id)[1]!, result: { startedAt: at(0), finishedAt: at(1) } }
        ]
        expect(yield* q.recordResults(batch)).toEqual([true, true, true, true, false, true])
        const log = yield* q.recentProcessed(1000)
        const count = (id: string) => log.filter((p) => p.queueItemId === id).length
        expect([count(single.id), count(triple.id), count(twice.id)]).toEqual([1, 3, 1])
        expect(
          log.filter((p) => p.queueItemId === triple.id).every((p) => p.status === "error" && p.errorMsg === "e")
        ).toBe(true)
        // single and triple are done; twice has one run left once its forged execution is taken back.
        yield* q.recoverStuck(at(1000))
        const rest = yield* q.claimBatch(claimOpts([t], 10, "w2", at(1001)))
        expect(rest.map((c) => c.item.id)).toEqual([twice.id])
        expect(yield* q.recordResults([])).toEqual([])
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
        expect(yield* q.renewLease(live!, at(2000), at(11))).toBe(true)
        expect(yield* q.renewLease(mine!, at(2000), at(11))).toBe(false)
        const [back] = yield* q.claimBatch(claimOpts([t], 5, "other", at(12)))
        expect(back!.item.id).toBe(mine!.item.id)
      })
    )

    it.effect("the semaphore is green by default and switches", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        expect(yield* q.getSemaphore()).toBe(true)
        yield* q.setSemaphore(false, T0)
        expect(yield* q.getSemaphore()).toBe(false)
        yield* q.setSemaphore(true, T0)
        expect(yield* q.getSemaphore()).toBe(true)
      })
    )

    it.effect("workers register with their task types, heartbeat and leave", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const id = type("worker")
        yield* q.registerWorker(id, ["a", "b"], at(0))
        yield* q.registerWorker(id, ["a", "b", "c"], at(10))
        const live = (yield* q.liveWorkers(at(5))).filter((w) => w.id === id)
        expect(live.map((w) => [w.taskTypes, w.startedAt.toISOString(), w.heartbeatAt.toISOString()])).toEqual([
          [["a", "b", "c"], at(0).toISOString(), at(10).toISOString()]
        ])
        expect((yield* q.liveWorkers(at(11))).filter((w) => w.id === id)).toEqual([])
        yield* q.unregisterWorker(id)
        expect((yield* q.liveWorkers(at(0))).filter((w) => w.id === id)).toEqual([])
      })
    )

    it.scoped("subscribers are woken by a new item", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const woken = yield* Deferred.make<void>()
        yield* q.subscribe(() => Deferred.unsafeDone(woken, Effect.void))
        yield* q.enqueue({ taskType: type("wake"), payload: "x" }, T0)
        yield* Deferred.await(woken).pipe(Effect.timeout("10 seconds"))
      })
    )
  })
