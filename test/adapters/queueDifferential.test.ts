/**
 * A differential test of the two QueueStores: random programs (enqueues, claims, records, recordAndClaim, lease
 * renewals, rescues, cancels, the clock moving on) run step by step against a fresh memory store and the Postgres
 * store, and every answer must be the same once normalised (items named by their payloads, times relative to the
 * program's start, lease ids and tokens left out). Then the log and what is left in the queue an hour later.
 * Integration: a real Postgres. The programs share one schema: each has task types, unique keys and a time base
 * (a day apart) of its own, and its rows are deleted after it.
 */
import { SqlClient } from "@effect/sql"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Either, FastCheck as fc, Layer, ManagedRuntime, Option } from "effect"
import * as MemoryDatabase from "../../src/adapters/memory/MemoryDatabase.js"
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import * as PgQueueStore from "../../src/adapters/postgres/PgQueueStore.js"
import * as Retry from "../../src/domain/Retry.js"
import type { QueueItem } from "../../src/domain/QueueItem.js"
import type * as ProcessedItem from "../../src/domain/ProcessedItem.js"
import { type EnqueueInput, type QueueClaim, QueueStore, type RecordInput } from "../../src/ports/QueueStore.js"
import { TestSchema } from "../support/database.js"
import { QueueInspector } from "../contracts/QueueStoreContract.js"
import { PgMigrated, queueInspector } from "../support/pgStores.js"

const RUNS = Number(process.env["KAIROS_DIFF_RUNS"] ?? 60)
const T0 = Date.parse("2030-01-01T00:00:00Z")
const DAY = 24 * 60 * 60 * 1000
const SECOND = 1000

// ---------------------------------------------------------------------------------------------------------------
// Programs

type TypeName = "a" | "b"
type Owner = "w1" | "w2"

interface ItemSpec {
  readonly type: TypeName
  readonly thread: 0 | 1
  readonly maxRuns: 1 | 2 | -1
  readonly priority: 0 | 1
  /** `runAfter`, in seconds from the step's time (in the past: due at once); 0: none. */
  readonly delay: -5 | 0 | 5
  /** The item's own retry policy, by name (see itemPolicies). */
  readonly retry: "none" | "fixed" | "exp" | "once"
  /** Index into the program's two unique keys, or none. */
  readonly key: 0 | 1 | null
}

interface Pick {
  /** Indices into the claims held (mod their number): duplicates allowed. */
  readonly picks: ReadonlyArray<number>
  readonly failed: ReadonlyArray<boolean>
  readonly duration: 0 | 1500
}

type Step =
  | { readonly op: "enqueue"; readonly item: ItemSpec }
  | { readonly op: "enqueueMany"; readonly items: ReadonlyArray<ItemSpec> }
  | { readonly op: "claim"; readonly types: ReadonlyArray<TypeName>; readonly limit: number; readonly owner: Owner }
  | ({ readonly op: "record" } & Pick)
  | ({
      readonly op: "recordAndClaim"
      readonly types: ReadonlyArray<TypeName>
      readonly limit: 1 | 2
      readonly owner: Owner
    } & Pick)
  | { readonly op: "renew"; readonly picks: ReadonlyArray<number> }
  | { readonly op: "advance"; readonly seconds: 1 | 6 | 12 | 40 }
  | { readonly op: "recover"; readonly owner: Owner | null }
  /** A worker that dies `times` over: w2 claims, its leases expire (40 s later) and are taken back. */
  | { readonly op: "crash"; readonly types: ReadonlyArray<TypeName>; readonly times: 1 | 3 | 5 }
  /** Cancels an item the program enqueued, or (`running`) the item of a claim it holds. */
  | { readonly op: "cancel"; readonly pick: number; readonly running: boolean }
  | { readonly op: "observe" }

interface Program {
  /** Each task type's retry policy, as a runner passes it with every result (see typePolicies). */
  readonly typeRetry: Readonly<Record<TypeName, "none" | "twice" | "exp">>
  readonly steps: ReadonlyArray<Step>
}

