/**
 * The JobStore contract: one suite, run against the memory store and the Postgres store, so they cannot drift.
 * The suite shares one store; a test that asserts exact lists works in task types of its own.
 */
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Option, type Layer } from "effect"
import { JobStore, type JobDefinition, type Lease, type RunSlot, Schedule } from "../../src/index.js"
import type { JobRun, ScheduledJob } from "../../src/domain/ScheduledJob.js"

/** What the suite reads besides the port: every run and job as stored. */
export class StoreInspector extends Context.Tag("test/StoreInspector")<
  StoreInspector,
  {
    readonly runs: (jobId: string) => Effect.Effect<ReadonlyArray<JobRun>>
    readonly job: (jobId: string) => Effect.Effect<ScheduledJob | undefined>
    /** An operator's `UPDATE scheduled_jobs SET enabled = … WHERE id = …`, outside the port. */
    readonly setEnabled: (jobId: string, enabled: boolean) => Effect.Effect<void>
  }
>() {}

const T0 = new Date("2026-01-01T00:00:00Z")
const at = (s: number) => new Date(T0.getTime() + s * 1000)
const iso = (d: Date | null | undefined) => d?.toISOString()
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

const slot = (jobId: string, scheduledFor: Date, attempt = 1): RunSlot => ({ jobId, scheduledFor, attempt })

/** Starts the first attempt at a slot, leased by `owner` until `leaseUntil`. */
const start = (jobId: string, scheduledFor: Date, options: { owner?: string; leaseUntil?: Date; now?: Date } = {}) =>
  Effect.flatMap(JobStore, (store) =>
    Effect.map(
      store.startRuns([slot(jobId, scheduledFor)], {
        owner: options.owner ?? "me",
        leaseUntil: options.leaseUntil ?? new Date(scheduledFor.getTime() + 30_000),
        now: options.now ?? scheduledFor
      }),
      (started) => started[0]!
    )
  )

const runsOf = (jobId: string) => Effect.flatMap(StoreInspector, (inspector) => inspector.runs(jobId))

