/**
 * The JobStore contract: one suite, run against the memory store and the Postgres store, so they cannot drift.
 */
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Option, type Layer } from "effect"
import { JobStore, type JobDefinition, Schedule } from "../../src/index.js"
import type { JobRun, ScheduledJob } from "../../src/domain/ScheduledJob.js"

/** What the suite reads besides the port: every run and job as stored. */
export class StoreInspector extends Context.Tag("test/StoreInspector")<
  StoreInspector,
  {
    readonly runs: (jobId: string) => Effect.Effect<ReadonlyArray<JobRun>>
    readonly job: (jobId: string) => Effect.Effect<ScheduledJob | undefined>
  }
>() {}

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
let counter = 0
const unique = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 8)}`

const def = (overrides: Partial<JobDefinition> = {}): JobDefinition => ({
  name: unique("job"),
  taskType: "t",
  schedule: Schedule.encode(Schedule.interval({ every: "1 minute" })),
  payload: "",
  nextRunAt: at(60),
  missedSlots: null,
  overlap: "skip",
  ...overrides
})

const addJob = (overrides: Partial<JobDefinition> = {}) =>
  Effect.flatMap(JobStore, (s) => s.upsertJobs([def(overrides)], T0)).pipe(Effect.map((jobs) => jobs[0]!))

export const suite = (name: string, storeLayer: Layer.Layer<JobStore | StoreInspector, unknown>) =>
  layer(storeLayer, { timeout: "60 seconds", excludeTestServices: true })(`JobStore contract: ${name}`, (it) => {
    it.effect("upsertJobs inserts by name, is idempotent, and recomputes the slot only when the schedule changes", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const d = def({ payload: `{"a":1}` })
        const [first] = yield* store.upsertJobs([d], T0)
        const [again] = yield* store.upsertJobs([{ ...d, nextRunAt: at(999) }], at(5))
        expect(again!.id).toBe(first!.id)
        expect(again!.nextRunAt?.toISOString()).toBe(at(60).toISOString())
        expect(again!.payload).toBe(`{"a":1}`)
        const changed = Schedule.encode(Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" }))
        const [moved] = yield* store.upsertJobs([{ ...d, schedule: changed, nextRunAt: at(500) }], at(6))
        expect(moved!.id).toBe(first!.id)
        expect(moved!.nextRunAt?.toISOString()).toBe(at(500).toISOString())
        expect(moved!.schedule).toEqual({ _tag: "Daily", hour: 9, minute: 0, tz: "Europe/Berlin" })
        // A disabled job defined again comes back, with a fresh slot.
        yield* store.disableJob(first!.id, at(7))
        const [back] = yield* store.upsertJobs([{ ...d, schedule: changed, nextRunAt: at(700) }], at(8))
        expect(back!.enabled).toBe(true)
        expect(back!.nextRunAt?.toISOString()).toBe(at(700).toISOString())
      })
    )

    it.effect("listDue returns enabled jobs due at now, earliest first, up to the limit", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const base = 10_000 + Math.floor(Math.random() * 1_000_000)
        const late = yield* addJob({ nextRunAt: at(base + 20) })
        const early = yield* addJob({ nextRunAt: at(base + 10) })
        const future = yield* addJob({ nextRunAt: at(base + 40) })
        const disabled = yield* addJob({ nextRunAt: at(base + 5) })
        yield* store.disableJob(disabled.id, T0)
        const due = yield* store.transaction(store.listDue(at(base + 30), 100))
        const mine = due.map((j) => j.id).filter((id) => [late.id, early.id, future.id, disabled.id].includes(id))
        expect(mine).toEqual([early.id, late.id])
        const one = yield* store.transaction(store.listDue(at(base + 30), 1))
        expect(one.length).toBe(1)
        // Other jobs of the suite may be due too; the earliest comes first.
        expect(one[0]!.nextRunAt!.getTime()).toBeLessThanOrEqual(at(base + 10).getTime())
      })
    )

    it.effect("createRun: a running run gets a lease token, a pending one a due time, a final one its timestamps", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const running = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(60),
          attempt: 1,
          status: "running",
          owner: "me",
          leaseUntil: at(90),
          now: at(61)
        })
        expect(running).toMatchObject({ status: "running", owner: "me", attempt: 1, finishedAt: null })
        expect(running.leaseToken).not.toBeNull()
        expect(running.leaseUntil?.toISOString()).toBe(at(90).toISOString())
        expect(running.startedAt?.toISOString()).toBe(at(61).toISOString())
        const pending = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(60),
          attempt: 2,
          status: "pending",
          dueAt: at(120),
          now: at(62)
        })
        expect(pending).toMatchObject({ status: "pending", startedAt: null, leaseToken: null })
        expect(pending.dueAt?.toISOString()).toBe(at(120).toISOString())
        const skipped = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(120),
          attempt: 1,
          status: "skipped",
          error: "why",
          now: at(121)
        })
        expect(skipped.startedAt?.toISOString()).toBe(at(121).toISOString())
        expect(skipped.finishedAt?.toISOString()).toBe(at(121).toISOString())
        expect(skipped.error).toBe("why")
      })
    )

    it.effect("a second run for the same (job, slot, attempt) is a Conflict", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const run = { jobId: job.id, scheduledFor: at(60), attempt: 1, status: "failed" as const, now: at(61) }
        yield* store.createRun(run)
        const again = yield* Effect.either(store.createRun(run))
        expect(Either.isLeft(again) && again.left.reason).toBe("Conflict")
        const inspector = yield* StoreInspector
        expect((yield* inspector.runs(job.id)).length).toBe(1)
      })
    )

    it.effect("a failed transaction leaves nothing behind", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const result = yield* Effect.either(
          store.transaction(
            Effect.gen(function* () {
              yield* store.createRun({
                jobId: job.id,
                scheduledFor: at(60),
                attempt: 1,
                status: "running",
                owner: "x",
                leaseUntil: at(90),
                now: at(60)
              })
              yield* store.updateNextRun(job.id, at(120), at(60))
              return yield* Effect.fail("boom" as const)
            })
          )
        )
        expect(Either.isLeft(result)).toBe(true)
        const inspector = yield* StoreInspector
        expect((yield* inspector.runs(job.id)).length).toBe(0)
        expect((yield* inspector.job(job.id))!.nextRunAt?.toISOString()).toBe(at(60).toISOString())
      })
    )

    it.effect("renewal and completion are fenced by the lease token", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const run = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(60),
          attempt: 1,
          status: "running",
          owner: "a",
          leaseUntil: at(90),
          now: at(60)
        })
        const lease = { runId: run.id, token: run.leaseToken! }
        const stranger = { runId: run.id, token: "not-the-token" }
        expect(yield* store.renewLease(stranger, at(200), at(70))).toBe(false)
        expect(yield* store.markSuccess(stranger, "{}", at(70))).toBe(false)
        expect(yield* store.markFailed(stranger, "x", at(70))).toBe(false)
        expect(yield* store.renewLease(lease, at(120), at(70))).toBe(true)
        expect(yield* store.markSuccess(lease, `{"n":1}`, at(80))).toBe(true)
        // Finished: nothing can be written over it, not even with its own token.
        expect(yield* store.markFailed(lease, "late", at(81))).toBe(false)
        expect(yield* store.renewLease(lease, at(300), at(81))).toBe(false)
        const [stored] = yield* (yield* StoreInspector).runs(job.id)
        expect(stored).toMatchObject({ status: "success", output: `{"n":1}`, error: null })
        expect(stored!.finishedAt?.toISOString()).toBe(at(80).toISOString())
      })
    )

    it.effect("markRunning takes a pending run once, with a fresh lease", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const pending = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(60),
          attempt: 2,
          status: "pending",
          dueAt: at(100),
          now: at(61)
        })
        const lease = yield* store.markRunning(pending.id, { now: at(100), owner: "b", leaseUntil: at(130) })
        expect(Option.isSome(lease)).toBe(true)
        const twice = yield* store.markRunning(pending.id, { now: at(101), owner: "c", leaseUntil: at(131) })
        expect(Option.isNone(twice)).toBe(true)
        const [stored] = yield* (yield* StoreInspector).runs(job.id)
        expect(stored).toMatchObject({ status: "running", owner: "b", dueAt: null })
        expect(stored!.leaseToken).toBe(Option.getOrThrow(lease).token)
      })
    )

    it.effect("listDueRetries, listExpired and hasLiveRun see exactly the runs they should", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const base = 2_000_000 + Math.floor(Math.random() * 1_000_000)
        const dueRetry = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(60),
          attempt: 2,
          status: "pending",
          dueAt: at(base + 10),
          now: at(61)
        })
        const laterRetry = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(120),
          attempt: 2,
          status: "pending",
          dueAt: at(base + 50),
          now: at(121)
        })
        const expired = yield* store.createRun({
          jobId: job.id,
          scheduledFor: at(180),
          attempt: 1,
          status: "running",
          owner: "dead",
          leaseUntil: at(base + 5),
          now: at(181)
        })
        const now = at(base + 20)
        const retries = (yield* store.transaction(store.listDueRetries(now, 1000))).map((r) => r.run.id)
        expect(retries).toContain(dueRetry.id)
        expect(retries).not.toContain(laterRetry.id)
        const lost = yield* store.transaction(store.listExpired(now, 1000))
        const mine = lost.filter((r) => r.job.id === job.id)
        expect(mine.map((r) => r.run.id)).toEqual([expired.id])
        expect(mine[0]!.job.name).toBe(job.name)
        expect(yield* store.hasLiveRun(job.id, now)).toBe(false)
        expect(yield* store.hasLiveRun(job.id, at(base + 1))).toBe(true)
      })
    )

    it.effect("nextWakeAt is the earliest enabled slot or pending retry", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const wake = yield* store.nextWakeAt(T0)
        // The suite shares one store: everything it added is due at or after T0 + 5 s, or pending.
        expect(Option.isSome(wake)).toBe(true)
        const job = yield* addJob({ nextRunAt: new Date("2000-01-01T00:00:00Z") })
        expect(Option.getOrThrow(yield* store.nextWakeAt(T0)).toISOString()).toBe("2000-01-01T00:00:00.000Z")
        yield* store.disableJob(job.id, T0)
        expect(Option.getOrThrow(yield* store.nextWakeAt(T0)).getTime()).toBeGreaterThan(
          Date.parse("2000-01-01T00:00:00Z")
        )
      })
    )
  })