const itemPolicies: Record<ItemSpec["retry"], Retry.Input | undefined> = {
  none: undefined,
  fixed: { attempts: 2, backoff: "3s" },
  exp: { attempts: 3, backoff: { type: "exponential", delay: "1s", max: "2s" } },
  once: { attempts: 1 }
}
const typePolicies: Record<Program["typeRetry"][TypeName], Retry.Policy | undefined> = {
  none: undefined,
  twice: Retry.policy({ attempts: 2, backoff: "2s" }),
  exp: Retry.policy({ attempts: 4, backoff: { type: "exponential", delay: "1s" } })
}

const typeArb = fc.constantFrom<TypeName>("a", "b")
const ownerArb = fc.constantFrom<Owner>("w1", "w2")
const typesArb = fc.constantFrom<ReadonlyArray<TypeName>>(["a"], ["b"], ["a", "b"])
const itemArb: fc.Arbitrary<ItemSpec> = fc.record({
  type: typeArb,
  thread: fc.constantFrom<0 | 1>(0, 1),
  maxRuns: fc.constantFrom<1 | 2 | -1>(1, 2, -1),
  priority: fc.constantFrom<0 | 1>(0, 1),
  delay: fc.constantFrom<-5 | 0 | 5>(0, 0, 5, -5),
  retry: fc.constantFrom<ItemSpec["retry"]>("none", "fixed", "exp", "once"),
  key: fc.constantFrom<0 | 1 | null>(null, null, null, 0, 1)
})
const pickArb = {
  picks: fc.array(fc.nat({ max: 7 }), { minLength: 1, maxLength: 3 }),
  failed: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
  duration: fc.constantFrom<0 | 1500>(0, 1500)
}
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant("enqueue" as const), item: itemArb }) },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant("enqueueMany" as const), items: fc.array(itemArb, { maxLength: 3 }) })
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant("claim" as const),
      types: typesArb,
      limit: fc.integer({ min: 1, max: 4 }),
      owner: ownerArb
    })
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant("record" as const), ...pickArb }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("recordAndClaim" as const),
      types: typesArb,
      limit: fc.constantFrom<1 | 2>(1, 2, 2),
      owner: ownerArb,
      ...pickArb
    })
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("renew" as const), picks: pickArb.picks }) },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant("advance" as const),
      seconds: fc.constantFrom<1 | 6 | 12 | 40>(1, 6, 12, 40)
    })
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant("recover" as const),
      owner: fc.constantFrom<Owner | null>(null, "w1", "w2")
    })
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant("crash" as const),
      types: typesArb,
      times: fc.constantFrom<1 | 3 | 5>(1, 3, 5)
    })
  },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant("cancel" as const), pick: fc.nat({ max: 15 }), running: fc.boolean() })
  },
  { weight: 1, arbitrary: fc.constant({ op: "observe" as const }) }
)
const programArb: fc.Arbitrary<Program> = fc.record({
  typeRetry: fc.record({
    a: fc.constantFrom<Program["typeRetry"][TypeName]>("none", "twice", "exp"),
    b: fc.constantFrom<Program["typeRetry"][TypeName]>("none", "twice", "exp")
  }),
  steps: fc.array(stepArb, { minLength: 10, maxLength: 40, size: "max" })
})

const item = (spec: Partial<ItemSpec>): ItemSpec => ({
  type: "a",
  thread: 0,
  maxRuns: 1,
  priority: 0,
  delay: 0,
  retry: "none",
  key: null,
  ...spec
})
const noRetry: Program["typeRetry"] = { a: "none", b: "none" }
const allOk = { failed: [false, false, false], duration: 0 } as const
const allFail = { failed: [true, true, true], duration: 1500 } as const