export const suite = (name: string, storeLayer: Layer.Layer<JobStore | StoreInspector, unknown>) =>
  layer(storeLayer, { timeout: "60 seconds", excludeTestServices: true })(`JobStore contract: ${name}`, (it) => {
    it.effect("upsertJobs inserts by name, is idempotent, and recomputes the slot only when the schedule changes", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const d = def({ payload: `{"a":1}` })
        const [first] = yield* store.upsertJobs([d], T0)
        const [again] = yield* store.upsertJobs([{ ...d, nextRunAt: at(999) }], at(5))
        expect(again!.id).toBe(first!.id)
        expect(iso(again!.nextRunAt)).toBe(iso(at(60)))
        expect(again!.payload).toBe(`{"a":1}`)
        const changed = Schedule.encode(Schedule.daily({ hour: 9, minute: 0, tz: "Europe/Berlin" }))
        const [moved] = yield* store.upsertJobs([{ ...d, schedule: changed, nextRunAt: at(500) }], at(6))
        expect(moved!.id).toBe(first!.id)
        expect(iso(moved!.nextRunAt)).toBe(iso(at(500)))
        expect(moved!.schedule).toEqual({ _tag: "Daily", hour: 9, minute: 0, tz: "Europe/Berlin" })
      })
    )

    it.effect("a cron schedule is stored as its JSON and read back as it, alone or after another schedule", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const inspector = yield* StoreInspector
        const cron = Schedule.cron("0 9 * * MON-FRI", { tz: "Europe/Paris" })
        const d = def({ schedule: Schedule.encode(cron), nextRunAt: Schedule.next(cron, T0) })
        const [job] = yield* store.upsertJobs([d], T0)
        expect(job!.schedule).toEqual({ _tag: "Cron", expression: "0 9 * * MON-FRI", tz: "Europe/Paris" })
        expect(Schedule.decode(job!.schedule)).toEqual(Either.right(cron))
        // 2026-01-01 is a Thursday: 09:00 in Paris (UTC+1).
        expect(iso(job!.nextRunAt)).toBe("2026-01-01T08:00:00.000Z")
        expect((yield* inspector.job(job!.id))!.schedule).toEqual(job!.schedule)
        const every5 = Schedule.encode(Schedule.cron("*/5 * * * *"))
        const [moved] = yield* store.upsertJobs([{ ...d, schedule: every5, nextRunAt: at(300) }], at(1))
        expect(moved!.schedule).toEqual({ _tag: "Cron", expression: "*/5 * * * *" })
        expect(iso(moved!.nextRunAt)).toBe(iso(at(300)))
      })
    )

    it.effect("upsertJobs never re-enables a disabled job, and still applies the rest of the definition", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const inspector = yield* StoreInspector
        const d = def({ payload: "v1" })
        const [job] = yield* store.upsertJobs([d], T0)
        expect(job!.enabled).toBe(true)
        // Disabled by an operator in SQL, then an instance restarts with the same definition: still disabled.
        yield* inspector.setEnabled(job!.id, false)
        const [same] = yield* store.upsertJobs([{ ...d, nextRunAt: at(900) }], at(5))
        expect(same!.enabled).toBe(false)
        expect(iso(same!.nextRunAt)).toBe(iso(at(60)))
        // A new definition: schedule, payload, task type and policies follow; `enabled` does not.
        const daily = Schedule.encode(Schedule.daily({ hour: 4, minute: 30 }))
        const [changed] = yield* store.upsertJobs(
          [
            {
              ...d,
              taskType: "t2",
              payload: "v2",
              schedule: daily,
              nextRunAt: at(700),
              missedSlots: "skip",
              overlap: "allow"
            }
          ],
          at(6)
        )
        expect(changed).toMatchObject({
          enabled: false,
          taskType: "t2",
          payload: "v2",
          missedSlots: "skip",
          overlap: "allow"
        })
        expect(changed!.schedule).toEqual({ _tag: "Daily", hour: 4, minute: 30 })
        expect(iso(changed!.nextRunAt)).toBe(iso(at(700)))
        expect((yield* inspector.job(job!.id))!.enabled).toBe(false)
        // Disabled by disableJob (an undecodable schedule) or by disableJobsExcept: the same.
        yield* inspector.setEnabled(job!.id, true)
        yield* store.disableJob(job!.id, at(7))
        expect((yield* store.upsertJobs([d], at(8)))[0]!.enabled).toBe(false)
        yield* inspector.setEnabled(job!.id, true)
        const other = def()
        yield* store.upsertJobs([other], at(9))
        expect(yield* store.disableJobsExcept([other.name], at(10))).toBeGreaterThanOrEqual(1)
        expect((yield* store.upsertJobs([d], at(11)))[0]!.enabled).toBe(false)
        // Only an explicit enable turns it back on; the upsert then keeps it on.
        yield* inspector.setEnabled(job!.id, true)
        expect((yield* store.upsertJobs([d], at(12)))[0]!.enabled).toBe(true)
        // disableJobsExcept touches no job it was told to keep.
        expect((yield* inspector.job((yield* store.upsertJobs([other], at(13)))[0]!.id))!.enabled).toBe(true)
      })
    )

    it.effect(
      "a disabled job's pending retries stay pending, unseen by listDueRetries and nextWakeAt, until enabled",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const inspector = yield* StoreInspector
          const type = unique("disabled-retry")
          const job = yield* addJob({ taskType: type, nextRunAt: at(10_000) })
          const retry = yield* store.scheduleRetry(slot(job.id, at(60), 2), at(100), at(61))
          const due = store.transaction(store.listDueRetries(at(200), 100, [type]))
          expect((yield* due).map((r) => r.run.id)).toEqual([retry.id])
          yield* store.disableJob(job.id, at(150))
          expect(yield* due).toEqual([])
          // An idle runner must not wake for it (a past due_at would make it spin).
          expect(yield* store.nextWakeAt(at(200), [type])).toEqual(Option.none())
          expect((yield* runsOf(job.id)).map((r) => [r.id, r.status])).toEqual([[retry.id, "pending"]])
          // Enabled again while the retry is still due: it is taken like any due retry.
          yield* inspector.setEnabled(job.id, true)
          expect(Option.map(yield* store.nextWakeAt(at(200), [type]), iso)).toEqual(Option.some(iso(at(100))))
          const taken = yield* store.transaction(
            Effect.flatMap(store.listDueRetries(at(200), 100, [type]), (runs) =>
              Effect.forEach(runs, (r) =>
                store.startRetry(r.run.id, { owner: "me", leaseUntil: at(260), now: at(200) })
              )
            )
          )
          expect(taken.map(Option.isSome)).toEqual([true])
          expect((yield* runsOf(job.id)).map((r) => r.status)).toEqual(["running"])
        })
    )

    it.effect(
      "a retry of a job that must not overlap waits while another run of it goes; an idle runner wakes at a lease's expiry",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const type = unique("overlap-retry")
          const job = yield* addJob({ taskType: type, nextRunAt: at(10_000) })
          const retry = yield* store.scheduleRetry(slot(job.id, at(60), 2), at(100), at(61))
          // Another slot of the job runs now, its lease live until 400.
          yield* store.transaction(
            store.startRuns([slot(job.id, at(120), 1)], { owner: "other", leaseUntil: at(400), now: at(120) })
          )
          const due = (now: Date) => store.transaction(store.listDueRetries(now, 100, [type]))
          expect(yield* due(at(200))).toEqual([])
          // Nothing to wake for but that lease's expiry (the retry's past due time would make a runner spin).
          expect(Option.map(yield* store.nextWakeAt(at(200), [type]), iso)).toEqual(Option.some(iso(at(400))))
          // Once the lease expired (its owner died), the retry may start: overlap is judged by live leases.
          expect((yield* due(at(401))).map((r) => r.run.id)).toEqual([retry.id])
        })
    )

    it.effect(
      "setJobEnabled pauses and resumes by name; a paused job is not due, and a re-definition keeps it paused",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const taskType = unique("pause")
          const d = def({ taskType, nextRunAt: at(10) })
          const [job] = yield* store.upsertJobs([d], T0)
          const paused = yield* store.setJobEnabled(d.name, false, at(1))
          expect(Option.map(paused, (j) => [j.id, j.enabled])).toEqual(Option.some([job!.id, false]))
          expect(yield* store.listDue(at(20), 10, [taskType])).toEqual([])
          yield* store.upsertJobs([{ ...d, payload: "v2" }], at(2))
          expect(yield* store.listDue(at(20), 10, [taskType])).toEqual([])
          const resumed = yield* store.setJobEnabled(d.name, true, at(3))
          expect(Option.map(resumed, (j) => [j.enabled, j.payload])).toEqual(Option.some([true, "v2"]))
          expect((yield* store.listDue(at(20), 10, [taskType])).map((due) => due.job.id)).toEqual([job!.id])
          expect(yield* store.setJobEnabled(unique("no-such-job"), false, at(4))).toEqual(Option.none())
        })
    )

    it.effect(
      "runJobNow adds a pending first attempt at now, due now, beside the schedule; none for an unknown name",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const taskType = unique("run-now")
          const d = def({ taskType, nextRunAt: at(3600) })
          const [job] = yield* store.upsertJobs([d], T0)
          const run = yield* store.runJobNow(d.name, at(5))
          expect(Option.map(run, (r) => [r.jobId, iso(r.scheduledFor), r.attempt, r.status, iso(r.dueAt)])).toEqual(
            Option.some([job!.id, iso(at(5)), 1, "pending", iso(at(5))])
          )
          const retries = yield* store.listDueRetries(at(5), 10, [taskType])
          expect(retries.map((r) => [r.job.id, iso(r.run.scheduledFor)])).toEqual([[job!.id, iso(at(5))]])
          // The schedule's own slot did not move.
          expect(iso((yield* Effect.flatMap(StoreInspector, (i) => i.job(job!.id)))?.nextRunAt)).toBe(iso(at(3600)))
          // Paused, its extra slot waits.
          yield* store.setJobEnabled(d.name, false, at(6))
          expect(yield* store.listDueRetries(at(7), 10, [taskType])).toEqual([])
          expect(yield* store.runJobNow(unique("no-such-job"), at(5))).toEqual(Option.none())
        })
    )

    it.effect("upsertJobs takes 8,000 definitions in one call, inserting and then updating them", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        // A type of their own: no other test of the shared store ever sees these jobs.
        const type = unique("bulk")
        const defs = Array.from({ length: 8_000 }, (_, i) =>
          def({ name: `${type}-${String(i).padStart(4, "0")}`, taskType: type, nextRunAt: at(10_000 + i) })
        )
        const inserted = yield* store.upsertJobs(defs, T0)
        expect(inserted.length).toBe(8_000)
        expect(new Set(inserted.map((j) => j.name))).toEqual(new Set(defs.map((d) => d.name)))
        expect(new Set(inserted.map((j) => j.id)).size).toBe(8_000)
        const updated = yield* store.upsertJobs(
          defs.map((d) => ({ ...d, payload: "v2" })),
          at(1)
        )
        expect(updated.length).toBe(8_000)
        expect(new Set(updated.map((j) => j.id))).toEqual(new Set(inserted.map((j) => j.id)))
        expect(updated.every((j) => j.payload === "v2" && j.taskType === type)).toBe(true)
        const byName = new Map(updated.map((j) => [j.name, j]))
        expect(iso(byName.get(`${type}-7999`)!.nextRunAt)).toBe(iso(at(17_999)))
      })
    )

    it.effect("listDue returns enabled jobs of the asked task types due at now, earliest first, up to the limit", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const type = unique("due")
        const late = yield* addJob({ taskType: type, nextRunAt: at(20) })
        const early = yield* addJob({ taskType: type, nextRunAt: at(10) })
        yield* addJob({ taskType: type, nextRunAt: at(40) })
        const disabled = yield* addJob({ taskType: type, nextRunAt: at(5) })
        yield* store.disableJob(disabled.id, T0)
        const due = yield* store.transaction(store.listDue(at(30), 100, [type]))
        expect(due.map((d) => d.job.id)).toEqual([early.id, late.id])
        expect(due.map((d) => d.previousRunning)).toEqual([false, false])
        const one = yield* store.transaction(store.listDue(at(30), 1, [type]))
        expect(one.map((d) => d.job.id)).toEqual([early.id])
      })
    )

    it.effect("listDue, listDueRetries and nextWakeAt ignore task types not asked for", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const [mine, other] = [unique("mine"), unique("other")]
        // The other type is due earlier everywhere, so any leak through the filter would show first.
        const a = yield* addJob({ taskType: mine, nextRunAt: at(40) })
        const b = yield* addJob({ taskType: other, nextRunAt: at(10) })
        const aRetry = yield* store.scheduleRetry(slot(a.id, at(0), 2), at(30), at(1))
        const bRetry = yield* store.scheduleRetry(slot(b.id, at(0), 2), at(5), at(1))
        const now = at(50)
        expect((yield* store.transaction(store.listDue(now, 100, [mine]))).map((d) => d.job.id)).toEqual([a.id])
        expect((yield* store.transaction(store.listDue(now, 100, [other]))).map((d) => d.job.id)).toEqual([b.id])
        expect(yield* store.transaction(store.listDue(now, 100, []))).toEqual([])
        const retries = yield* store.transaction(store.listDueRetries(now, 100, [mine]))
        expect(retries.map((r) => [r.run.id, r.job.id])).toEqual([[aRetry.id, a.id]])
        const both = yield* store.transaction(store.listDueRetries(now, 100, [mine, other]))
        expect(both.map((r) => r.run.id)).toEqual([bRetry.id, aRetry.id])
        expect(yield* store.transaction(store.listDueRetries(now, 100, []))).toEqual([])
        expect(Option.map(yield* store.nextWakeAt(T0, [mine]), iso)).toEqual(Option.some(iso(at(30))))
        expect(Option.map(yield* store.nextWakeAt(T0, [other]), iso)).toEqual(Option.some(iso(at(5))))
        expect(Option.map(yield* store.nextWakeAt(T0, [mine, other]), iso)).toEqual(Option.some(iso(at(5))))
        expect(yield* store.nextWakeAt(T0, [unique("nobody")])).toEqual(Option.none())
      })
    )

    it.effect("listDue's previousRunning is true only with a running run whose lease is live at now", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const type = unique("prev")
        const job = (label: string) => addJob({ name: unique(label), taskType: type, nextRunAt: at(40) })
        const idle = yield* job("idle")
        const live = yield* job("live")
        const expired = yield* job("expired")
        const finished = yield* job("finished")
        const retrying = yield* job("retrying")
        yield* start(live.id, at(0), { leaseUntil: at(100) })
        yield* start(expired.id, at(0), { leaseUntil: at(30) })
        const done = yield* start(finished.id, at(0), { leaseUntil: at(100) })
        expect(
          yield* store.completeRuns([
            {
              lease: done.lease,
              slot: slot(finished.id, at(0)),
              outcome: { _tag: "Succeeded", output: "{}" },
              now: at(1)
            }
          ])
        ).toEqual([true])
        yield* store.scheduleRetry(slot(retrying.id, at(0), 2), at(45), at(1))
        const running = (now: Date) =>
          Effect.map(store.transaction(store.listDue(now, 100, [type])), (due) =>
            Object.fromEntries(due.map((d) => [d.job.id, d.previousRunning]))
          )
        expect(yield* running(at(50))).toEqual({
          [idle.id]: false,
          [live.id]: true,
          [expired.id]: false,
          [finished.id]: false,
          [retrying.id]: false
        })
        // Once its lease has run out, the live run no longer counts either.
        expect((yield* running(at(150)))[live.id]).toBe(false)
      })
    )

    it.effect("startRuns, scheduleRetry, recordSkipped and recordFailed write the run each state calls for", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const [{ lease, run: running }] = (yield* store.startRuns([slot(job.id, at(60))], {
          owner: "me",
          leaseUntil: at(90),
          now: at(61)
        })) as [{ readonly run: JobRun; readonly lease: Lease }]
        expect(running).toMatchObject({ status: "running", owner: "me", attempt: 1, finishedAt: null, dueAt: null })
        expect(lease).toEqual({ runId: running.id, token: running.leaseToken })
        expect(running.leaseToken).not.toBeNull()
        expect(iso(running.leaseUntil)).toBe(iso(at(90)))
        expect(iso(running.startedAt)).toBe(iso(at(61)))
        const pending = yield* store.scheduleRetry(slot(job.id, at(60), 2), at(120), at(62))
        expect(pending).toMatchObject({ status: "pending", attempt: 2, startedAt: null, leaseToken: null, owner: null })
        expect(iso(pending.dueAt)).toBe(iso(at(120)))
        expect(iso(pending.scheduledFor)).toBe(iso(at(60)))
        yield* store.recordSkipped(slot(job.id, at(120)), "why", at(121))
        yield* store.recordFailed(slot(job.id, at(180)), "undecodable", at(181))
        const stored = yield* runsOf(job.id)
        const skipped = stored.find((r) => r.scheduledFor.getTime() === at(120).getTime())!
        expect(skipped).toMatchObject({ status: "skipped", attempt: 1, error: "why", leaseToken: null })
        expect(iso(skipped.startedAt)).toBe(iso(at(121)))
        expect(iso(skipped.finishedAt)).toBe(iso(at(121)))
        const failed = stored.find((r) => r.scheduledFor.getTime() === at(180).getTime())!
        expect(failed).toMatchObject({ status: "failed", attempt: 1, error: "undecodable", leaseToken: null })
        expect(iso(failed.startedAt)).toBe(iso(at(181)))
        expect(iso(failed.finishedAt)).toBe(iso(at(181)))
        expect(stored.length).toBe(4)
      })
    )

    it.effect(
      "startRuns starts many slots in one go, in order, each with its own lease; advanceJobs moves many jobs",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const jobs = [yield* addJob(), yield* addJob(), yield* addJob()]
          expect(yield* store.startRuns([], { owner: "me", leaseUntil: at(30), now: T0 })).toEqual([])
          const started = yield* store.startRuns(
            jobs.map((j, i) => slot(j.id, at(i))),
            { owner: "me", leaseUntil: at(30), now: T0 }
          )
          expect(started.map((s) => [s.run.jobId, iso(s.run.scheduledFor), s.run.status, s.run.owner])).toEqual(
            jobs.map((j, i) => [j.id, iso(at(i)), "running", "me"])
          )
          expect(new Set(started.map((s) => s.lease.token)).size).toBe(3)
          // Each lease fences its own run.
          expect(
            yield* store.renewLeases(
              started.map((s) => s.lease),
              at(60),
              at(1)
            )
          ).toHaveLength(3)
          yield* store.advanceJobs(
            jobs.map((j, i) => ({ jobId: j.id, nextRunAt: at(100 + i) })),
            at(1)
          )
          yield* store.advanceJobs([], at(1))
          for (const [i, j] of jobs.entries()) {
            const stored = yield* Effect.flatMap(StoreInspector, (inspector) => inspector.job(j.id))
            expect(iso(stored?.nextRunAt)).toBe(iso(at(100 + i)))
          }
        })
    )

    it.effect("a second run for the same (job, slot, attempt) is a Conflict", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        yield* start(job.id, at(60))
        const again = yield* Effect.either(start(job.id, at(60), { owner: "other" }))
        expect(Either.isLeft(again) && again.left.reason).toBe("Conflict")
        const retry = yield* Effect.either(store.scheduleRetry(slot(job.id, at(60)), at(90), at(61)))
        expect(Either.isLeft(retry) && retry.left.reason).toBe("Conflict")
        const stored = yield* runsOf(job.id)
        expect(stored.map((r) => [r.status, r.owner])).toEqual([["running", "me"]])
      })
    )

    it.effect("recordSkipped and recordFailed twice for one slot do not fail, and keep the first row", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        yield* store.transaction(
          Effect.gen(function* () {
            yield* store.recordSkipped(slot(job.id, at(60)), "first", at(61))
            yield* store.recordSkipped(slot(job.id, at(60)), "second", at(62))
            yield* store.recordFailed(slot(job.id, at(120)), "first", at(121))
            yield* store.recordFailed(slot(job.id, at(120)), "second", at(122))
            // A slot that is running already: neither overwrites it.
            yield* start(job.id, at(180))
            yield* store.recordSkipped(slot(job.id, at(180)), "late", at(181))
            yield* store.recordFailed(slot(job.id, at(180)), "late", at(181))
            // The transaction is still usable (in Postgres, a failed statement would have aborted it).
            yield* store.advanceJobs([{ jobId: job.id, nextRunAt: at(240) }], at(181))
          })
        )
        const stored = yield* runsOf(job.id)
        expect(stored.map((r) => [iso(r.scheduledFor), r.status, r.error])).toEqual([
          [iso(at(60)), "skipped", "first"],
          [iso(at(120)), "failed", "first"],
          [iso(at(180)), "running", null]
        ])
        expect(iso((yield* (yield* StoreInspector).job(job.id))!.nextRunAt)).toBe(iso(at(240)))
      })
    )

    it.effect("a failed transaction leaves nothing behind", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const defined = def({ name: unique("rolled-back"), taskType: job.taskType, nextRunAt: at(500) })
        const result = yield* Effect.either(
          store.transaction(
            Effect.gen(function* () {
              yield* start(job.id, at(60), { owner: "x" })
              yield* store.recordSkipped(slot(job.id, at(120)), "why", at(60))
              yield* store.scheduleRetry(slot(job.id, at(0), 2), at(90), at(60))
              yield* store.advanceJobs([{ jobId: job.id, nextRunAt: at(120) }], at(60))
              yield* store.upsertJobs([defined], at(60))
              return yield* Effect.fail("boom" as const)
            })
          )
        )
        expect(result).toEqual(Either.left("boom"))
        expect(yield* runsOf(job.id)).toEqual([])
        expect(iso((yield* (yield* StoreInspector).job(job.id))!.nextRunAt)).toBe(iso(at(60)))
        // The job defined in it is gone, whatever is added after it, and its name free: defined again, it is found by
        // that name.
        yield* addJob()
        expect(yield* store.setJobEnabled(defined.name, true, at(61))).toEqual(Option.none())
        const [again] = yield* store.upsertJobs([defined], at(62))
        const found = yield* store.setJobEnabled(defined.name, true, at(63))
        expect(Option.map(found, (j) => [j.id, j.name, iso(j.nextRunAt)])).toEqual(
          Option.some([again!.id, defined.name, iso(at(500))])
        )
      })
    )

    it.effect("renewal and completion are fenced by the lease token", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const { lease } = yield* start(job.id, at(60), { owner: "a", leaseUntil: at(90) })
        const stranger: Lease = { runId: lease.runId, token: "not-the-token" }
        const succeed = (l: Lease, output: string, now: Date) =>
          store.completeRuns([{ lease: l, slot: slot(job.id, at(60)), outcome: { _tag: "Succeeded", output }, now }])
        expect(yield* store.renewLeases([stranger], at(200), at(70))).toEqual([])
        expect(yield* succeed(stranger, "{}", at(70))).toEqual([false])
        expect(yield* store.markFailed(stranger, "x", at(70))).toBe(false)
        expect(yield* store.renewLeases([lease, stranger], at(120), at(70))).toEqual([lease.runId])
        expect(iso((yield* runsOf(job.id))[0]!.leaseUntil)).toBe(iso(at(120)))
        expect(yield* succeed(lease, `{"n":1}`, at(80))).toEqual([true])
        // Finished: nothing can be written over it, not even with its own token.
        expect(yield* store.markFailed(lease, "late", at(81))).toBe(false)
        expect(yield* succeed(lease, `{"n":2}`, at(81))).toEqual([false])
        expect(yield* store.renewLeases([lease], at(300), at(81))).toEqual([])
        const [stored] = yield* runsOf(job.id)
        expect(stored).toMatchObject({ status: "success", output: `{"n":1}`, error: null, leaseUntil: null })
        expect(iso(stored!.finishedAt)).toBe(iso(at(80)))
        expect(yield* store.completeRuns([])).toEqual([])
        expect(yield* store.renewLeases([], at(300), at(81))).toEqual([])
      })
    )

    it.effect("transact: a run's success commits with its value, fenced by its lease; a lost lease refuses it", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const options = { timeoutMs: 60_000 }
        const { lease } = yield* start(job.id, at(60), { owner: "a", leaseUntil: at(90) })
        const completion = (l: Lease, output: string) => ({
          lease: l,
          slot: slot(job.id, at(60)),
          outcome: { _tag: "Succeeded" as const, output },
          now: at(70),
          startedAt: at(61)
        })
        const stranger: Lease = { runId: lease.runId, token: "not-the-token" }
        expect(
          yield* store.transact(
            () => Effect.succeed("x"),
            () => completion(stranger, "{}"),
            options
          )
        ).toEqual({
          _tag: "Refused",
          value: "x"
        })
        expect(
          yield* store.transact(
            () => Effect.succeed("y"),
            () => undefined,
            options
          )
        ).toEqual({
          _tag: "RolledBack",
          value: "y"
        })
        expect((yield* runsOf(job.id))[0]).toMatchObject({ status: "running" })
        expect(
          yield* store.transact(
            () => Effect.succeed("z"),
            (v) => completion(lease, `{"v":"${v}"}`),
            options
          )
        ).toEqual({ _tag: "Committed", value: "z" })
        const [stored] = yield* runsOf(job.id)
        expect(stored).toMatchObject({ status: "success", output: `{"v":"z"}`, leaseUntil: null })
        expect(iso(stored!.startedAt)).toBe(iso(at(61)))
        // Finished: its own lease records nothing more.
        expect(
          yield* store.transact(
            () => Effect.succeed(0),
            () => completion(lease, "{}"),
            options
          )
        ).toEqual({
          _tag: "Refused",
          value: 0
        })
      })
    )

    it.effect("completeRuns writes the handler's start over the claim's started_at, and keeps it without one", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const s = (sec: number) => slot(job.id, at(sec))
        // Claimed at 0, 60 and 120; their handlers started at 5 and 65 (the third never ran: recorded as failed).
        const ok = yield* start(job.id, at(0))
        const failed = yield* start(job.id, at(60))
        const never = yield* start(job.id, at(120))
        const result = yield* store.completeRuns([
          { lease: ok.lease, slot: s(0), outcome: { _tag: "Succeeded", output: "{}" }, now: at(10), startedAt: at(5) },
          {
            lease: failed.lease,
            slot: s(60),
            outcome: { _tag: "Failed", error: "boom", retryAt: undefined },
            now: at(70),
            startedAt: at(65)
          },
          {
            lease: never.lease,
            slot: s(120),
            outcome: { _tag: "Failed", error: "stopped", retryAt: undefined },
            now: at(121)
          }
        ])
        expect(result).toEqual([true, true, true])
        const span = (sec: number) =>
          Effect.map(runsOf(job.id), (stored) => {
            const run = stored.find((r) => r.scheduledFor.getTime() === at(sec).getTime())!
            return [iso(run.startedAt), iso(run.finishedAt)]
          })
        expect(yield* span(0)).toEqual([iso(at(5)), iso(at(10))])
        expect(yield* span(60)).toEqual([iso(at(65)), iso(at(70))])
        expect(yield* span(120)).toEqual([iso(at(120)), iso(at(121))])
        // A refused completion (its lease is gone) writes no start either.
        expect(
          yield* store.completeRuns([
            {
              lease: ok.lease,
              slot: s(0),
              outcome: { _tag: "Succeeded", output: "{}" },
              now: at(30),
              startedAt: at(20)
            }
          ])
        ).toEqual([false])
        expect(yield* span(0)).toEqual([iso(at(5)), iso(at(10))])
      })
    )

    it.effect("completeRuns is fenced per completion; a failure with retryAt inserts the next attempt", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const s = (sec: number) => slot(job.id, at(sec))
        const ok = yield* start(job.id, at(0))
        const forged = yield* start(job.id, at(60))
        const retried = yield* start(job.id, at(120))
        const rescued = yield* start(job.id, at(180))
        const final = yield* start(job.id, at(240))
        // Its lease is lost: someone else recorded it as failed (as a rescue does).
        expect(yield* store.markFailed(rescued.lease, "owner lost", at(200))).toBe(true)
        const result = yield* store.completeRuns([
          { lease: ok.lease, slot: s(0), outcome: { _tag: "Succeeded", output: `{"ok":true}` }, now: at(10) },
          {
            lease: { ...forged.lease, token: "stolen" },
            slot: s(60),
            outcome: { _tag: "Failed", error: "x", retryAt: at(500) },
            now: at(70)
          },
          {
            lease: retried.lease,
            slot: s(120),
            outcome: { _tag: "Failed", error: "boom", retryAt: at(400) },
            now: at(130)
          },
          {
            lease: rescued.lease,
            slot: s(180),
            outcome: { _tag: "Failed", error: "late", retryAt: at(600) },
            now: at(210)
          },
          {
            lease: final.lease,
            slot: s(240),
            outcome: { _tag: "Failed", error: "fatal", retryAt: undefined },
            now: at(250)
          }
        ])
        expect(result).toEqual([true, false, true, false, true])
        const stored = yield* runsOf(job.id)
        const row = (sec: number, attempt = 1) =>
          stored.find((r) => r.scheduledFor.getTime() === at(sec).getTime() && r.attempt === attempt)
        expect(row(0)).toMatchObject({ status: "success", output: `{"ok":true}`, leaseUntil: null })
        expect(iso(row(0)!.finishedAt)).toBe(iso(at(10)))
        expect(row(60)).toMatchObject({ status: "running", finishedAt: null, error: null })
        expect(row(120)).toMatchObject({ status: "failed", error: "boom", leaseUntil: null })
        expect(iso(row(120)!.finishedAt)).toBe(iso(at(130)))
        expect(row(120, 2)).toMatchObject({ status: "pending", startedAt: null, leaseToken: null })
        expect(iso(row(120, 2)!.dueAt)).toBe(iso(at(400)))
        expect(row(180)).toMatchObject({ status: "failed", error: "owner lost" })
        expect(iso(row(180)!.finishedAt)).toBe(iso(at(200)))
        expect(row(240)).toMatchObject({ status: "failed", error: "fatal" })
        // Only the recorded failure with a retryAt got a next attempt.
        expect(stored.filter((r) => r.attempt === 2).map((r) => iso(r.scheduledFor))).toEqual([iso(at(120))])
        expect(stored.length).toBe(6)
        // The next attempt is due like any retry.
        const due = yield* store.transaction(store.listDueRetries(at(400), 100, [job.taskType]))
        expect(due.map((r) => r.run.id)).toContain(row(120, 2)!.id)
      })
    )

    it.effect("completeRuns whose next attempt exists already fails as a Conflict, and writes none of the batch", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const ok = yield* start(job.id, at(0))
        const failing = yield* start(job.id, at(60))
        // Attempt 2 of that slot is there already.
        yield* store.scheduleRetry(slot(job.id, at(60), 2), at(90), at(61))
        const result = yield* Effect.either(
          store.completeRuns([
            { lease: ok.lease, slot: slot(job.id, at(0)), outcome: { _tag: "Succeeded", output: "{}" }, now: at(10) },
            {
              lease: failing.lease,
              slot: slot(job.id, at(60)),
              outcome: { _tag: "Failed", error: "boom", retryAt: at(120) },
              now: at(70)
            }
          ])
        )
        expect(Either.isLeft(result) && [result.left._tag, result.left.reason]).toEqual(["JobStoreError", "Conflict"])
        const stored = yield* runsOf(job.id)
        expect(stored.map((r) => [iso(r.scheduledFor), r.attempt, r.status])).toEqual([
          [iso(at(0)), 1, "running"],
          [iso(at(60)), 1, "running"],
          [iso(at(60)), 2, "pending"]
        ])
        expect(iso(stored[2]!.dueAt)).toBe(iso(at(90)))
        // Nothing was lost: both leases still hold.
        expect(yield* store.renewLeases([ok.lease, failing.lease], at(200), at(80))).toEqual([
          ok.lease.runId,
          failing.lease.runId
        ])
      })
    )

    it.effect("startRetry takes a pending run once, with a fresh lease", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob()
        const pending = yield* store.scheduleRetry(slot(job.id, at(60), 2), at(100), at(61))
        const lease = yield* store.startRetry(pending.id, { now: at(100), owner: "b", leaseUntil: at(130) })
        expect(Option.map(lease, (l) => l.runId)).toEqual(Option.some(pending.id))
        const twice = yield* store.startRetry(pending.id, { now: at(101), owner: "c", leaseUntil: at(131) })
        expect(Option.isNone(twice)).toBe(true)
        const [stored] = yield* runsOf(job.id)
        expect(stored).toMatchObject({ status: "running", owner: "b", dueAt: null })
        expect(iso(stored!.startedAt)).toBe(iso(at(100)))
        expect(iso(stored!.leaseUntil)).toBe(iso(at(130)))
        expect(stored!.leaseToken).toBe(Option.getOrThrow(lease).token)
        // The fresh lease fences like any other.
        expect(yield* store.renewLeases([Option.getOrThrow(lease)], at(160), at(110))).toEqual([pending.id])
      })
    )

    it.effect("handBackRuns makes a claimed run claimable at once, as the same slot and attempt; fenced", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob({ taskType: unique("handback"), nextRunAt: at(10_000) })
        const claimed = yield* start(job.id, at(60), { owner: "a", leaseUntil: at(90), now: at(61) })
        const finished = yield* start(job.id, at(120), { owner: "a", leaseUntil: at(150), now: at(121) })
        yield* store.completeRuns([
          {
            lease: finished.lease,
            slot: slot(job.id, at(120)),
            now: at(122),
            outcome: { _tag: "Succeeded", output: "null" }
          }
        ])
        const before = yield* runsOf(job.id)
        // A wrong token, and a run that has finished: nothing goes back, nothing changes.
        const wrong: Lease = { runId: claimed.run.id, token: `${claimed.lease.token}-not` }
        expect(yield* store.handBackRuns([wrong, finished.lease], at(65))).toBe(0)
        expect(yield* runsOf(job.id)).toEqual(before)

        expect(yield* store.handBackRuns([claimed.lease], at(70))).toBe(1)
        const back = (yield* runsOf(job.id)).find((r) => r.id === claimed.run.id)!
        expect(back).toMatchObject({ status: "pending", attempt: 1, owner: null, leaseToken: null, leaseUntil: null })
        expect(iso(back.scheduledFor)).toBe(iso(at(60)))
        expect(iso(back.dueAt)).toBe(iso(at(70)))
        expect(back.startedAt).toBeNull()
        expect(iso((yield* runsOf(job.id)).find((r) => r.id === finished.run.id)!.finishedAt)).toBe(iso(at(122)))
        // Due at once: an idle runner wakes for it, and another owner takes it as a retry is taken.
        expect(Option.map(yield* store.nextWakeAt(at(70), [job.taskType]), iso)).toEqual(Option.some(iso(at(70))))
        const due = yield* store.transaction(store.listDueRetries(at(70), 10, [job.taskType]))
        expect(due.map((r) => r.run.id)).toEqual([claimed.run.id])
        const taken = yield* store.startRetry(claimed.run.id, { now: at(71), owner: "b", leaseUntil: at(101) })
        expect(Option.isSome(taken)).toBe(true)
        const rerun = (yield* runsOf(job.id)).find((r) => r.id === claimed.run.id)!
        expect(rerun).toMatchObject({ status: "running", owner: "b", attempt: 1 })
        expect(iso(rerun.scheduledFor)).toBe(iso(at(60)))
        // The first owner's lease is gone: handing back again, renewing or completing with it does nothing.
        expect(yield* store.handBackRuns([claimed.lease], at(72))).toBe(0)
        expect(yield* store.renewLeases([claimed.lease], at(130), at(72))).toEqual([])
        expect(yield* runsOf(job.id)).toHaveLength(2)
        expect(yield* store.handBackRuns([], at(72))).toBe(0)
      })
    )

    it.effect("listDueRetries and listExpired see exactly the runs they should", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const job = yield* addJob({ taskType: unique("retries") })
        const base = 2_000_000 + Math.floor(Math.random() * 1_000_000)
        const dueRetry = yield* store.scheduleRetry(slot(job.id, at(60), 2), at(base + 10), at(61))
        const laterRetry = yield* store.scheduleRetry(slot(job.id, at(120), 2), at(base + 50), at(121))
        const expired = yield* start(job.id, at(180), { owner: "dead", leaseUntil: at(base + 5), now: at(181) })
        // Live, of another job (a live run of the same job would hold its retries back: overlap).
        const other = yield* addJob({ taskType: job.taskType })
        const live = yield* start(other.id, at(240), { owner: "alive", leaseUntil: at(base + 100), now: at(241) })
        const now = at(base + 20)
        const retries = yield* store.transaction(store.listDueRetries(now, 1000, [job.taskType]))
        expect(retries.map((r) => r.run.id)).toEqual([dueRetry.id])
        expect(retries[0]!.job.name).toBe(job.name)
        // listExpired is for every task type.
        const lost = yield* store.transaction(store.listExpired(now, 1000))
        const mine = lost.filter((r) => r.job.id === job.id)
        expect(mine.map((r) => r.run.id)).toEqual([expired.run.id])
        expect(mine[0]!.job.name).toBe(job.name)
        expect(mine[0]!.run.leaseToken).toBe(expired.lease.token)
        expect(lost.map((r) => r.run.id)).not.toContain(live.run.id)
        expect(lost.map((r) => r.run.id)).not.toContain(laterRetry.id)
      })
    )

    it.effect("listExpired with `disowned` adds the owner's running runs it does not hold, live leases and all", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const owner = unique("owner")
        const base = 3_000_000 + Math.floor(Math.random() * 1_000_000)
        const job = yield* addJob({ taskType: unique("disowned") })
        const lease = { owner, leaseUntil: at(base + 100), now: at(base) }
        // Three live runs of this owner: it holds the first; the second finished, but that record was lost (it runs
        // again as far as the store knows); the third it finished and recorded.
        const [held, lostRecord, recorded] = yield* store.startRuns(
          [slot(job.id, at(60)), slot(job.id, at(120)), slot(job.id, at(180))],
          lease
        )
        expect(
          yield* store.completeRuns([
            {
              lease: recorded!.lease,
              slot: slot(job.id, at(180)),
              outcome: { _tag: "Succeeded", output: "null" },
              now: at(base + 1)
            }
          ])
        ).toEqual([true])
        // Another owner's live run, and a pending retry: never listed.
        const others = yield* start(job.id, at(240), {
          owner: "someone-else",
          leaseUntil: at(base + 100),
          now: at(base)
        })
        yield* store.scheduleRetry(slot(job.id, at(60), 2), at(base + 50), at(base))
        const now = at(base + 2)
        const ids = (rows: ReadonlyArray<{ readonly run: JobRun }>) =>
          rows.filter((r) => r.run.jobId === job.id).map((r) => r.run.id)
        // Without `disowned`: nothing (every lease is live).
        expect(ids(yield* store.transaction(store.listExpired(now, 1000)))).toEqual([])
        const listed = yield* store.transaction(store.listExpired(now, 1000, { owner, holds: [held!.run.id] }))
        expect(ids(listed)).toEqual([lostRecord!.run.id])
        expect(listed.find((r) => r.run.id === lostRecord!.run.id)).toMatchObject({
          run: { owner, status: "running", leaseToken: lostRecord!.lease.token },
          job: { name: job.name }
        })
        expect(ids(listed)).not.toContain(others.run.id)
        // Holding nothing: every running run of the owner; an owner with none: nothing.
        const all = yield* store.transaction(store.listExpired(now, 1000, { owner, holds: [] }))
        expect(ids(all).sort()).toEqual([held!.run.id, lostRecord!.run.id].sort())
        expect(
          ids(yield* store.transaction(store.listExpired(now, 1000, { owner: unique("nobody"), holds: [] })))
        ).toEqual([])
        // Let go as the runner does (fenced by its token), it is listed no more.
        expect(yield* store.markFailed(lostRecord!.lease, `owner ${owner} no longer runs it`, now)).toBe(true)
        expect(ids(yield* store.transaction(store.listExpired(now, 1000, { owner, holds: [held!.run.id] })))).toEqual(
          []
        )
        // The limit counts both kinds.
        expect(yield* store.transaction(store.listExpired(now, 1, { owner, holds: [] }))).toHaveLength(1)
      })
    )

    it.effect("nextWakeAt is the earliest enabled slot or pending retry of the asked task types", () =>
      Effect.gen(function* () {
        const store = yield* JobStore
        const type = unique("wake")
        const wake = Effect.map(store.nextWakeAt(T0, [type]), Option.map(iso))
        expect(yield* wake).toEqual(Option.none())
        const job = yield* addJob({ taskType: type, nextRunAt: at(100) })
        expect(yield* wake).toEqual(Option.some(iso(at(100))))
        const early = yield* addJob({ taskType: type, nextRunAt: new Date("2000-01-01T00:00:00Z") })
        expect(yield* wake).toEqual(Option.some("2000-01-01T00:00:00.000Z"))
        yield* store.disableJob(early.id, T0)
        expect(yield* wake).toEqual(Option.some(iso(at(100))))
        yield* store.scheduleRetry(slot(job.id, at(0), 2), at(50), at(1))
        expect(yield* wake).toEqual(Option.some(iso(at(50))))
        yield* store.advanceJobs([{ jobId: job.id, nextRunAt: at(20) }], at(1))
        expect(yield* wake).toEqual(Option.some(iso(at(20))))
      })
    )
    // Last: it prunes the whole (shared) table of runs.
    it.effect(
      "pruneRuns deletes finished runs beyond keepLast and before olderThan; pending and running runs stay",
      () =>
        Effect.gen(function* () {
          const store = yield* JobStore
          const job = yield* addJob({ taskType: unique("prune") })
          yield* store.recordSkipped(slot(job.id, at(100)), "overlap", at(100))
          yield* store.recordFailed(slot(job.id, at(200)), "bad", at(200))
          yield* store.recordSkipped(slot(job.id, at(300)), "overlap", at(300))
          yield* store.scheduleRetry(slot(job.id, at(400), 2), at(400), at(400))
          yield* start(job.id, at(500))
          expect(yield* store.pruneRuns({ olderThan: undefined, keepLast: undefined, limit: 1000 })).toBe(0)
          // Everything finished but the newest one, in two batches: the first stops at its limit.
          const first = yield* store.pruneRuns({ olderThan: undefined, keepLast: 1, limit: 1 })
          expect(first).toBe(1)
          yield* store.pruneRuns({ olderThan: undefined, keepLast: 1, limit: 100_000 })
          const left = yield* runsOf(job.id)
          expect(left.map((r) => [iso(r.scheduledFor), r.status]).sort()).toEqual([
            [iso(at(300)), "skipped"],
            [iso(at(400)), "pending"],
            [iso(at(500)), "running"]
          ])
          // By age: the last finished run is older than a cutoff far ahead; pending and running stay.
          expect(
            yield* store.pruneRuns({ olderThan: new Date("2200-01-01T00:00:00Z"), keepLast: undefined, limit: 10 })
          ).toBe(1)
          expect((yield* runsOf(job.id)).map((r) => r.status).sort()).toEqual(["pending", "running"])
        })
    )
  })
