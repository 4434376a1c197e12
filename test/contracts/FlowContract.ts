/**
 * The contract of items that wait for other items (`after`, `enqueueFlow`) and of outputs passed downstream: one
 * suite, run against the memory store and the Postgres store (a 10,000-step graph run by two concurrent claimers among
 * them). Each test uses task types of its own.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Either, type Layer, Option } from "effect"
import { type FlowStepInput, QueueStore, type QueueClaim, type WakeUps } from "../../src/index.js"
import { QueueInspector } from "./QueueStoreContract.js"

const T0 = new Date("2026-01-01T00:00:00Z")
const type = (label: string) => `${label}-${Math.random().toString(36).slice(2, 10)}`
const claimOpts = (taskTypes: ReadonlyArray<string>, limit = 50) => ({
  limit,
  taskTypes,
  owner: "w1",
  leaseUntil: new Date(T0.getTime() + 30_000),
  now: T0,
  repeatAfter: new Date(T0.getTime() + 10_000)
})
const ok = (claim: QueueClaim, output?: unknown) => ({
  claim,
  result: {
    startedAt: T0,
    finishedAt: T0,
    output: output === undefined ? undefined : JSON.stringify(output)
  }
})
const failed = (claim: QueueClaim, error = "boom") => ({ claim, result: { startedAt: T0, finishedAt: T0, error } })
const ids = (claims: ReadonlyArray<QueueClaim>) => claims.map((c) => c.item.id).sort((a, b) => Number(a) - Number(b))
/** The log rows of these items, oldest first. */
const logOf = (itemIds: ReadonlyArray<string>) =>
  Effect.map(
    Effect.flatMap(QueueInspector, (inspector) => inspector.processed(500)),
    (rows) => rows.filter((r) => itemIds.includes(r.queueItemId)).reverse()
  )