/** Programs run every time, before the random ones. */
const regressions: ReadonlyArray<Program> = [
  // Postgres's cancel left the item's rows of queue_leases (no foreign key since migration 0004): the rescue took
  // them back and counted them (2 here, 0 in memory), and nextLeaseExpiry saw them.
  {
    typeRetry: noRetry,
    steps: [
      { op: "enqueue", item: item({ thread: 1, maxRuns: 2 }) },
      { op: "claim", types: ["a"], limit: 2, owner: "w1" },
      { op: "cancel", pick: 0, running: true },
      { op: "observe" },
      { op: "advance", seconds: 40 },
      { op: "recover", owner: null }
    ]
  },
  // A run-once item's executions share one lease id in Postgres (a lease on its row: the item's id negated).
  // Recording an execution taken back together with the item's next one recorded neither: the batch kept the
  // first result per lease id, the stale one, and refused the live one ([false, false]; memory: [false, true]).
  {
    typeRetry: noRetry,
    steps: [
      { op: "enqueue", item: item({}) },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "recover", owner: "w1" },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "record", picks: [0, 1], ...allOk },
      { op: "enqueue", item: item({ thread: 1 }) },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "recover", owner: "w1" },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "recordAndClaim", types: ["a"], limit: 2, owner: "w1", picks: [0, 1], ...allOk },
      { op: "renew", picks: [0] }
    ]
  },
  // The same two executions renewed together: Postgres answered with lease ids, one for both, so the one taken back
  // looked held too (memory: [false, true]). Answered per execution since.
  {
    typeRetry: noRetry,
    steps: [
      { op: "enqueue", item: item({ thread: 1 }) },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "recover", owner: "w1" },
      { op: "claim", types: ["a"], limit: 1, owner: "w1" },
      { op: "renew", picks: [0, 1] },
      { op: "record", picks: [1, 0], ...allOk }
    ]
  },
  // Not a divergence found, but paths the random programs reach only now and then: failures retried under the
  // item's policy and its type's (exponential), side by side (repetitions of a concurrent item recorded in one
  // batch), then given up.
  {
    typeRetry: { a: "exp", b: "twice" },
    steps: [
      { op: "enqueue", item: item({ retry: "fixed" }) },
      { op: "enqueue", item: item({ type: "b", thread: 1, maxRuns: 2 }) },
      { op: "claim", types: ["a", "b"], limit: 4, owner: "w1" },
      { op: "record", picks: [0, 1, 2], ...allFail },
      { op: "advance", seconds: 6 },
      { op: "claim", types: ["a", "b"], limit: 4, owner: "w1" },
      { op: "recordAndClaim", types: ["a", "b"], limit: 2, owner: "w2", picks: [0, 1], ...allFail },
      { op: "advance", seconds: 6 },
      { op: "claim", types: ["a", "b"], limit: 4, owner: "w1" },
      { op: "record", picks: [0, 1, 2], failed: [true, false, true], duration: 0 },
      { op: "observe" },
      { op: "advance", seconds: 12 },
      { op: "enqueue", item: item({ type: "b", maxRuns: -1 }) },
      { op: "crash", types: ["a", "b"], times: 5 }
    ]
  }
]

// ---------------------------------------------------------------------------------------------------------------
// Running a program against one store

type Store = QueueStore["Type"]
type Run = <A, E>(effect: Effect.Effect<A, E>) => Promise<A>

/** What a program has done to the stores (summed over all programs): the test checks the programs reach it. */
interface Coverage {
  claims: number
  recorded: number
  refused: number
  retried: number
  gaveUp: number
  recovered: number
  dedupedByKey: number
  cancelledProcessing: number
  ranAgain: number
}
const coverage: Coverage = {
  claims: 0,
  recorded: 0,
  refused: 0,
  retried: 0,
  gaveUp: 0,
  recovered: 0,
  dedupedByKey: 0,
  cancelledProcessing: 0,
  ranAgain: 0
}

/** One store under test, with what the program knows of it. */
class Side {
  /** Payload label (`#3`) to item id, and back. */
  readonly idOf = new Map<string, string>()
  readonly labelOf = new Map<string, string>()
  /** Claims received and not yet handed back (recorded, or refused), in the order received. */
  held: Array<QueueClaim> = []
  constructor(
    readonly name: string,
    readonly store: Store,
    readonly run: Run,
    /** The execution log, newest first (the port has no reader). */
    readonly processed: Effect.Effect<ReadonlyArray<ProcessedItem.ProcessedItem>>
  ) {}
  /** The label of an item id; one the program never saw is an error of the store. */
  label(id: string): string {
    return this.labelOf.get(id) ?? `?${id}`
  }
  learn(id: string, label: string): string {
    const known = this.labelOf.get(id)
    if (known !== undefined) return known
    this.idOf.set(label, id)
    this.labelOf.set(id, label)
    return label
  }
  /** The effect's result, or its failure as a value: a failure on one side only is a divergence too. */
  attempt<A, E>(effect: Effect.Effect<A, E>): Promise<Either.Either<A, string>> {
    return this.run(
      Effect.either(effect).pipe(
        Effect.map(Either.mapLeft((e) => String((e as { _tag?: string })._tag ?? e))),
        Effect.catchAllDefect((d) => Effect.succeed(Either.left(`defect: ${String(d)}`)))
      )
    )
  }
}

