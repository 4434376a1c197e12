/**
 * What every fault scenario must hold, read from the tables (issue 11 "Build"): no item lost, no item run more than
 * its `max_runs` times, no slot fired twice, no sequential executions overlapping, nothing left running past its
 * lease. Support for the integration tests under test/faults/ (real Postgres, real processes, the real clock).
 *
 * Each check is one SQL statement, so it reads one consistent snapshot even while workers still write.
 */
import { expect } from "vitest"
import type { TestDb } from "../support/workers.js"

/** An item the test enqueued, as stored (after the insert trigger normalised `max_runs` and `thread`). */
export interface Enqueued {
  readonly id: string
  /** As stored at insert: -1 (forever) or at least 1. */
  readonly max_runs: number
  /** As stored at insert: 0 (sequential) or 1. */
  readonly thread: number
}

export interface InvariantOptions {
  /** Every item the test enqueued: a test passes what it enqueued, and rows of any other item are reported. */
  readonly enqueued: ReadonlyArray<Enqueued>
  /** The drain is over: every item that runs a bounded number of times must be gone with all its runs recorded. */
  readonly drained?: boolean | undefined
  /**
   * How long after its lease expired an execution may still be waiting for a live instance to take it back (the
   * rescue runs on a tick: about a poll interval). Also how overdue a retry of an enabled job may be. Default 0.
   */
  readonly leaseSlackMs?: number | undefined
  /**
   * Start/end times are written by each worker from its own clock; two clocks agree within a few ms only (with the
   * database's clock, within a round trip). Overlaps shorter than this are not counted. Default 25 ms.
   */
  readonly clockSlackMs?: number | undefined
  /**
   * The worker processes' JSON events, when the test has them: a reported job overlap then shows each run's handler
   * `start`/`end` events (their `at` is the process's `Date.now()`, one clock for every process on the machine), which
   * tells two handlers that ran at once from recorded times that disagree (each run's times are its worker's
   * reading of the database's clock, taken before its statement waited for a connection).
   */
  readonly handlerEvents?: (() => ReadonlyArray<Record<string, unknown>>) | undefined
}

/** Counts to show that a scenario did real work (a test asserts on them). */
export interface InvariantStats {
  readonly processed: number
  readonly jobRuns: number
  readonly successfulSlots: number
  readonly queued: number
}

export interface InvariantReport {
  /** One line per violation (at most a few examples of each kind); empty when everything holds. */
  readonly violations: ReadonlyArray<string>
  readonly stats: InvariantStats
}

type Query = Pick<TestDb, "query">

const EXAMPLES = 5

/**
 * The end of a `job_runs` execution as far as its lease says: a run taken back from a lost owner is marked failed
 * at the rescue (`finished_at`), but it held its slot only until its lease expired, which the rescue's error names.
 */
const jobRunSpans = `
  SELECT r.id, r.job_id, r.scheduled_for, r.attempt, r.status, r.started_at, r.owner, r.error,
    CASE
      WHEN r.status = 'running' THEN coalesce(r.lease_until, 'infinity')
      -- A run taken back after its lease expired held its slot until then, not until it was let go.
      WHEN r.error LIKE 'owner lost:%' OR r.error LIKE 'owner % no longer runs it%'
        THEN least(r.finished_at, substring(r.error FROM 'expired ([0-9T:.Z+-]+)')::timestamptz)
      ELSE r.finished_at
    END AS ended_at
  FROM $schema.job_runs r
  WHERE r.status IN ('running', 'success', 'failed') AND r.started_at IS NOT NULL`

