/**
 * The QueueStore on Postgres. Claims are per task type (so a million unclaimable rows of other types, or a
 * blocked sequential backlog, cost nothing), executions hold leases of their own (a run-once item's on its row,
 * any other's in `queue_leases`), and recording a result is one statement that checks the lease token
 * before anything else is written.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { InvalidFlowError, InvalidRetryError } from "../../domain/errors.js"
import { normalizeGroup, threadFor } from "../../domain/Limits.js"
import * as Retry from "../../domain/Retry.js"
import * as PgPrepared from "./PgPrepared.js"
import {
  gaveUpMessage,
  MAX_UNFINISHED,
  normalizeMaxRuns,
  normalizePayload,
  normalizePriority,
  normalizeRunAfter,
  normalizeThread,
  normalizeUniqueKey,
  pendingItem,
  QueueItem
} from "../../domain/QueueItem.js"
import {
  durationMs,
  type EnqueueInput,
  EXACT_DEPTH_UP_TO,
  type ExecutionResult,
  type ClaimOptions,
  type QueueClaim,
  type QueueDepth,
  type RecordInput,
  QueueStore,
  QueueStoreError
} from "../../ports/QueueStore.js"
import type * as Pg from "pg"
import { arrayLiteral, type Element } from "./PgArrays.js"
import { isoString } from "./PgTimes.js"
import { mapPgErrors, type PgFailure, retryLockConflicts } from "./PgErrors.js"
import * as PgTransaction from "./PgTransaction.js"
import { PgPool } from "./PgPrepared.js"
import * as PgVacuum from "./PgVacuum.js"
import * as PgFlows from "./PgFlows.js"
import { cappedCount, type PgOptions, schemaName, table } from "./PgSchema.js"

const ItemRow = Schema.Struct({
  id: Schema.String,
  task_type: Schema.String,
  payload: Schema.NullOr(Schema.String),
  status: QueueItem.fields.status,
  priority: Schema.Int,
  max_runs: Schema.Int,
  thread: Schema.Int,
  runs_done: Schema.Int,
  runs_started: Schema.Int,
  run_after: Schema.NullOr(Schema.DateFromSelf),
  unique_key: Schema.NullOr(Schema.String),
  group_key: Schema.NullOr(Schema.String),
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf
})
type ItemRow = typeof ItemRow.Type

/** The columns of an item every reader gets; a claim knows the status and reads `updated_at` its own way. */
type ItemColumns = Omit<ItemRow, "status" | "runs_started" | "updated_at">

const itemOf = (r: ItemColumns, status: QueueItem["status"], updatedAt: Date): QueueItem => ({
  id: r.id,
  taskType: r.task_type,
  payload: r.payload,
  status,
  priority: r.priority,
  maxRuns: r.max_runs,
  thread: normalizeThread(r.thread),
  runAfter: r.run_after,
  uniqueKey: r.unique_key,
  group: r.group_key,
  createdAt: r.created_at,
  updatedAt
})

const toItem = (r: ItemRow): QueueItem => itemOf(r, r.status, r.updated_at)

/**
 * A claimed execution as the claim returns it: the item as it was before the claim, and the lease. Not decoded
 * through Schema: the claim is the hot path, and the table's own types and constraints (and the normalising
 * trigger) already guarantee each column's shape. Only what a claim needs comes back, each value parsed on the client
 * costing time per item: no status (a claimed item is processing), and `updated_at` only where it differs from
 * `created_at` (an item never claimed before has the two equal, so one time is parsed instead of two).
 */
interface ClaimRow extends ItemColumns {
  readonly updated_at: Date | null
  readonly lease_id: string
  readonly token: string
  readonly attempt: number
}

const toStoreError = (f: PgFailure) =>
  new QueueStoreError({
    reason: f.reason === "Decode" ? "Decode" : f.reason === "Unavailable" ? "Unavailable" : "Unknown",
    message: f.message,
    cause: f.cause
  })

// Every failure, defects included (a ROLLBACK that fails on a dead connection is one), becomes a QueueStoreError.
const orStoreError = mapPgErrors(toStoreError, (e): e is QueueStoreError => e instanceof QueueStoreError)
// The same, but a refused flow or policy stays its own error.
const orFlowError = PgFlows.orFlowErrors(toStoreError)

/** What `make` takes. */
export interface Options extends PgOptions {
  /**
   * The node-postgres pool under the client in context, when kairos built it (`PgKairos.clientLayer` provides it as
   * `PgPool`): the statements run per execution then go to it as named prepared statements (see PgPrepared).
   * Without it they go through the client (a client of your own, the CLI's and the dashboard's admin paths).
   */
  readonly pool?: Pg.Pool | undefined
}