/** The program's context: its task types, keys and time base. */
interface Ctx {
  readonly n: number
  readonly base: number
  readonly typeName: (t: TypeName) => string
  readonly key: (k: 0 | 1) => string
}

const rel = (base: number, d: Date | null): number | null => (d === null ? null : d.getTime() - base)
const suffix = (taskType: string) => taskType.slice(taskType.lastIndexOf("-") + 1)

const normItem = (ctx: Ctx, side: Side, item: QueueItem) => ({
  label: side.label(item.id),
  payload: item.payload,
  type: suffix(item.taskType),
  status: item.status,
  priority: item.priority,
  maxRuns: item.maxRuns,
  thread: item.thread,
  runAfter: rel(ctx.base, item.runAfter),
  uniqueKey: item.uniqueKey === null ? null : suffix(item.uniqueKey),
  createdAt: rel(ctx.base, item.createdAt)
})

const normClaim = (ctx: Ctx, side: Side, c: QueueClaim) => ({
  ...normItem(ctx, side, c.item),
  runsDone: c.runsDone,
  attempt: c.attempt
})

const normLog = (ctx: Ctx, side: Side) =>
  side.run(side.processed).then((rows) =>
    rows
      .filter((r) => r.taskType.startsWith(`d${ctx.n}-`))
      .map((r) => ({
        item: side.label(r.queueItemId),
        payload: r.payload,
        type: suffix(r.taskType),
        status: r.status,
        errorMsg: r.errorMsg,
        durationMs: r.durationMs,
        startedAt: rel(ctx.base, r.startedAt),
        finishedAt: rel(ctx.base, r.finishedAt)
      }))
      // A batch of results is written by up to three statements in Postgres (row leases, run-once items, repeating
      // items), so the log's id order within one batch is the store's own business: compare the log as a set.
      .sort((x, y) => (JSON.stringify(x) < JSON.stringify(y) ? -1 : 1))
  )

const enqueueInput = (ctx: Ctx, spec: ItemSpec, label: string, now: number): EnqueueInput => ({
  taskType: ctx.typeName(spec.type),
  payload: label,
  thread: spec.thread,
  maxRuns: spec.maxRuns,
  priority: spec.priority,
  runAfter: spec.delay === 0 ? undefined : new Date(now + spec.delay * SECOND),
  uniqueKey: spec.key === null ? undefined : ctx.key(spec.key),
  retry: itemPolicies[spec.retry]
})

/** The held claims a step picks, by position (the same positions on both sides). */
const picked = (side: Side, picks: ReadonlyArray<number>): Array<QueueClaim> =>
  side.held.length === 0 ? [] : picks.map((i) => side.held[i % side.held.length]!)

const results = (ctx: Ctx, program: Program, claims: ReadonlyArray<QueueClaim>, step: Pick, now: number) =>
  claims.map(
    (claim, i): RecordInput => ({
      claim,
      result: {
        startedAt: new Date(now - step.duration),
        finishedAt: new Date(now),
        error: step.failed[i % step.failed.length] ? `boom ${i}` : undefined
      },
      retry: typePolicies[program.typeRetry[suffix(claim.item.taskType) as TypeName]]
    })
  )

const claimOptions = (ctx: Ctx, types: ReadonlyArray<TypeName>, limit: number, owner: string, now: number) => ({
  limit,
  taskTypes: types.map(ctx.typeName),
  owner,
  leaseUntil: new Date(now + 30 * SECOND),
  now: new Date(now),
  // A forever-repeating item waits 10 s after each start.
  repeatAfter: new Date(now + 10 * SECOND)
})

/** Hands back the claims given to a record: recorded or refused, the program holds them no more. */
const release = (side: Side, claims: ReadonlyArray<QueueClaim>) => {
  const gone = new Set(claims)
  side.held = side.held.filter((c) => !gone.has(c))
}

/**
 * Runs one step against one side; returns its normalised answer. `labels` are the payload labels the step's
 * enqueues use (the same on both sides).
 */