export const suite = (name: string, storeLayer: Layer.Layer<QueueStore | WakeUps | QueueInspector, unknown>) =>
  layer(storeLayer, { timeout: "60 seconds", excludeTestServices: true })(`Flow contract: ${name}`, (it) => {
    it.effect(
      "after: an item is claimed only once every item it waits for finished successfully, with their outputs",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("after")
          const a = yield* q.enqueue({ taskType: t, payload: "a", thread: 1 }, T0)
          const b = yield* q.enqueue({ taskType: t, payload: "b", thread: 1 }, T0)
          const c = yield* q.enqueue({ taskType: t, payload: "c", thread: 1, after: [a.id, b.id, a.id] }, T0)
          expect(c.status).toBe("pending")
          const first = yield* q.claimBatch(claimOpts([t]))
          expect(ids(first)).toEqual([a.id, b.id])
          expect(first.every((x) => x.inputs === undefined)).toBe(true)
          const claimA = first.find((x) => x.item.id === a.id)!
          const claimB = first.find((x) => x.item.id === b.id)!
          expect(yield* q.recordResults([ok(claimA, { pages: 3 })])).toEqual([true])
          // One of two done: still waiting.
          expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
          expect(yield* q.recordResults([ok(claimB)])).toEqual([true])
          const [claimC] = yield* q.claimBatch(claimOpts([t]))
          expect(claimC!.item).toMatchObject({ id: c.id, payload: "c", uniqueKey: null })
          expect(claimC!.inputs).toEqual({ [a.id]: { pages: 3 }, [b.id]: null })
          expect(yield* q.recordResults([ok(claimC!, "sent")])).toEqual([true])
          const log = yield* logOf([a.id, b.id, c.id])
          expect(log.map((r) => [r.queueItemId, r.status, r.output ?? null])).toEqual([
            [a.id, "ok", { pages: 3 }],
            [b.id, "ok", null],
            [c.id, "ok", "sent"]
          ])
          expect(log.every((r) => r.errorMsg === "")).toBe(true)
        })
    )

    it.effect("after: an item already finished successfully counts as done; an unknown id refuses the item", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("done")
        const a = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        const [claimA] = yield* q.claimBatch(claimOpts([t]))
        yield* q.recordResults([ok(claimA!, 7)])
        const b = yield* q.enqueue({ taskType: t, payload: "b", thread: 1, after: [a.id] }, T0)
        const [claimB] = yield* q.claimBatch(claimOpts([t]))
        expect(claimB!.item.id).toBe(b.id)
        expect(claimB!.inputs).toEqual({ [a.id]: 7 })
        const unknown = yield* Effect.either(q.enqueue({ taskType: t, after: ["999999999"] }, T0))
        expect(Either.isLeft(unknown) && unknown.left._tag).toBe("InvalidFlowError")
        expect(Either.isLeft(unknown) && unknown.left.message).toMatch(/item 999999999, which is unknown/)
        const many = yield* Effect.either(
          q.enqueueMany(
            [
              { taskType: t, payload: "kept?" },
              { taskType: t, after: ["999999998"] }
            ],
            T0
          )
        )
        expect(Either.isLeft(many) && many.left._tag).toBe("InvalidFlowError")
        const keyed = yield* Effect.either(q.enqueue({ taskType: t, after: [b.id], uniqueKey: "k" }, T0))
        expect(Either.isLeft(keyed) && keyed.left._tag).toBe("InvalidFlowError")
        // Nothing of the refused batches was written.
        yield* q.recordResults([ok(claimB!)])
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
      })
    )

    it.effect("a failure for good cascades: what waits is recorded once as not run, naming what it waited for", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("cascade")
        const a = yield* q.enqueue({ taskType: t, thread: 1, retry: { attempts: 2, backoff: 0 } }, T0)
        const b = yield* q.enqueue({ taskType: t, thread: 1, after: [a.id] }, T0)
        const c = yield* q.enqueue({ taskType: t, thread: 1, after: [b.id] }, T0)
        const d = yield* q.enqueue({ taskType: t, thread: 1, after: [a.id, c.id] }, T0)
        // A retried failure is not the end: nothing cascades yet.
        const [first] = yield* q.claimBatch(claimOpts([t]))
        yield* q.recordResults([failed(first!)])
        expect((yield* logOf([b.id, c.id, d.id])).length).toBe(0)
        const [second] = yield* q.claimBatch(claimOpts([t]))
        expect(second!.item.id).toBe(a.id)
        yield* q.recordResults([failed(second!)])
        const log = yield* logOf([b.id, c.id, d.id])
        expect(log.map((r) => [r.queueItemId, r.status, r.errorMsg])).toEqual([
          [b.id, "error", `not run: it waited for item ${a.id}, which failed`],
          [c.id, "error", `not run: it waited for item ${b.id}, which did not run`],
          [d.id, "error", `not run: it waited for item ${a.id}, which failed`]
        ])
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
        // What waits for an item that failed is refused nothing: it is recorded as not run at once.
        const e = yield* q.enqueue({ taskType: t, after: [c.id] }, T0)
        expect((yield* logOf([e.id])).map((r) => r.errorMsg)).toEqual([
          `not run: it waited for item ${c.id}, which failed`
        ])
      })
    )

    it.effect("one batch settles what waits for its items in id order, whatever the order of its results", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("order")
        const pair = Effect.gen(function* () {
          const a = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
          const b = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
          // Enqueued the other way round: what waits for b has the lower id.
          const afterB = yield* q.enqueue({ taskType: `${t}-next`, thread: 1, after: [b.id] }, T0)
          const afterA = yield* q.enqueue({ taskType: `${t}-next`, thread: 1, after: [a.id] }, T0)
          const claims = yield* q.claimBatch(claimOpts([t]))
          expect(ids(claims)).toEqual([a.id, b.id])
          const claimOf = (id: string) => claims.find((c) => c.item.id === id)!
          return { a, b, afterA, afterB, claimA: claimOf(a.id), claimB: claimOf(b.id) }
        })
        // Successes, a's result first: what waited enters the queue in its own id order, b's waiter first (neither
        // the order of the results nor that of the items they finished).
        const done = yield* pair
        yield* q.recordResults([ok(done.claimA), ok(done.claimB)])
        const first = yield* q.claimBatch(claimOpts([`${t}-next`], 1))
        const second = yield* q.claimBatch(claimOpts([`${t}-next`], 1))
        expect([...ids(first), ...ids(second)]).toEqual([done.afterB.id, done.afterA.id])
        yield* q.recordResults([ok(first[0]!), ok(second[0]!)])
        // Failures, b's result first: what waited for a, the lower id, is logged as not run first.
        const lost = yield* pair
        yield* q.recordResults([failed(lost.claimB), failed(lost.claimA)])
        const log = yield* logOf([lost.afterA.id, lost.afterB.id])
        expect(log.map((r) => [r.queueItemId, r.errorMsg])).toEqual([
          [lost.afterA.id, `not run: it waited for item ${lost.a.id}, which failed`],
          [lost.afterB.id, `not run: it waited for item ${lost.b.id}, which failed`]
        ])
      })
    )

    it.effect("cancel: a cancelled item's waiters are not run; a waiting item can be cancelled too", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("cancel")
        const a = yield* q.enqueue({ taskType: t, thread: 1 }, T0)
        const b = yield* q.enqueue({ taskType: t, thread: 1, after: [a.id] }, T0)
        const c = yield* q.enqueue({ taskType: t, thread: 1, after: [b.id] }, T0)
        expect(yield* q.cancel(b.id)).toEqual(Option.some("pending"))
        expect(yield* q.cancel(b.id)).toEqual(Option.none())
        expect((yield* logOf([b.id, c.id])).map((r) => [r.queueItemId, r.errorMsg])).toEqual([
          [c.id, `not run: it waited for item ${b.id}, which was cancelled`]
        ])
        const d = yield* q.enqueue({ taskType: t, thread: 1, after: [a.id] }, T0)
        expect(yield* q.cancel(a.id)).toEqual(Option.some("pending"))
        expect((yield* logOf([d.id])).map((r) => r.errorMsg)).toEqual([
          `not run: it waited for item ${a.id}, which was cancelled`
        ])
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
      })
    )

    it.effect("enqueueFlow: a diamond runs in dependency order; inputs are keyed by step key", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("flow")
        const flow = yield* q.enqueueFlow(
          [
            { key: "send", taskType: t, thread: 1, after: ["render", "charge"] },
            { key: "render", taskType: t, thread: 1, payload: "r", after: ["fetch"] },
            { key: "charge", taskType: t, thread: 1, after: ["fetch"] },
            { key: "fetch", taskType: t, thread: 1 }
          ],
          T0
        )
        expect(Object.keys(flow).sort()).toEqual(["charge", "fetch", "render", "send"])
        const order: Array<string> = []
        for (let round = 0; round < 5; round++) {
          const claims = yield* q.claimBatch(claimOpts([t]))
          if (claims.length === 0) break
          for (const claim of claims) {
            const key = Object.keys(flow).find((k) => flow[k] === claim.item.id)!
            order.push(key)
            if (key === "send") expect(claim.inputs).toEqual({ render: { key: "render" }, charge: { key: "charge" } })
            if (key === "render") expect(claim.inputs).toEqual({ fetch: { key: "fetch" } })
          }
          yield* q.recordResults(
            claims.map((claim) => ok(claim, { key: Object.keys(flow).find((k) => flow[k] === claim.item.id) }))
          )
        }
        expect(order[0]).toBe("fetch")
        expect(order.slice(1, 3).sort()).toEqual(["charge", "render"])
        expect(order[3]).toBe("send")
      })
    )

    it.effect("enqueueFlow refuses a cycle, an unknown key or a key used twice, and inserts nothing", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("bad-flow")
        const cases = [
          [
            [
              { key: "a", taskType: t, after: ["c"] },
              { key: "b", taskType: t, after: ["a"] },
              { key: "c", taskType: t, after: ["b"] },
              { key: "root", taskType: t }
            ],
            "cycle"
          ],
          [[{ key: "a", taskType: t, after: ["nope"] }], "unknownKey"],
          [
            [
              { key: "a", taskType: t },
              { key: "a", taskType: t }
            ],
            "duplicateKey"
          ]
        ] as const
        for (const [steps, reason] of cases) {
          const refused = yield* Effect.either(q.enqueueFlow(steps, T0))
          expect(Either.isLeft(refused) && refused.left._tag).toBe("InvalidFlowError")
          expect(Either.isLeft(refused) && (refused.left as { reason?: string }).reason).toBe(reason)
        }
        expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
        expect(yield* q.enqueueFlow([], T0)).toEqual({})
      })
    )

    it.effect("outputs: recorded by every kind of record (a repeated item's, a transactional one) and passed on", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("outputs")
        const twice = yield* q.enqueue({ taskType: t, payload: "twice", thread: 1, maxRuns: 2 }, T0)
        const tx = yield* q.enqueue({ taskType: t, payload: "tx", thread: 0 }, T0)
        const after = yield* q.enqueue({ taskType: `${t}-after`, after: [twice.id, tx.id] }, T0)
        const claims = yield* q.claimBatch(claimOpts([t]))
        expect(claims.map((c) => c.item.payload).sort()).toEqual(["twice", "twice", "tx"])
        const repeats = claims.filter((c) => c.item.payload === "twice")
        expect(yield* q.recordResults(repeats.map((c) => ok(c, { run: c.attempt })))).toEqual([true, true])
        const claimTx = claims.find((c) => c.item.payload === "tx")!
        const committed = yield* q.transact(
          () => Effect.succeed("done"),
          () => ok(claimTx, { tx: true }),
          { timeoutMs: 60_000 }
        )
        expect(committed).toEqual({ _tag: "Committed", value: "done" })
        const log = yield* logOf([twice.id, tx.id])
        expect(log.map((r) => r.output).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))).toEqual([
          { run: 1 },
          { run: 2 },
          { tx: true }
        ])
        const [claim] = yield* q.claimBatch(claimOpts([`${t}-after`]))
        expect(claim!.item.id).toBe(after.id)
        // The last output of each: one of the repeated item's two runs.
        expect(claim!.inputs![tx.id]).toEqual({ tx: true })
        expect([{ run: 1 }, { run: 2 }]).toContainEqual(claim!.inputs![twice.id])
      })
    )

    it.effect(
      "a 10,000-step graph with fan-out and fan-in runs in dependency order under concurrent claimers; failures cascade",
      () =>
        Effect.gen(function* () {
          const q = yield* QueueStore
          const t = type("graph")
          // Ten layers of 1,000: each step waits for two of the layer above (fan-in), and each is waited for by two
          // (fan-out); one root fans out to the first layer, one sink waits for the whole last layer.
          const width = 1_000
          const depth = 10
          const steps: Array<FlowStepInput> = [{ key: "root", taskType: t, thread: 1 }]
          for (let l = 0; l < depth; l++)
            for (let i = 0; i < width; i++)
              steps.push({
                key: `${l}:${i}`,
                taskType: t,
                thread: 1,
                after: l === 0 ? ["root"] : [`${l - 1}:${i}`, `${l - 1}:${(i + 1) % width}`]
              })
          steps.push({ key: "sink", taskType: t, thread: 1, after: Array.from({ length: width }, (_, i) => `9:${i}`) })
          const flow = yield* q.enqueueFlow(steps, T0)
          const keyOf = new Map(Object.entries(flow).map(([key, id]) => [id, key]))
          const afterOf = new Map(steps.map((s) => [s.key, s.after ?? []]))
          // Steps of layer 4 whose index is a multiple of 250 fail for good.
          const fails = (key: string) => /^4:/.test(key) && Number(key.split(":")[1]) % 250 === 0
          const done = new Set<string>()
          const ran: Array<string> = []
          const worker = (owner: string) =>
            Effect.gen(function* () {
              let idle = 0
              while (idle < 20) {
                const claims: ReadonlyArray<QueueClaim> = yield* q.claimBatch({ ...claimOpts([t], 40), owner })
                if (claims.length === 0) {
                  idle++
                  yield* Effect.sleep("20 millis")
                  continue
                }
                idle = 0
                for (const claim of claims) {
                  const key = keyOf.get(claim.item.id)!
                  // Every step it waits for finished successfully before it was claimed.
                  for (const dep of afterOf.get(key)!) expect(done.has(dep)).toBe(true)
                  expect(Object.keys(claim.inputs ?? {}).sort()).toEqual([...afterOf.get(key)!].sort())
                  ran.push(key)
                }
                // Marked done before the record is sent: a waiter can be claimed (by the other claimer) only once the
                // record committed, which may be before this fiber goes on.
                for (const claim of claims) {
                  const key = keyOf.get(claim.item.id)!
                  if (!fails(key)) done.add(key)
                }
                // Not retried: two batches settle waiters in common (each step waits for two neighbours), and a
                // store that locked them in the order of its own items would deadlock, which fails the record
                // (Postgres before migration 0028: dozens of times a run, a second each).
                const recorded = yield* q.recordResults(
                  claims.map((claim) => {
                    const key = keyOf.get(claim.item.id)!
                    return {
                      claim,
                      result: fails(key)
                        ? { startedAt: T0, finishedAt: T0, error: "boom" }
                        : { startedAt: T0, finishedAt: T0, output: JSON.stringify(key) }
                    }
                  })
                )
                expect(recorded.every((r) => r)).toBe(true)
              }
            })
          yield* Effect.all([worker("a"), worker("b")], { concurrency: 2 })
          // No step ran twice; the failed steps' descendants never ran.
          expect(new Set(ran).size).toBe(ran.length)
          const doomed = new Set<string>()
          for (const s of steps) if ((s.after ?? []).some((k) => fails(k) || doomed.has(k))) doomed.add(s.key)
          expect(doomed.has("sink")).toBe(true)
          expect(ran.length).toBe(steps.length - doomed.size)
          for (const key of doomed) expect(ran.includes(key)).toBe(false)
          // Every step has exactly one log row: ok, failed, or not run naming what it waited for.
          const flowIds = new Set(Object.values(flow))
          const log = (yield* Effect.flatMap(QueueInspector, (inspector) => inspector.processed(20_000)))
            .filter((r) => flowIds.has(r.queueItemId))
            .map((r) => ({ id: r.id, item: r.queueItemId, status: r.status, error_msg: r.errorMsg }))
          expect(log.length).toBe(steps.length)
          expect(new Set(log.map((r) => r.item)).size).toBe(steps.length)
          // A step's log row comes after those of everything it waited for (it was claimed after they committed).
          const logId = new Map(log.map((r) => [keyOf.get(r.item)!, BigInt(r.id)]))
          for (const s of steps)
            if (!doomed.has(s.key))
              for (const dep of s.after ?? []) expect(logId.get(dep)! < logId.get(s.key)!).toBe(true)
          for (const row of log) {
            const key = keyOf.get(row.item)!
            if (doomed.has(key))
              expect(row.error_msg).toMatch(/^not run: it waited for item \d+, which (failed|did not run)$/)
            else expect(row.status).toBe(fails(key) ? "error" : "ok")
          }
          expect(yield* q.claimBatch(claimOpts([t]))).toEqual([])
        }),
      { timeout: 120_000 }
    )

    it.effect("a flow's failed step dooms its downstream steps only; the rest of the flow runs", () =>
      Effect.gen(function* () {
        const q = yield* QueueStore
        const t = type("partial")
        const flow = yield* q.enqueueFlow(
          [
            { key: "root", taskType: t, thread: 1 },
            { key: "bad", taskType: t, thread: 1, after: ["root"] },
            { key: "good", taskType: t, thread: 1, after: ["root"] },
            { key: "afterBad", taskType: t, thread: 1, after: ["bad"] },
            { key: "afterGood", taskType: t, thread: 1, after: ["good"] }
          ],
          T0
        )
        const ran: Array<string> = []
        for (let round = 0; round < 6; round++) {
          const claims = yield* q.claimBatch(claimOpts([t]))
          if (claims.length === 0) break
          yield* q.recordResults(
            claims.map((claim) => {
              const key = Object.keys(flow).find((k) => flow[k] === claim.item.id)!
              ran.push(key)
              return key === "bad" ? failed(claim) : ok(claim)
            })
          )
        }
        expect(ran.sort()).toEqual(["afterGood", "bad", "good", "root"])
        const log = yield* logOf([flow["afterBad"]!])
        expect(log.map((r) => r.errorMsg)).toEqual([`not run: it waited for item ${flow["bad"]}, which failed`])
      })
    )
  })