/** Builds the Postgres QueueStore over the SqlClient in context (and `options.pool`, when given). */
export const make = (options: Options = {}): Effect.Effect<QueueStore["Type"], never, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const items = sql(table(schema, "queue_items"))
    const leases = sql(table(schema, "queue_leases"))
    const processed = sql(table(schema, "processed_items"))
    const waiting = sql(table(schema, "queue_waiting"))
    const itemColumns =
      "id::text AS id, task_type, payload, status, priority, max_runs, thread, runs_done, runs_started, run_after, " +
      "unique_key, group_key, created_at, updated_at"
    const itemCols = sql.literal(itemColumns)
    // The statements run per execution, prepared once per connection (see PgPrepared). Schema names are plain
    // lower-case identifiers (schemaName checks), so they are written into the text as they are.
    const prepare = yield* PgPrepared.make(options.pool)
    const vacuum = PgVacuum.make(sql, schema)
    const flows = PgFlows.make(sql, schema)
    // A name in the schema, as statement text.
    const fn = (name: string) => `"${schema}".${name}`
    /** The rows the planner expects in one of the schema's tables (`EXPLAIN`: planned, not run). */
    const estimatedRows = (name: string) =>
      Effect.map(sql.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (FORMAT JSON) SELECT 1 FROM ${fn(name)}`), (rows) => {
        const plan = rows[0]?.["QUERY PLAN"]
        const parsed = (typeof plan === "string" ? JSON.parse(plan) : plan) as
          | ReadonlyArray<{ readonly Plan?: { readonly "Plan Rows"?: number } }>
          | undefined
        return Math.round(Number(parsed?.[0]?.Plan?.["Plan Rows"] ?? 0))
      })
    // The claim functions return no group: it is read back by the item's key, in the claim's statement (a probe of a
    // row the claim has just touched, per claimed item).
    const claimed =
      "c.id::text AS id, task_type, payload, priority, max_runs, thread, runs_done, run_after, unique_key, " +
      `(SELECT g.group_key FROM ${fn("queue_items")} g WHERE g.id = c.id) AS group_key, created_at, ` +
      "nullif(updated_at, created_at) AS updated_at, lease_id::text AS lease_id, token, attempt"
    // The types of resultArrays' columns, in order.
    const resultTypes = ["bigint", "text", "text", "text", "timestamptz", "timestamptz", "int", "int", "bigint"]
      .concat(["boolean", "bigint"])
      .map((type) => `${type}[]`)
    const resultParams = resultTypes.map((type, i) => `$${i + 1}::${type}`).join(", ")
    // The plain claims take only types that have no limits in queue_limits (migration 0021), whatever the runner
    // believes: one that has not yet read a new limit (its NOTIFY missed, behind a pooler without a direct URL) leaves
    // the type alone until it does, rather than claiming past the limit (queue_limits holds a row per limited type).
    const noLimits = (type: string) =>
      `NOT EXISTS (SELECT 1 FROM ${table(schema, "queue_limits")} l WHERE l.task_type = ${type})`
    // A statement's task types, unnested from behind a sub-SELECT, so that a plan for a call's values (a custom plan)
    // counts them no better than the generic one: unnest($1) of a known one-type array looked cheaper than of the 10
    // elements assumed without it, and Postgres planned every claim again (~0.15 ms of its CPU, half of what a claim
    // of one runs).
    const unnestTypes = (types: string) => `unnest((SELECT ${types}))`
    const unlimited = (types: string) => `ARRAY(SELECT t FROM ${unnestTypes(types)} AS t WHERE ${noLimits("t")})`
    // Migration 0014's overload (as 0016 left it): a run-once item's execution holds its lease on the item row.
    const claimStatement = prepare<ClaimRow>(
      `SELECT ${claimed} FROM ${fn("kairos_claim")}(${unlimited("$1::text[]")}, $2::int, $3::text, $4::timestamptz, ` +
        "$5::timestamptz, $6::timestamptz, true) AS c"
    )
    const recordRowsStatement = prepare<{ id: string }>(
      `SELECT id::text AS id FROM ${fn("kairos_record_row_leases")}(${resultParams}) AS r(id)`
    )
    const recordOnceStatement = prepare<{ id: string }>(
      `SELECT id::text AS id FROM ${fn("kairos_record_once")}(${resultParams}) AS r(id)`
    )
    const recordAndClaimStatement = prepare<ClaimRow & { recorded: string | null }>(
      `SELECT recorded::text AS recorded, ${claimed} FROM ${fn("kairos_record_and_claim")}(${resultParams}, ` +
        `${unlimited("$12::text[]")}, $13::int, $14::text, $15::timestamptz, $16::timestamptz, $17::timestamptz, true) AS c`
    )
    const recordAndClaimNextStatement = prepare<ClaimRow & { recorded: string | null }>(
      `SELECT recorded::text AS recorded, ${claimed} FROM ${fn("kairos_record_and_claim_next")}($1::bigint, $2::text, ` +
        // A limited type claims no next item (NULL matches none): the record goes on alone.
        `$3::timestamptz, $4::timestamptz, $5::int, (SELECT $6::text WHERE ${noLimits("$6::text")}), $7::text, ` +
        "$8::timestamptz, $9::timestamptz, $10::timestamptz, true) AS c"
    )
    // Flow control (migration 0021): the claim of task types that have limits, alone and along with a record.
    const claimLimitedStatement = prepare<ClaimRow>(
      `SELECT ${claimed} FROM ${fn("kairos_claim_limited")}($1::text[], $2::int, $3::text, $4::timestamptz, ` +
        "$5::timestamptz, $6::timestamptz) AS c"
    )
    const recordAndClaimLimitedStatement = prepare<ClaimRow & { recorded: string | null }>(
      `SELECT recorded::text AS recorded, ${claimed} FROM ${fn("kairos_record_and_claim_limited")}(${resultParams}, ` +
        "$12::text[], $13::int, $14::text, $15::timestamptz, $16::timestamptz, $17::timestamptz) AS c"
    )
    // The two looks that plan a runner's next wake-up after a tick that did not fill its batch: named like the claims,
    // planned once per connection (through @effect/sql, unnamed, each was planned at every call, for ten times as
    // long as it ran).
    const nextLeaseExpiryStatement = prepare<{ at: Date | null }>(
      `SELECT least((SELECT min(lease_until) FROM ${fn("queue_leases")} WHERE owner <> $1::text), ` +
        `(SELECT min(lease_until) FROM ${fn("queue_items")} WHERE lease_token IS NOT NULL AND lease_owner <> $1::text)) AS at`
    )
    const nextRunAfterStatement = prepare<{ at: Date | null }>(
      `SELECT min(n.at) AS at FROM ${unnestTypes("$1::text[]")} AS t(task_type) CROSS JOIN LATERAL (` +
        `SELECT i.run_after AS at FROM ${fn("queue_items")} i WHERE i.task_type = t.task_type ` +
        "AND i.run_after > $2::timestamptz ORDER BY i.run_after LIMIT 1) n"
    )
    const firstAt = (rows: ReadonlyArray<{ at: Date | null }>) =>
      Option.fromNullable(rows[0]?.at ?? null).pipe(Option.map((d) => new Date(d)))
    const retryPolicy = sql(table(schema, "kairos_retry_policy"))
    const retryDelay = sql(table(schema, "kairos_retry_delay_ms"))

    /** An execution whose lease is held on its item's row: its lease id is the item's id negated (migration 0014). */
    const rowLeased = (x: Recorded) => x.claim.leaseId.startsWith("-")

    // The item columns a claim returns, as they were before the claim (the claim result marks them processing).
    const toClaim = (row: ClaimRow): QueueClaim => ({
      item: itemOf(row, "processing", row.updated_at ?? new Date(row.created_at.getTime())),
      runsDone: row.runs_done,
      attempt: row.attempt,
      leaseId: row.lease_id,
      token: row.token
    })

    // One statement, with no transaction to open and commit: the schema's `kairos_claim` function (migration 0004
    // says what it takes). Its rows come in the queue's order (priority first, then age), the order in which
    // buffered executions start.
    const claimOnce = (options: ClaimOptions, limit: number, types: ReadonlyArray<string>) =>
      claimStatement([types, limit, options.owner, options.now, options.leaseUntil, options.repeatAfter])

    /** Another claimer took the type's sequential slot after this statement's snapshot: try again. */
    const lostSequentialRace = (e: unknown) =>
      (e as { cause?: { code?: unknown; constraint?: unknown } }).cause?.code === "23505" &&
      (e as { cause?: { constraint?: unknown } }).cause?.constraint === "queue_items_one_sequential"

    // A statement that claims and lost a sequential race is tried again, whole, with a fresh snapshot.
    // (A catch per try rather than Effect.retry, whose schedule is set up at every call: this wraps every claim, and
    // a chain of sequential items makes one per item.)
    const retryLostRace = <A, E, R>(self: Effect.Effect<A, E, R>, triesLeft = 5): Effect.Effect<A, E, R> =>
      Effect.catchIf(self, lostSequentialRace, (e) =>
        triesLeft > 0 ? retryLostRace(self, triesLeft - 1) : Effect.fail(e)
      )

    const claimRetried = (options: ClaimOptions, limit: number, types: ReadonlyArray<string>) =>
      retryLostRace(claimOnce(options, limit, types))

    // The task types to claim, split into those with limits (`options.limited`) and the rest.
    const typesOf = (options: ClaimOptions) => {
      const types = [...new Set(options.taskTypes)]
      if (options.limited === undefined || options.limited.length === 0) return { plain: types, limited: [] }
      const limited = new Set(options.limited)
      return { plain: types.filter((t) => !limited.has(t)), limited: types.filter((t) => limited.has(t)) }
    }

    const claimLimited = (options: ClaimOptions, limit: number, types: ReadonlyArray<string>) =>
      retryLostRace(
        claimLimitedStatement([types, limit, options.owner, options.now, options.leaseUntil, options.repeatAfter])
      )

    // Limited types first (their share is bounded by their limits anyway), then the rest with what is left.
    const claimSplit = (
      options: ClaimOptions,
      limit: number,
      plain: ReadonlyArray<string>,
      limited: ReadonlyArray<string>
    ) =>
      Effect.gen(function* () {
        const claims: Array<QueueClaim> =
          limited.length > 0 ? (yield* claimLimited(options, limit, limited)).map(toClaim) : []
        const left = limit - claims.length
        if (left > 0 && plain.length > 0)
          for (const row of yield* claimRetried(options, left, plain)) claims.push(toClaim(row))
        return claims
      })

    const claimBatch = (options: ClaimOptions) =>
      Effect.gen(function* () {
        const limit = Math.max(0, Math.floor(options.limit))
        const { limited, plain } = typesOf(options)
        if (limit === 0 || plain.length + limited.length === 0) return []
        if (limited.length === 0)
          return yield* flows.withInputs((yield* claimRetried(options, limit, plain)).map(toClaim))
        return yield* flows.withInputs(yield* claimSplit(options, limit, plain, limited))
      }).pipe(orStoreError)

    type Recorded = RecordInput

    // A batch of results as eleven array literals (PgArrays), one per column, so one statement takes any number of
    // them: the arguments of `kairos_record_once` (migration 0013) and `kairos_record_row_leases` (0014), and the
    // columns of `resultInput`. The last four are the task type's retry policy (the item's own, on its row, wins). No
    // task types or payloads: the log takes them from the item rows.
    const resultArrays = (batch: ReadonlyArray<Recorded>): ReadonlyArray<string> => {
      const col = (f: (x: Recorded) => Element) => arrayLiteral(batch.map(f))
      const policy = (x: Recorded) => x.retry ?? Retry.none
      return [
        col((x) => x.claim.leaseId),
        col((x) => x.claim.token),
        col((x) => (x.result.error === undefined ? "ok" : "error")),
        // A success's output rides in the error column; the log's insert trigger moves it (migration 0020).
        col((x) => x.result.error ?? x.result.output ?? ""),
        col((x) => isoString(x.result.startedAt)),
        col((x) => isoString(x.result.finishedAt)),
        col((x) => durationMs(x.result)),
        col((x) => policy(x).attempts),
        col((x) => policy(x).backoffMs),
        col((x) => policy(x).exponential),
        col((x) => policy(x).maxBackoffMs)
      ]
    }
    const resultColumns = (batch: ReadonlyArray<Recorded>) =>
      sql.csv(resultArrays(batch).map((literal, i) => sql`${literal}::${sql.literal(resultTypes[i]!)}`))

    const resultInput = (batch: ReadonlyArray<Recorded>) =>
      sql`SELECT * FROM unnest(${resultColumns(batch)})
          AS x(lease_id, token, status, error_msg, started_at, finished_at, duration_ms, attempts, backoff_ms,
            exponential, max_backoff_ms)`

    // Executions of items that run once (the common case), in one statement with no transaction around it: the
    // schema's `kairos_record_once` function (migration 0013's overload; 0009 says what it writes).
    const recordSingles = (batch: ReadonlyArray<Recorded>) => recordOnceStatement(resultArrays(batch))

    // Executions holding their lease on the item row (`kairos_record_row_leases`, migration 0014): the same rows
    // written, fenced by the token on the item.
    const recordRows = (batch: ReadonlyArray<Recorded>) => recordRowsStatement(resultArrays(batch))

    // Executions of items that run more than once: the same fencing, and each item updated once, by how many
    // finished. Then, in a statement of its own (a fresh snapshot: another instance may have recorded the item's
    // other executions meanwhile), the items whose last run finished are deleted. One transaction, so an item is
    // never left finished but present.
    const recordRepeats = (batch: ReadonlyArray<Recorded>) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const held = yield* sql<{ id: string; item_id: string }>`
            WITH input AS (${resultInput(batch)}), l AS (
              -- The input's columns come back with each lease held: no join of the two afterwards.
              DELETE FROM ${leases} q USING input x, ${items} i
              WHERE q.id = x.lease_id AND q.token = x.token AND i.id = q.item_id
              RETURNING q.id, q.item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at, x.finished_at,
                x.duration_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms
            ), log AS (
              INSERT INTO ${processed}
                (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
              SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
              FROM l
            ), c AS (
              -- Per item: its executions, failures, last finish and its task type's policy (one per type).
              SELECT l.item_id, count(*)::int AS n, (count(*) FILTER (WHERE l.status = 'error'))::int AS failed,
                max(l.finished_at) AS finished_at, min(l.attempts) AS attempts, min(l.backoff_ms) AS backoff_ms,
                bool_and(l.exponential) AS exponential, min(l.max_backoff_ms) AS max_backoff_ms
              FROM l GROUP BY l.item_id
            ), s AS (
              -- Retry.settle: the first failures retry while attempts last; the rest use up runs.
              SELECT c.item_id, c.n, c.failed, c.finished_at, i.failures AS before, e.*, least(c.failed,
                greatest(0, e.attempts - 1 - i.failures)) AS retried
              FROM c JOIN ${items} i ON i.id = c.item_id
              CROSS JOIN LATERAL ${retryPolicy}(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
                i.retry_max_backoff_ms, c.attempts, c.backoff_ms, c.exponential, c.max_backoff_ms) AS e
            ), item AS (
              UPDATE ${items} i SET
                in_flight = greatest(0, i.in_flight - s.n),
                max_runs = CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(0, i.max_runs - (s.n - s.retried)) END,
                runs_done = i.runs_done + s.n,
                failures = CASE WHEN s.failed > s.retried THEN 0 WHEN s.retried > 0 THEN s.before + s.retried ELSE 0 END,
                run_after = CASE WHEN s.retried > 0
                  THEN s.finished_at + ${retryDelay}(s.backoff_ms, s.exponential, s.max_backoff_ms,
                    s.before + s.retried - 1) * interval '1 millisecond'
                  ELSE i.run_after END,
                status = CASE WHEN i.in_flight - s.n > 0 THEN 'processing' ELSE 'pending' END,
                updated_at = now()
              FROM s WHERE i.id = s.item_id
            )
            SELECT l.id::text AS id, l.item_id::text AS item_id FROM l`
          const itemIds = [...new Set(held.map((r) => r.item_id))]
          if (itemIds.length > 0) {
            yield* sql`DELETE FROM ${items} WHERE id = ANY(${itemIds}::bigint[]) AND max_runs = 0 AND in_flight = 0`
          }
          return held
        })
      )

    // The batch as recorded once each (an execution listed twice is recorded the first time: its lease can be
    // deleted only once), split by the statement that records it. A row lease's id (its item's id negated) is the
    // same for every execution of that item, one at a time: of several in the batch, only the one claimed last (the
    // highest attempt) may still hold it, the others having lost it before it was claimed, so that one is recorded.
    const splitBatch = (results: ReadonlyArray<Recorded>) => {
      const latest = new Map<string, Recorded>()
      for (const x of results) {
        const seen = latest.get(x.claim.leaseId)
        if (seen === undefined || x.claim.attempt > seen.claim.attempt) latest.set(x.claim.leaseId, x)
      }
      const batch = results.filter((x) => latest.get(x.claim.leaseId) === x)
      const first = new Set(batch)
      return {
        rows: batch.filter(rowLeased),
        singles: batch.filter((x) => !rowLeased(x) && x.claim.item.maxRuns === 1),
        repeats: batch.filter((x) => !rowLeased(x) && x.claim.item.maxRuns !== 1),
        recorded: (held: ReadonlySet<string>) => results.map((x) => first.has(x) && held.has(x.claim.leaseId))
      }
    }

    const recordResults = (results: ReadonlyArray<Recorded>): Effect.Effect<ReadonlyArray<boolean>, QueueStoreError> =>
      Effect.gen(function* () {
        const { recorded, repeats, rows, singles } = splitBatch(results)
        const held = new Set<string>()
        if (rows.length > 0) for (const r of yield* recordRows(rows)) held.add(r.id)
        if (singles.length > 0) for (const r of yield* recordSingles(singles)) held.add(r.id)
        if (repeats.length > 0) for (const r of yield* recordRepeats(repeats)) held.add(r.id)
        return recorded(held)
      }).pipe(orStoreError)

    // Run-once executions, whatever their kind of lease, and the claim in one call (`kairos_record_and_claim`,
    // migration 0016's overload: the claim takes row leases). Should the claim lose a sequential race, the whole
    // statement rolls back, the record with it, and is tried again.
    const recordOnceAndClaim = (
      batch: ReadonlyArray<Recorded>,
      options: ClaimOptions,
      limit: number,
      types: ReadonlyArray<string>
    ) =>
      recordAndClaimStatement([
        ...resultArrays(batch),
        types,
        limit,
        options.owner,
        options.now,
        options.leaseUntil,
        options.repeatAfter
      ]).pipe(retryLostRace)

    // A chain's step, one success and its type's next item (`kairos_record_and_claim_next`, migration 0016's
    // overload: either kind of lease; the next item's on its row when it runs once): the same rows as above, from
    // single-row statements instead of the batch functions' CTEs.
    const recordOneAndClaimNext = (one: Recorded, options: ClaimOptions, taskType: string) =>
      recordAndClaimNextStatement([
        one.claim.leaseId,
        one.claim.token,
        isoString(one.result.startedAt),
        isoString(one.result.finishedAt),
        durationMs(one.result),
        taskType,
        options.owner,
        options.now,
        options.leaseUntil,
        options.repeatAfter
      ]).pipe(retryLostRace)

    const recordAndClaim = (results: ReadonlyArray<Recorded>, options: ClaimOptions) =>
      Effect.gen(function* () {
        const { recorded, repeats, rows: rowLeases, singles } = splitBatch(results)
        const limit = Math.max(0, Math.floor(options.limit))
        const { limited, plain: types } = typesOf(options)
        const claiming = limit > 0 && types.length + limited.length > 0
        const held = new Set<string>()
        if (repeats.length > 0) for (const r of yield* recordRepeats(repeats)) held.add(r.id)
        if (claiming && limited.length > 0) {
          // Types with limits: the run-once results and the limited claim in one statement, then the rest.
          const once = [...rowLeases, ...singles]
          if (once.length === 0)
            return {
              recorded: recorded(held),
              claims: yield* flows.withInputs(yield* claimSplit(options, limit, types, limited))
            }
          const claims: Array<QueueClaim> = []
          const rows = yield* retryLostRace(
            recordAndClaimLimitedStatement([
              ...resultArrays(once),
              limited,
              limit,
              options.owner,
              options.now,
              options.leaseUntil,
              options.repeatAfter
            ])
          )
          for (const row of rows) {
            if (row.recorded !== null) held.add(row.recorded)
            else claims.push(toClaim(row))
          }
          const left = limit - claims.length
          if (left > 0 && types.length > 0)
            for (const row of yield* claimRetried(options, left, types)) claims.push(toClaim(row))
          return { recorded: recorded(held), claims: yield* flows.withInputs(claims) }
        }
        if (!claiming || rowLeases.length + singles.length === 0) {
          if (rowLeases.length > 0) for (const r of yield* recordRows(rowLeases)) held.add(r.id)
          if (singles.length > 0) for (const r of yield* recordSingles(singles)) held.add(r.id)
          const claims = claiming ? (yield* claimRetried(options, limit, types)).map(toClaim) : []
          return { recorded: recorded(held), claims: yield* flows.withInputs(claims) }
        }
        // Run-once results, whatever their kind of lease. One success and a claim of one is a chain's step.
        const once = [...rowLeases, ...singles]
        // (A success with an output goes through the batch statement: the chain's writes no output.)
        const chainStep =
          once.length === 1 &&
          limit === 1 &&
          types.length === 1 &&
          once[0]!.result.error === undefined &&
          once[0]!.result.output === undefined
        const claims: Array<QueueClaim> = []
        const rows = chainStep
          ? yield* recordOneAndClaimNext(once[0]!, options, types[0]!)
          : yield* recordOnceAndClaim(once, options, limit, types)
        for (const row of rows) {
          if (row.recorded !== null) held.add(row.recorded)
          else claims.push(toClaim(row))
        }
        return { recorded: recorded(held), claims: yield* flows.withInputs(claims) }
      }).pipe(orStoreError)

    // Leases in queue_leases and leases on item rows (their ids negated) in one statement. Answered per execution, by
    // lease id and token: two executions of one run-once item share a lease id (its row), and only the one whose token
    // is on the row holds it.
    const renewLeases = (claims: ReadonlyArray<QueueClaim>, leaseUntil: Date) =>
      claims.length === 0
        ? Effect.succeed([])
        : sql<{ id: string; token: string }>`
              WITH x AS (
                SELECT * FROM unnest(${arrayLiteral(claims.map((c) => c.leaseId))}::bigint[],
                  ${arrayLiteral(claims.map((c) => c.token))}::text[]) AS x(id, token)
              ), t AS (
                UPDATE ${leases} l SET lease_until = ${leaseUntil} FROM x
                WHERE x.id > 0 AND l.id = x.id AND l.token = x.token
                  -- An item deleted while it runs (by hand, or cancelled) takes its lease with it.
                  AND EXISTS (SELECT 1 FROM ${items} i WHERE i.id = l.item_id)
                RETURNING l.id, l.token
              ), r AS (
                UPDATE ${items} i SET lease_until = ${leaseUntil} FROM x
                WHERE x.id < 0 AND i.id = -x.id AND i.lease_token = x.token
                RETURNING -i.id AS id, i.lease_token AS token
              )
              SELECT id::text AS id, token FROM t UNION ALL SELECT id::text AS id, token FROM r`.pipe(
            Effect.map((rows) => {
              const held = new Set(rows.map((r) => `${r.id}:${r.token}`))
              return claims.map((c) => held.has(`${c.leaseId}:${c.token}`))
            }),
            orStoreError
          )

    // A policy is validated before anything is written: a bad one refuses the item (in a batch, the whole batch).
    const policyOf = (input: EnqueueInput): Effect.Effect<Retry.Policy | null, InvalidRetryError> =>
      input.retry === undefined ? Effect.succeed(null) : Effect.suspend(() => Retry.parse(input.retry!))

    // A unique key already queued makes the insert do nothing (the partial unique index decides, so concurrent
    // enqueuers never both insert); the queued item is then read in a statement of its own, whose fresh snapshot sees
    // the winner's committed row. Should that item finish in between (deleted), the insert is tried again.
    // Without a key a row cannot conflict (the index is partial), and the clause would make every insert a
    // speculative one (an extra lock and WAL record per row): it is written only when some row has a key.
    const onKeyConflict = "ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING"
    const conflictTarget = (keyed: boolean) => sql.literal(keyed ? onKeyConflict : "")
    const MAX_KEY_ATTEMPTS = 10
    const insertText = (keyed: boolean) =>
      `INSERT INTO ${fn("queue_items")} (task_type, payload, priority, max_runs, thread, run_after, unique_key, ` +
      "retry_attempts, retry_backoff_ms, retry_exponential, retry_max_backoff_ms, created_at, updated_at, group_key) " +
      "VALUES ($1::text, $2::text, $3::int, $4::int, $5::int, $6::timestamptz, $7::text, $8::int, $9::bigint, " +
      `$10::boolean, $11::bigint, $12::timestamptz, $12::timestamptz, $13::text) ` +
      (keyed ? `${onKeyConflict} ` : "") +
      `RETURNING ${itemColumns}`
    const insertStatement = prepare<ItemRow>(insertText(false))
    const insertKeyedStatement = prepare<ItemRow>(insertText(true))

    const enqueue = (
      input: EnqueueInput,
      now: Date
    ): Effect.Effect<QueueItem, QueueStoreError | InvalidRetryError | InvalidFlowError> =>
      input.after === undefined || input.after.length === 0
        ? Effect.flatMap(policyOf(input), (retry) => enqueueValid(input, retry, now))
        : enqueueWaiting(input, now)

    /**
     * Writes that take locks others take in an order of their own: an enqueue that waits (its trigger locks each item
     * it names, which result batches and lease renewals lock too) and a bulk with unique keys (two bulks wait for each
     * other's uncommitted keys). Postgres may abort one to break a deadlock: it is written again, as a transaction of
     * its own, or a savepoint when the caller has a transaction open (the retry rolls back to it).
     */
    const retriedTransaction = <A, E, R>(self: Effect.Effect<A, E, R>) => retryLockConflicts(sql.withTransaction(self))

    // An item that waits: a row of queue_waiting (it moves into the queue at once if it has nothing to wait for).
    const enqueueWaiting = (input: EnqueueInput, now: Date) =>
      Effect.gen(function* () {
        const after = yield* PgFlows.checkAfter(input)
        const retry = yield* policyOf(input)
        const [id] = yield* retriedTransaction(flows.insertWaiting([{ input, retry, after }], now))
        // Pending outside the queue; no unique key (not allowed with after).
        return pendingItem(id!, input, null, now)
      }).pipe(orFlowError)

    const enqueueValid = (input: EnqueueInput, retry: Retry.Policy | null, now: Date) =>
      Effect.gen(function* () {
        const key = normalizeUniqueKey(input.uniqueKey)
        const group = normalizeGroup(input.group)
        for (let attempt = 1; ; attempt++) {
          const inserted = yield* (key === null ? insertStatement : insertKeyedStatement)([
            input.taskType,
            normalizePayload(input.payload),
            normalizePriority(input.priority),
            normalizeMaxRuns(input.maxRuns),
            normalizeThread(threadFor(input.thread, group)),
            normalizeRunAfter(input.runAfter),
            key,
            retry?.attempts ?? null,
            retry?.backoffMs ?? null,
            retry?.exponential ?? null,
            retry?.maxBackoffMs ?? null,
            now,
            group
          ])
          // The row was just written through the table's types and its normalising trigger: no decode needed.
          if (inserted.length > 0 || key === null) return toItem(inserted[0]!)
          const existing = yield* sql`SELECT ${itemCols} FROM ${items} WHERE unique_key = ${key}`
          if (existing.length > 0) return toItem(existing[0] as unknown as ItemRow)
          if (attempt >= MAX_KEY_ATTEMPTS)
            return yield* new QueueStoreError({
              reason: "Unknown",
              message: `enqueue with unique key ${JSON.stringify(key)}: the queued item kept disappearing`
            })
        }
      }).pipe(orStoreError)

    // Columns as arrays: one statement and a fixed number of parameters, however many items. Inserted in input
    // order, so of two inputs with one key the first is inserted and the second conflicts with it. A column with
    // one value for every item (no delay, no key, no policy: the usual bulk) is sent once, not as an array: less
    // to encode here and to parse there.
    const insertMany = (
      inputs: ReadonlyArray<EnqueueInput>,
      policies: ReadonlyArray<Retry.Policy | null>,
      now: Date
    ) => {
      const keys = inputs.map((i) => normalizeUniqueKey(i.uniqueKey))
      const columns: ReadonlyArray<readonly [name: string, type: string, values: ReadonlyArray<unknown>]> = [
        ["task_type", "text", inputs.map((i) => i.taskType)],
        ["payload", "text", inputs.map((i) => normalizePayload(i.payload))],
        ["priority", "int", inputs.map((i) => normalizePriority(i.priority))],
        ["max_runs", "int", inputs.map((i) => normalizeMaxRuns(i.maxRuns))],
        ["thread", "int", inputs.map((i) => normalizeThread(threadFor(i.thread, normalizeGroup(i.group))))],
        ["run_after", "timestamptz", inputs.map((i) => normalizeRunAfter(i.runAfter)?.toISOString() ?? null)],
        ["unique_key", "text", keys],
        ["retry_attempts", "int", policies.map((p) => p?.attempts ?? null)],
        ["retry_backoff_ms", "bigint", policies.map((p) => p?.backoffMs ?? null)],
        ["retry_exponential", "boolean", policies.map((p) => p?.exponential ?? null)],
        ["retry_max_backoff_ms", "bigint", policies.map((p) => p?.maxBackoffMs ?? null)],
        ["group_key", "text", inputs.map((i) => normalizeGroup(i.group))]
      ]
      // task_type always goes as an array: unnest needs one, and it gives the row count.
      const uniform = (name: string, values: ReadonlyArray<unknown>) =>
        name !== "task_type" && values.every((v) => v === values[0])
      const arrays = columns.filter(([name, , values]) => !uniform(name, values))
      const selected = columns.map(([name, type, values]) =>
        uniform(name, values)
          ? sql`${values[0] as string | number | boolean | null}::${sql.literal(type)}`
          : sql`x.${sql(name)}`
      )
      const unnested = arrays.map(
        ([, type, values]) => sql`${values as ReadonlyArray<string>}::${sql.literal(`${type}[]`)}`
      )
      const names = (cs: ReadonlyArray<readonly [string, ...Array<unknown>]>) =>
        sql.literal(cs.map(([name]) => name).join(", "))
      return sql<{ id: string; unique_key: string | null }>`
        INSERT INTO ${items} (${names(columns)}, created_at, updated_at)
        SELECT ${sql.csv(selected)}, ${now}, ${now}
        FROM unnest(${sql.csv(unnested)}) WITH ORDINALITY AS x(${names(arrays)}, n)
        ORDER BY x.n
        ${conflictTarget(keys.some((k) => k !== null))}
        RETURNING id::text AS id, unique_key`
    }

    const enqueueMany = (
      inputs: ReadonlyArray<EnqueueInput>,
      now: Date
    ): Effect.Effect<ReadonlyArray<string>, QueueStoreError | InvalidRetryError | InvalidFlowError> =>
      inputs.some((i) => i.after !== undefined && i.after.length > 0)
        ? enqueueManyWaiting(inputs, now)
        : enqueueManyPlain(inputs, now)

    // Some wait: those go to queue_waiting, the rest as usual, in one transaction; ids in input order.
    const enqueueManyWaiting = (inputs: ReadonlyArray<EnqueueInput>, now: Date) =>
      Effect.gen(function* () {
        const afters = yield* Effect.forEach(inputs, PgFlows.checkAfter)
        const policies = yield* Effect.forEach(inputs, policyOf)
        const waitingAt = inputs.flatMap((_, i) => (afters[i]!.length > 0 ? [i] : []))
        const plainAt = inputs.flatMap((_, i) => (afters[i]!.length > 0 ? [] : [i]))
        return yield* retriedTransaction(
          Effect.gen(function* () {
            // Raw errors: a lost deadlock (on keys, or on what the waiting ones lock) retries the whole of it.
            const plainIds = yield* insertManyRows(
              plainAt.map((i) => inputs[i]!),
              plainAt.map((i) => policies[i]!),
              now
            )
            const waitingIds = yield* flows.insertWaiting(
              waitingAt.map((i) => ({ input: inputs[i]!, retry: policies[i]!, after: afters[i]! })),
              now
            )
            const ids: Array<string> = new Array(inputs.length)
            plainAt.forEach((at, k) => (ids[at] = plainIds[k]!))
            waitingAt.forEach((at, k) => (ids[at] = waitingIds[k]!))
            return ids
          })
        )
      }).pipe(orFlowError)

    const enqueueFlow: QueueStore["Type"]["enqueueFlow"] = (steps, now) =>
      Effect.gen(function* () {
        const policies = new Map<string, Retry.Policy | null>()
        for (const step of steps) policies.set(step.key, yield* policyOf(step))
        return yield* retriedTransaction(flows.insertFlow(steps, policies, now))
      }).pipe(orFlowError)

    const enqueueManyPlain = (
      inputs: ReadonlyArray<EnqueueInput>,
      now: Date
    ): Effect.Effect<ReadonlyArray<string>, QueueStoreError | InvalidRetryError> =>
      Effect.flatMap(
        // Most bulks carry no policy of their own: no Effect per item then.
        inputs.some((i) => i.retry !== undefined)
          ? Effect.forEach(inputs, policyOf)
          : Effect.succeed(inputs.map(() => null)),
        (policies) => {
          const rows = insertManyRows(inputs, policies, now)
          // Without keys, plain INSERTs: nothing to wait for, no transaction.
          const keyed = inputs.some((i) => normalizeUniqueKey(i.uniqueKey) !== null)
          return (keyed ? retriedTransaction(rows) : rows).pipe(orStoreError)
        }
      )

    // The ids of a bulk in input order, a key already queued answering with that item's id.
    const insertManyRows = (
      inputs: ReadonlyArray<EnqueueInput>,
      policies: ReadonlyArray<Retry.Policy | null>,
      now: Date
    ) =>
      Effect.gen(function* () {
        if (inputs.length === 0) return []
        const rows = yield* insertMany(inputs, policies, now)
        // Keyless rows come back in input order; keyed ones are matched by key.
        const keyless = rows.filter((r) => r.unique_key === null).map((r) => r.id)
        const byKey = new Map<string, string>()
        for (const r of rows) if (r.unique_key !== null) byKey.set(r.unique_key, r.id)
        let missing = [...new Set(inputs.flatMap((i) => normalizeUniqueKey(i.uniqueKey) ?? []))].filter(
          (k) => !byKey.has(k)
        )
        for (let attempt = 1; missing.length > 0; attempt++) {
          const existing = yield* sql<{ id: string; unique_key: string }>`
            SELECT id::text AS id, unique_key FROM ${items} WHERE unique_key = ANY(${missing}::text[])`
          for (const r of existing) byKey.set(r.unique_key, r.id)
          missing = missing.filter((k) => !byKey.has(k))
          if (missing.length === 0) break
          if (attempt >= MAX_KEY_ATTEMPTS)
            return yield* new QueueStoreError({
              reason: "Unknown",
              message: `enqueue with unique keys ${JSON.stringify(missing)}: the queued items kept disappearing`
            })
          // Those items finished in between: insert them again (the first input of each key).
          const again = missing.map((k) => inputs.findIndex((i) => normalizeUniqueKey(i.uniqueKey) === k))
          const insertedAgain = yield* insertMany(
            again.map((i) => inputs[i]!),
            again.map((i) => policies[i]!),
            now
          )
          for (const r of insertedAgain) if (r.unique_key !== null) byKey.set(r.unique_key, r.id)
          missing = missing.filter((k) => !byKey.has(k))
        }
        let next = 0
        return inputs.map((i) => {
          const key = normalizeUniqueKey(i.uniqueKey)
          return key === null ? keyless[next++]! : byKey.get(key)!
        })
      })

    // A transactional execution's record (see PgTransaction): the same fenced statements, on its transaction.
    const transact: QueueStore["Type"]["transact"] = (run, record, transactOptions) =>
      PgTransaction.transact(
        { pool: options.pool, sql },
        run,
        (value) => {
          const input = record(value)
          return input === undefined ? undefined : Effect.map(recordResults([input]), ([held]) => held === true)
        },
        transactOptions,
        toStoreError
      )

    return QueueStore.of({
      recordResults,
      transact,
      recordAndClaim,
      enqueueMany,
      enqueue,
      enqueueFlow,

      claimBatch,

      renewLeases,

      recoverStuck: (now, owner) =>
        Effect.gen(function* () {
          // Expired leases count as executions that never finished; an owner's own at its stop do not. Leases on
          // item rows first, in a statement of their own (an item changed by SQL to run again may hold leases of
          // both kinds, and one statement must not update a row twice). Rows locked by a transaction still open are
          // skipped, taken back by a later round: a transactional execution whose COMMIT went unanswered (its
          // network frozen) may leave its record's locks on the server until that transaction's limit, and waiting
          // for them would hold every runner's claims back that long.
          const [onRows] = yield* sql<{ n: number; giveUp: number }>`
            WITH t AS (
              SELECT id FROM ${items}
              WHERE lease_token IS NOT NULL AND (lease_until < ${now} OR lease_owner = ${owner ?? null})
              FOR UPDATE SKIP LOCKED
            ), u AS (
              UPDATE ${items} i SET in_flight = greatest(0, i.in_flight - 1),
                -- (A lease left on a row that runs nothing, copied by SQL from a running one, is only cleared.)
                unfinished = i.unfinished + CASE WHEN i.lease_until < ${now} AND i.in_flight > 0 THEN 1 ELSE 0 END,
                status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
                lease_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = ${now}
              FROM t WHERE i.id = t.id
              RETURNING i.unfinished >= ${MAX_UNFINISHED} AND i.in_flight = 0 AS give_up
            )
            SELECT count(*)::int AS n, (count(*) FILTER (WHERE give_up))::int AS "giveUp" FROM u`
          // A lease row whose item's row is locked too (an execution's record locks both) is left as it is; one
          // whose item is gone (deleted by SQL) is deleted.
          const [taken] = yield* sql<{ n: number; giveUp: number }>`
            WITH t AS (
              SELECT id, item_id FROM ${leases} WHERE lease_until < ${now} OR owner = ${owner ?? null}
              FOR UPDATE SKIP LOCKED
            ), r AS (
              SELECT id FROM ${items} WHERE id IN (SELECT item_id FROM t) FOR UPDATE SKIP LOCKED
            ), l AS (
              DELETE FROM ${leases} l USING t
              WHERE l.id = t.id
                AND (t.item_id IN (SELECT id FROM r) OR NOT EXISTS (SELECT 1 FROM ${items} x WHERE x.id = t.item_id))
              RETURNING l.item_id, l.lease_until < ${now} AS expired
            ), c AS (
              SELECT item_id, count(*)::int AS n, count(*) FILTER (WHERE expired)::int AS expired FROM l GROUP BY item_id
            ), u AS (
              UPDATE ${items} i SET in_flight = greatest(0, i.in_flight - c.n), unfinished = i.unfinished + c.expired,
                status = CASE WHEN i.in_flight - c.n > 0 THEN 'processing' ELSE 'pending' END,
                updated_at = ${now}
              FROM c WHERE i.id = c.item_id
              RETURNING i.unfinished >= ${MAX_UNFINISHED} AND i.in_flight = 0 AS give_up
            )
            SELECT (SELECT count(*) FROM l)::int AS n, (SELECT count(*) FROM u WHERE give_up)::int AS "giveUp"`
          // Items whose executions keep ending without a result: that run is given up, recorded as an error, and
          // counts as one of the item's runs (deleted when it was the last).
          if ((taken?.giveUp ?? 0) + (onRows?.giveUp ?? 0) > 0) {
            yield* sql`
              WITH g AS (
                SELECT id, task_type, payload, unfinished FROM ${items}
                WHERE unfinished >= ${MAX_UNFINISHED} AND in_flight = 0 FOR UPDATE SKIP LOCKED
              ), log AS (
                INSERT INTO ${processed}
                  (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
                SELECT g.id, g.task_type, g.payload, 'error', ${gaveUpMessage(MAX_UNFINISHED)}, ${now}, ${now}, 0 FROM g
              ), gone AS (
                DELETE FROM ${items} i USING g WHERE i.id = g.id AND i.max_runs BETWEEN 0 AND 1
              )
              UPDATE ${items} i SET unfinished = 0, failures = 0, runs_done = i.runs_done + 1, updated_at = ${now},
                max_runs = CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(0, i.max_runs - 1) END
              FROM g WHERE i.id = g.id AND NOT (i.max_runs BETWEEN 0 AND 1)`
          }
          return (taken?.n ?? 0) + (onRows?.n ?? 0)
        }).pipe(orStoreError),

      // As `recoverStuck` with an owner, for these executions only (fenced by their tokens): leases on item rows
      // (ids negated), then leases in queue_leases, each in a statement of its own, as there.
      releaseLeases: (claims, now) =>
        claims.length === 0
          ? Effect.succeed(0)
          : Effect.gen(function* () {
              const ids = arrayLiteral(claims.map((c) => c.leaseId))
              const tokens = arrayLiteral(claims.map((c) => c.token))
              const [onRows] = yield* sql<{ n: number }>`
                WITH x AS (SELECT * FROM unnest(${ids}::bigint[], ${tokens}::text[]) AS x(id, token)), u AS (
                  UPDATE ${items} i SET in_flight = greatest(0, i.in_flight - 1),
                    status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
                    lease_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = ${now}
                  FROM x WHERE x.id < 0 AND i.id = -x.id AND i.lease_token = x.token
                  RETURNING i.id
                )
                SELECT count(*)::int AS n FROM u`
              const [taken] = yield* sql<{ n: number }>`
                WITH x AS (SELECT * FROM unnest(${ids}::bigint[], ${tokens}::text[]) AS x(id, token)), l AS (
                  DELETE FROM ${leases} l USING x WHERE x.id > 0 AND l.id = x.id AND l.token = x.token
                  RETURNING l.item_id
                ), c AS (
                  SELECT item_id, count(*)::int AS n FROM l GROUP BY item_id
                ), u AS (
                  UPDATE ${items} i SET in_flight = greatest(0, i.in_flight - c.n),
                    status = CASE WHEN i.in_flight - c.n > 0 THEN 'processing' ELSE 'pending' END,
                    updated_at = ${now}
                  FROM c WHERE i.id = c.item_id
                )
                SELECT count(*)::int AS n FROM l`
              return (taken?.n ?? 0) + (onRows?.n ?? 0)
            }).pipe(orStoreError),

      nextLeaseExpiry: (exceptOwner) => nextLeaseExpiryStatement([exceptOwner]).pipe(Effect.map(firstAt), orStoreError),

      // Per task type, the first future run_after on the (task_type, run_after) index.
      nextRunAfter: (taskTypes, now) =>
        taskTypes.length === 0
          ? Effect.succeed(Option.none())
          : nextRunAfterStatement([[...new Set(taskTypes)], now]).pipe(Effect.map(firstAt), orStoreError),

      // Waiting items count: they are work still to come.
      pendingCount: () =>
        sql<{ n: number }>`SELECT ((SELECT count(*) FROM ${items}) + (SELECT count(*) FROM ${waiting}))::int AS n`.pipe(
          Effect.map((rows) => rows[0]?.n ?? 0),
          orStoreError
        ),

      // Each table counted up to one row past the bound: an index-only scan of at most that many entries. A table
      // past it is estimated as the planner estimates it (its statistics, scaled to the table's size now, so a table
      // filled since it was last analyzed is not read as empty): one EXPLAIN, planned but not run.
      depth: () =>
        Effect.gen(function* () {
          const [row] = yield* sql<{ items: number; waiting: number }>`
            SELECT ${cappedCount(sql, items)}::int AS items, ${cappedCount(sql, waiting)}::int AS waiting`
          const past = (n: number) => n > EXACT_DEPTH_UP_TO
          const one = (n: number, name: string) =>
            past(n)
              ? Effect.map(estimatedRows(name), (estimate) => Math.max(EXACT_DEPTH_UP_TO + 1, estimate))
              : Effect.succeed(n)
          const counted = { items: row?.items ?? 0, waiting: row?.waiting ?? 0 }
          const [itemCount, waitingCount] = yield* Effect.all([
            one(counted.items, "queue_items"),
            one(counted.waiting, "queue_waiting")
          ])
          return {
            count: itemCount + waitingCount,
            exact: !past(counted.items) && !past(counted.waiting)
          } satisfies QueueDepth
        }).pipe(orStoreError),

      cancel: (itemId) =>
        // Its leases go with it (a lease on its row, and its rows of queue_leases, which have had no foreign key to
        // cascade since migration 0004): a result still in flight finds none and is refused, and the rescue does not
        // count a lease of an item that is gone.
        sql<{ status: string }>`
          WITH gone AS (DELETE FROM ${items} WHERE id = ${itemId}::bigint RETURNING id, status),
            leased AS (DELETE FROM ${leases} WHERE item_id IN (SELECT id FROM gone))
          SELECT status FROM gone`.pipe(
          Effect.flatMap(
            (rows): Effect.Effect<Option.Option<"pending" | "processing">, unknown> =>
              rows.length > 0
                ? Effect.succeed(Option.some(rows[0]!.status === "processing" ? "processing" : "pending"))
                : // A waiting item (a statement more, only when no queued item has that id).
                  Effect.map(flows.cancelWaiting(itemId), (cancelled) =>
                    cancelled ? Option.some("pending" as const) : Option.none()
                  )
          ),
          orStoreError
        ),

      retryExecution: (processedId, createdAt) =>
        sql`INSERT INTO ${items} (task_type, payload, created_at, updated_at)
            SELECT task_type, payload, ${createdAt}, ${createdAt} FROM ${processed} WHERE id = ${processedId}::bigint
            RETURNING ${itemCols}`.pipe(
          Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => toItem(row as unknown as ItemRow))),
          orStoreError
        ),

      pruneProcessed: ({ keepLast, limit, olderThan }) =>
        olderThan === undefined && keepLast === undefined
          ? Effect.succeed(0)
          : sql<{ n: number }>`SELECT ${sql(schema)}.kairos_prune_processed(
              ${olderThan ?? null}::timestamptz, ${keepLast ?? null}::bigint, ${limit}::int) AS n`.pipe(
              Effect.map((rows) => rows[0]?.n ?? 0),
              orStoreError
            ),

      vacuum: (request) => orStoreError(vacuum(request))
    })
  })

/** The Postgres QueueStore as a layer over kairos's own client (`PgKairos.clientLayer`: its pool is `PgPool`). */
export const layer = (options: PgOptions = {}): Layer.Layer<QueueStore, never, SqlClient.SqlClient | PgPool> =>
  Layer.effect(
    QueueStore,
    Effect.flatMap(PgPool, (pool) => make({ ...options, pool }))
  )

/** The Postgres QueueStore as a layer over any SqlClient (its statements all go through the client). */
export const layerOverClient = (options: PgOptions = {}): Layer.Layer<QueueStore, never, SqlClient.SqlClient> =>
  Layer.effect(QueueStore, make(options))