const runStep = async (
  ctx: Ctx,
  program: Program,
  side: Side,
  step: Step,
  now: number,
  labels: ReadonlyArray<string>
): Promise<unknown> => {
  const { store } = side
  switch (step.op) {
    case "enqueue": {
      const r = await side.attempt(store.enqueue(enqueueInput(ctx, step.item, labels[0]!, now), new Date(now)))
      if (Either.isLeft(r)) return { error: r.left }
      side.learn(r.right.id, labels[0]!)
      return normItem(ctx, side, r.right)
    }
    case "enqueueMany": {
      const inputs = step.items.map((spec, i) => enqueueInput(ctx, spec, labels[i]!, now))
      const r = await side.attempt(store.enqueueMany(inputs, new Date(now)))
      if (Either.isLeft(r)) return { error: r.left }
      return r.right.map((id, i) => side.learn(id, labels[i]!))
    }
    case "claim": {
      const r = await side.attempt(store.claimBatch(claimOptions(ctx, step.types, step.limit, step.owner, now)))
      if (Either.isLeft(r)) return { error: r.left }
      side.held.push(...r.right)
      return r.right.map((c) => normClaim(ctx, side, c))
    }
    case "record": {
      const claims = picked(side, step.picks)
      const r = await side.attempt(store.recordResults(results(ctx, program, claims, step, now)))
      release(side, claims)
      return Either.isLeft(r) ? { error: r.left } : r.right
    }
    case "recordAndClaim": {
      const claims = picked(side, step.picks)
      const options = claimOptions(ctx, step.types, step.limit, step.owner, now)
      const r = await side.attempt(store.recordAndClaim(results(ctx, program, claims, step, now), options))
      release(side, claims)
      if (Either.isLeft(r)) return { error: r.left }
      side.held.push(...r.right.claims)
      return { recorded: r.right.recorded, claims: r.right.claims.map((c) => normClaim(ctx, side, c)) }
    }
    case "renew": {
      const claims = picked(side, step.picks)
      const r = await side.attempt(store.renewLeases(claims, new Date(now + 30 * SECOND), new Date(now)))
      if (Either.isLeft(r)) return { error: r.left }
      // Which of the picked claims still hold their lease, in the order picked: per execution, so an execution taken
      // back and the item's later one (in Postgres both under the item's row, with one lease id) are told apart.
      return { held: r.right }
    }
    case "advance":
      return null
    case "recover": {
      const r = await side.attempt(store.recoverStuck(new Date(now), step.owner ?? undefined))
      return Either.isLeft(r) ? { error: r.left } : r.right
    }
    case "crash": {
      const answers: Array<unknown> = []
      for (let k = 0; k < step.times; k++) {
        const at = now + k * 40 * SECOND
        const claimed = await side.attempt(store.claimBatch(claimOptions(ctx, step.types, 4, "w2", at)))
        const recovered = await side.attempt(store.recoverStuck(new Date(at + 40 * SECOND)))
        answers.push({
          claimed: Either.map(claimed, (cs) => cs.map((c) => normClaim(ctx, side, c))),
          recovered
        })
      }
      return answers
    }
    case "cancel": {
      const known =
        step.running && side.held.length > 0 ? side.held.map((c) => side.label(c.item.id)) : [...side.idOf.keys()]
      if (known.length === 0) return null
      const label = known[step.pick % known.length]!
      const r = await side.attempt(store.cancel(side.idOf.get(label)!))
      return Either.isLeft(r) ? { error: r.left } : { label, status: Option.getOrNull(r.right) }
    }
    case "observe": {
      const types = ["a", "b"].map((t) => ctx.typeName(t as TypeName))
      const r = await side.attempt(
        Effect.all({
          pending: store.pendingCount(),
          nextRunAfter: store.nextRunAfter(types, new Date(now)),
          nextLeaseExpiryW1: store.nextLeaseExpiry("w1"),
          nextLeaseExpiry: store.nextLeaseExpiry("nobody")
        })
      )
      if (Either.isLeft(r)) return { error: r.left }
      const at = (o: Option.Option<Date>) => Option.getOrNull(Option.map(o, (d) => rel(ctx.base, d)))
      return {
        pending: r.right.pending,
        nextRunAfter: at(r.right.nextRunAfter),
        nextLeaseExpiryW1: at(r.right.nextLeaseExpiryW1),
        nextLeaseExpiry: at(r.right.nextLeaseExpiry)
      }
    }
  }
}