/** Reads every invariant from the tables; never throws on a violation (see `assertInvariants`). */
export const checkInvariants = async (db: Query, options: InvariantOptions): Promise<InvariantReport> => {
  const leaseSlack = `${Math.max(0, options.leaseSlackMs ?? 0)} milliseconds`
  const clockSlack = `${Math.max(0, options.clockSlackMs ?? 25)} milliseconds`
  const ids = options.enqueued.map((e) => e.id)
  const maxRuns = options.enqueued.map((e) => e.max_runs)
  const threads = options.enqueued.map((e) => e.thread)
  const enqueued = `unnest($1::bigint[], $2::int[], $3::int[]) AS e(id, max_runs, thread)`
  const args = [ids, maxRuns, threads]
  const violations: Array<string> = []
  const report = (what: string, rows: ReadonlyArray<unknown>, total?: number) => {
    if (rows.length > 0) {
      violations.push(`${what} (${total ?? rows.length}): ${JSON.stringify(rows.slice(0, EXAMPLES))}`)
    }
  }

  // No item lost, none run too often. A queued item's remaining runs plus its recorded ones are what was enqueued
  // (the store decrements `max_runs` as runs are recorded); a finished item has exactly its `max_runs` rows.
  const items = await db.query<{ id: string; max_runs: number; processed: number; left: number | null }>(
    `WITH p AS (SELECT queue_item_id AS id, count(*)::int AS n FROM $schema.processed_items GROUP BY 1)
     SELECT e.id::text AS id, e.max_runs, coalesce(p.n, 0) AS processed, q.max_runs AS left
     FROM ${enqueued} LEFT JOIN p ON p.id = e.id LEFT JOIN $schema.queue_items q ON q.id = e.id`,
    args
  )
  const tooMany = items.filter((i) => i.max_runs !== -1 && i.processed > i.max_runs)
  report("items run more than their max_runs times", tooMany)
  const lost = items.filter(
    (i) =>
      !tooMany.includes(i) &&
      (i.left === null
        ? i.max_runs === -1 || i.processed !== i.max_runs
        : (i.max_runs !== -1 && i.left + i.processed !== i.max_runs) || (options.drained === true && i.max_runs !== -1))
  )
  report(
    options.drained === true ? "items lost or not finished after the drain" : "items lost (gone or miscounted)",
    lost
  )
  const strangers = await db.query<{ id: string; n: number }>(
    `SELECT queue_item_id::text AS id, count(*)::int AS n FROM $schema.processed_items
     WHERE queue_item_id <> ALL($1::bigint[]) GROUP BY 1 ORDER BY 1`,
    [ids]
  )
  report("executions recorded for items the test never enqueued", strangers)

  // No sequential executions of one task type overlapped: each start is after every earlier one's end.
  const seqOverlaps = await db.query(
    `SELECT * FROM (
       SELECT p.id, p.queue_item_id::text AS item, p.task_type, p.started_at, p.finished_at,
         max(p.finished_at) OVER (PARTITION BY p.task_type ORDER BY p.started_at, p.id
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
       FROM $schema.processed_items p JOIN ${enqueued} ON e.id = p.queue_item_id AND e.thread = 0
     ) s WHERE s.started_at < s.previous_end - interval '${clockSlack}' ORDER BY s.started_at`,
    args
  )
  report("sequential (thread 0) executions that overlapped", seqOverlaps)

  // No slot fired twice.
  const doubled = await db.query(
    `SELECT job_id::text AS job, scheduled_for, count(*)::int AS n FROM $schema.job_runs WHERE status = 'success'
     GROUP BY job_id, scheduled_for HAVING count(*) > 1 ORDER BY 2`
  )
  report("slots that succeeded more than once", doubled)
  // No two attempts of one slot at once, and no two runs of a job that must not overlap itself (`overlap = 'skip'`).
  const jobOverlaps = await db.query(
    `WITH r AS (${jobRunSpans})
     SELECT s.*, to_jsonb(overlapped) AS overlapped FROM (
       SELECT r.id::text AS run, r.job_id::text AS job, j.overlap, r.scheduled_for, r.attempt, r.status, r.started_at,
         r.ended_at, r.owner,
         max(r.ended_at) OVER (
           PARTITION BY r.job_id, CASE WHEN j.overlap = 'skip' THEN NULL ELSE r.scheduled_for END
           ORDER BY r.started_at, r.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
       FROM r JOIN $schema.scheduled_jobs j ON j.id = r.job_id
     ) s
     -- The run it overlapped, to show both sides.
     CROSS JOIN LATERAL (
       SELECT p.id::text AS run, p.scheduled_for, p.attempt, p.status, p.started_at, p.ended_at, p.owner, p.error
       FROM r p
       WHERE p.job_id::text = s.job AND p.ended_at = s.previous_end AND p.id::text <> s.run LIMIT 1
     ) AS overlapped
     WHERE s.started_at < s.previous_end - interval '${clockSlack}'
       -- Each run's times are its own worker's reading of the database's clock: two starts within the slack, the later
       -- one's run over within the slack too, may be a run that ended just before the other began (a no-op handler
       -- does). The slack both ways, as for the order of the starts.
       AND (s.started_at > overlapped.started_at + interval '${clockSlack}'
            OR least(s.ended_at, s.previous_end) > s.started_at + interval '${clockSlack}')
     ORDER BY s.started_at`
  )
  const events = options.handlerEvents?.() ?? []
  const handlersOf = (run: unknown) =>
    events
      .filter((e) => e["runId"] !== undefined && String(e["runId"]) === String(run))
      .map((e) => ({ event: e["event"], at: e["at"], pid: e["pid"] }))
  report(
    "job runs that overlapped another run of their slot or job",
    events.length === 0
      ? jobOverlaps
      : jobOverlaps.map((o) => {
          const row = o as { run?: unknown; overlapped?: { run?: unknown } }
          return { ...row, handlers: handlersOf(row.run), overlappedHandlers: handlersOf(row.overlapped?.run) }
        })
  )
  // A slot whose last attempt was cut short (its owner lost) and that was never tried again is a lost slot.
  const lostSlots = await db.query(
    `SELECT r.job_id::text AS job, r.scheduled_for, r.attempt, r.error FROM $schema.job_runs r
     WHERE r.status = 'failed' AND r.error LIKE 'owner lost:%'
       AND NOT EXISTS (SELECT 1 FROM $schema.job_runs n
                       WHERE n.job_id = r.job_id AND n.scheduled_for = r.scheduled_for AND n.attempt > r.attempt)
     ORDER BY 2`
  )
  report("slots lost: cut short by a lost owner and never retried", lostSlots)
  const overdue = await db.query(
    `SELECT r.id::text AS run, r.job_id::text AS job, r.scheduled_for, r.attempt, r.due_at
     FROM $schema.job_runs r JOIN $schema.scheduled_jobs j ON j.id = r.job_id
     WHERE r.status = 'pending' AND j.enabled AND r.due_at < now() - interval '${leaseSlack}' ORDER BY r.due_at`
  )
  report("retries overdue", overdue)

  // Nothing left running or processing past its lease, and the items' counters agree with their leases (rows of
  // queue_leases, and leases held on item rows: migration 0014).
  const expired = await db.query(
    `SELECT 'queue lease' AS what, item_id::text AS id, owner, lease_until FROM $schema.queue_leases
       WHERE lease_until < now() - interval '${leaseSlack}'
     UNION ALL
     SELECT 'queue row lease', id::text, lease_owner, lease_until FROM $schema.queue_items
       WHERE lease_token IS NOT NULL AND lease_until < now() - interval '${leaseSlack}'
     UNION ALL
     SELECT 'job run', id::text, owner, lease_until FROM $schema.job_runs
       WHERE status = 'running' AND (lease_until IS NULL OR lease_until < now() - interval '${leaseSlack}')
     ORDER BY lease_until`
  )
  report("executions left running past their lease", expired)
  const inconsistent = await db.query(
    `SELECT i.id::text AS id, i.status, i.in_flight,
       (count(l.id) + CASE WHEN i.lease_token IS NULL THEN 0 ELSE 1 END)::int AS leases
     FROM $schema.queue_items i LEFT JOIN $schema.queue_leases l ON l.item_id = i.id
     GROUP BY i.id
     HAVING i.in_flight <> count(l.id) + CASE WHEN i.lease_token IS NULL THEN 0 ELSE 1 END
       OR (i.status = 'processing') <> (i.in_flight > 0)
     ORDER BY i.id`
  )
  report("queue items whose status or in_flight disagree with their leases", inconsistent)
  const orphans = await db.query(
    `SELECT l.id::text AS lease, l.item_id::text AS item FROM $schema.queue_leases l
     WHERE NOT EXISTS (SELECT 1 FROM $schema.queue_items i WHERE i.id = l.item_id)`
  )
  report("leases of items that no longer exist", orphans)

  const [stats] = await db.query<InvariantStats>(
    `SELECT (SELECT count(*)::int FROM $schema.processed_items) AS processed,
       (SELECT count(*)::int FROM $schema.job_runs) AS "jobRuns",
       (SELECT count(DISTINCT (job_id, scheduled_for))::int FROM $schema.job_runs WHERE status = 'success')
         AS "successfulSlots",
       (SELECT count(*)::int FROM $schema.queue_items) AS queued`
  )
  return { violations, stats: stats! }
}

/** Fails the test, listing every violation, unless all invariants hold. Returns the counts for further asserts. */
export const assertInvariants = async (db: Query, options: InvariantOptions): Promise<InvariantStats> => {
  const { stats, violations } = await checkInvariants(db, options)
  expect(violations).toEqual([])
  return stats
}