/** What is left an hour after the program: rescued, then claimed and cancelled round by round until none is. */
const leftovers = async (ctx: Ctx, side: Side, now: number) => {
  const recovered = await side.run(side.store.recoverStuck(new Date(now)))
  const rounds: Array<unknown> = []
  for (let round = 0; round < 50; round++) {
    const claims = await side.run(side.store.claimBatch(claimOptions(ctx, ["a", "b"], 1000, "end", now)))
    if (claims.length === 0) break
    rounds.push(claims.map((c) => normClaim(ctx, side, c)))
    // Cancelled in the order claimed (an item claimed twice, a concurrent repetition, is cancelled once): a
    // sequential type's next item can be claimed in the next round.
    for (const id of new Set(claims.map((c) => c.item.id))) await side.run(side.store.cancel(id))
  }
  return { recovered, rounds }
}

/** Compares the two answers of one step: a divergence names the step and shows both. */
const same = (where: string, memory: unknown, other: unknown, otherName: string) => {
  try {
    expect(other).toEqual(memory)
  } catch {
    throw new Error(`${where}\n  memory:   ${JSON.stringify(memory)}\n  ${otherName}: ${JSON.stringify(other)}`)
  }
}

const count = (answer: unknown, step: Step) => {
  if (step.op === "claim" && Array.isArray(answer)) coverage.claims += answer.length
  if (step.op === "recordAndClaim") coverage.claims += (answer as { claims?: Array<unknown> }).claims?.length ?? 0
  if ((step.op === "record" || step.op === "recordAndClaim") && answer !== null && typeof answer === "object") {
    const recorded = Array.isArray(answer) ? answer : (answer as { recorded?: ReadonlyArray<boolean> }).recorded
    for (const r of recorded ?? [])
      if (r) coverage.recorded++
      else coverage.refused++
  }
  if (step.op === "recover" && typeof answer === "number") coverage.recovered += answer
  if (step.op === "cancel" && (answer as { status?: string } | null)?.status === "processing")
    coverage.cancelledProcessing++
}

/** Runs one program against two sides in lockstep, comparing each answer, then the log and the leftovers. */
const runProgram = async (n: number, program: Program, memory: Side, other: Side) => {
  const ctx: Ctx = {
    n,
    base: T0 + n * DAY,
    typeName: (t) => `d${n}-${t}`,
    key: (k) => `d${n}-key${k}`
  }
  let now = ctx.base
  let nextLabel = 0
  for (const [i, step] of program.steps.entries()) {
    if (step.op === "advance") now += step.seconds * SECOND
    const after = step.op === "crash" ? now + step.times * 40 * SECOND : now
    const size = step.op === "enqueue" ? 1 : step.op === "enqueueMany" ? step.items.length : 0
    const labels = Array.from({ length: size }, () => `#${nextLabel++}`)
    const m = await runStep(ctx, program, memory, step, now, labels)
    const o = await runStep(ctx, program, other, step, now, labels)
    same(`step ${i} ${JSON.stringify(step)} at +${(now - ctx.base) / SECOND}s`, m, o, other.name)
    now = after
    count(m, step)
    if (step.op === "enqueue" && m !== null && typeof m === "object" && "label" in m && m.label !== labels[0])
      coverage.dedupedByKey++
  }
  const end = now + 60 * 60 * SECOND
  const [ml, ol] = [await leftovers(ctx, memory, end), await leftovers(ctx, other, end)]
  same("leftovers an hour later", ml, ol, other.name)
  const [mlog, olog] = [await normLog(ctx, memory), await normLog(ctx, other)]
  same("the log", mlog, olog, other.name)
  for (const row of mlog) {
    if (row.errorMsg.startsWith("gave up")) coverage.gaveUp++
  }
  // Items that ran more than once (repeating, or retried), and failures that were retried (their item ran again,
  // finishing later).
  const runsOf = new Map<string, number>()
  for (const row of mlog) runsOf.set(row.item, (runsOf.get(row.item) ?? 0) + 1)
  for (const runs of runsOf.values()) if (runs > 1) coverage.ranAgain++
  for (const row of mlog) {
    if (row.status === "error" && mlog.some((r) => r.item === row.item && r.startedAt! > row.finishedAt!))
      coverage.retried++
  }
}

const memorySide = (): Side => {
  const { memory, store } = Effect.runSync(
    Effect.provideService(MemoryQueueStore.make, MemoryDatabase.MemoryDatabase, MemoryDatabase.make())
  )
  return new Side(
    "memory",
    store,
    (effect) => Effect.runPromise(effect),
    Effect.map(memory.processed, (log) => [...log].reverse())
  )
}

// ---------------------------------------------------------------------------------------------------------------
// The tests

const PgQueue = Layer.unwrapEffect(
  Effect.map(TestSchema, (schema) => Layer.merge(PgQueueStore.layer({ schema }), queueInspector(schema)))
).pipe(Layer.provideMerge(PgMigrated("qdiff")))

describe("QueueStore: memory and Postgres answer alike", () => {
  let runtime: ManagedRuntime.ManagedRuntime<QueueStore | QueueInspector | SqlClient.SqlClient | TestSchema, unknown>
  let pg: Side
  /**
   * Empties the queue after a program, whatever happened to it; returns what the program left: its items, and
   * leases whose item is gone.
   */
  let cleanUp: (n: number) => Promise<{ readonly items: number; readonly orphanLeases: number }>

  beforeAll(async () => {
    runtime = ManagedRuntime.make(PgQueue)
    const store = await runtime.runPromise(QueueStore)
    const inspector = await runtime.runPromise(QueueInspector)
    pg = new Side("postgres", store, (effect) => runtime.runPromise(effect), inspector.processed(100_000))
    cleanUp = (n) =>
      runtime.runPromise(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const schema = yield* TestSchema
          const items = sql(`${schema}.queue_items`)
          const leases = sql(`${schema}.queue_leases`)
          const [left] = yield* sql<{ items: number; orphanLeases: number }>`SELECT
            (SELECT count(*) FROM ${items} WHERE task_type LIKE ${`d${n}-%`})::int AS items,
            (SELECT count(*) FROM ${leases} l
              WHERE NOT EXISTS (SELECT 1 FROM ${items} i WHERE i.id = l.item_id))::int AS "orphanLeases"`
          // The schema is this file's own: the next program starts from an empty queue whatever this one did.
          yield* sql`DELETE FROM ${leases}`
          yield* sql`DELETE FROM ${items}`
          return left!
        })
      )
  }, 120_000)

  afterAll(async () => {
    await runtime?.dispose()
  })

  it("random programs: every answer, the log and the leftovers match", { timeout: 300_000 }, async () => {
    let n = 0
    await fc.assert(
      fc.asyncProperty(programArb, async (program) => {
        const id = ++n
        let completed = false
        try {
          await runProgram(id, program, memorySide(), pg)
          completed = true
        } finally {
          pg.held = []
          pg.idOf.clear()
          pg.labelOf.clear()
          const left = await cleanUp(id)
          // After the leftovers (every item claimed and cancelled) nothing of the program is left, not even a lease
          // of a cancelled item (the rescue would count it, as the memory store, whose cancel takes its leases, does
          // not).
          if (completed) expect(left, "what the program left in Postgres").toEqual({ items: 0, orphanLeases: 0 })
        }
      }),
      { numRuns: RUNS, examples: regressions.map((program) => [program]) }
    )
    // The programs reached the interesting paths (summed over all of them; with the default number of runs or more:
    // a handful of programs may not).
    if (RUNS >= 60) {
      const missed = Object.entries(coverage).flatMap(([path, n]) => (n > 0 ? [] : [path]))
      expect(missed, JSON.stringify(coverage)).toEqual([])
      expect(coverage.claims, JSON.stringify(coverage)).toBeGreaterThan(RUNS)
    }
  })

  it("the comparison catches a store that answers differently", { timeout: 60_000 }, async () => {
    // The memory store against itself with one rule broken: a rescue that ignores its owner. The same programs
    // must find it (fast-check's failure is the expected outcome).
    const mutant = (): Side => {
      const side = memorySide()
      const store: Store = { ...side.store, recoverStuck: (now) => side.store.recoverStuck(now) }
      return new Side("mutant", store, side.run, side.processed)
    }
    let n = 10_000
    const outcome = await fc.check(
      fc.asyncProperty(programArb, async (program) => {
        await runProgram(++n, program, memorySide(), mutant())
      }),
      { numRuns: 500, endOnFailure: true }
    )
    expect(outcome.failed).toBe(true)
    expect(String(outcome.errorInstance)).toContain("recover")
  })
})
