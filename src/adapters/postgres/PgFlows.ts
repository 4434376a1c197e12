/**
 * Items that wait for other items, on Postgres (migration 0020): a waiting item is a row of `queue_waiting`, outside
 * every claim; the table's triggers look up what it waits for, and the deletion of an item something waits for moves
 * its waiters into `queue_items` (or records them as not run). This module writes waiting items and flows, reads a
 * released item's inputs, and cancels a waiting item.
 */
import { normalizeGroup, threadFor } from "../../domain/Limits.js"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import { InvalidFlowError, InvalidRetryError } from "../../domain/errors.js"
import * as Flow from "../../domain/Flow.js"
import {
  normalizeMaxRuns,
  normalizePayload,
  normalizePriority,
  normalizeRunAfter,
  normalizeThread,
  normalizeUniqueKey
} from "../../domain/QueueItem.js"
import type * as Retry from "../../domain/Retry.js"
import { type EnqueueInput, type FlowStepInput, type QueueClaim, QueueStoreError } from "../../ports/QueueStore.js"
import { classify, type PgFailure } from "./PgErrors.js"
import { table } from "./PgSchema.js"

/** One waiting item to write: what it is, its policy, and what it waits for (ids, and a flow's keys for them). */
export interface WaitingRow {
  readonly id?: string | undefined
  readonly input: Omit<EnqueueInput, "after">
  readonly retry: Retry.Policy | null
  readonly after: ReadonlyArray<string>
  readonly afterKeys?: ReadonlyArray<string> | undefined
  readonly stepKey?: string | undefined
}

/** The trigger's refusal of an `after` naming an unknown item (SQLSTATE 23503, its message from migration 0020). */
const refusal = (e: unknown): string | undefined => {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } } | null | undefined)?.cause
  return cause?.code === "23503" && typeof cause.message === "string" && cause.message.startsWith("kairos: after")
    ? cause.message.slice("kairos: ".length)
    : undefined
}

/**
 * Like `mapPgErrors`, but a flow's own refusals stay what they are: a policy or a graph refused before writing, and
 * an unknown `after` id refused by the database, each as its tagged error.
 */
export const orFlowErrors =
  (toError: (failure: PgFailure) => QueueStoreError) =>
  <A, R>(
    self: Effect.Effect<A, unknown, R>
  ): Effect.Effect<A, QueueStoreError | InvalidRetryError | InvalidFlowError, R> =>
    Effect.catchAllCause(
      self,
      (cause): Effect.Effect<never, QueueStoreError | InvalidRetryError | InvalidFlowError> => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const failure = Cause.failureOption(cause)
        const value = failure._tag === "Some" ? failure.value : Cause.squash(cause)
        if (value instanceof InvalidFlowError || value instanceof InvalidRetryError || value instanceof QueueStoreError)
          return Effect.fail(value)
        const refused = refusal(value)
        if (refused !== undefined) return Effect.fail(new InvalidFlowError({ reason: "unknownItem", message: refused }))
        return Effect.fail(toError(classify(value)))
      }
    )

/** `after` cannot go with a unique key: a waiting item is not queued, so the key could not hold while it waits. */
export const checkAfter = (input: EnqueueInput): Effect.Effect<ReadonlyArray<string>, InvalidFlowError> => {
  const after = Flow.normalizeAfter(input.after)
  if (after.length > 0 && normalizeUniqueKey(input.uniqueKey) !== null)
    return Effect.fail(
      new InvalidFlowError({ reason: "unsupported", message: "enqueue: after cannot be combined with uniqueKey" })
    )
  const bad = after.find((id) => !/^[1-9][0-9]{0,18}$/.test(id))
  if (bad !== undefined)
    return Effect.fail(
      new InvalidFlowError({
        reason: "unknownItem",
        message: `after names item ${JSON.stringify(bad)}, which is unknown (not an item id)`
      })
    )
  return Effect.succeed(after)
}

/** What the Postgres store's flow paths need. */
export const make = (sql: SqlClient.SqlClient, schema: string) => {
  const waiting = sql(table(schema, "queue_waiting"))
  const items = sql(table(schema, "queue_items"))
  const sequence = `${schema}.queue_items_id_seq`

  /**
   * Writes waiting items in one statement, in order (a row's triggers see the rows before it: a flow's steps come
   * after the steps they wait for); returns their ids. Each moves into the queue at once when it has nothing left to
   * wait for.
   */
  const insertWaiting = (rows: ReadonlyArray<WaitingRow>, now: Date) => {
    const col = <A>(f: (row: WaitingRow) => A) => rows.map(f)
    return sql<{ id: string }>`
      INSERT INTO ${waiting} (id, task_type, payload, priority, max_runs, thread, run_after, retry_attempts,
        retry_backoff_ms, retry_exponential, retry_max_backoff_ms, after, after_keys, step_key, group_key, created_at)
      SELECT coalesce(x.id, nextval(${sequence}::regclass)), x.task_type, x.payload, x.priority, x.max_runs, x.thread,
        x.run_after, x.retry_attempts, x.retry_backoff_ms, x.retry_exponential, x.retry_max_backoff_ms,
        ARRAY(SELECT e::bigint FROM jsonb_array_elements_text(x.after::jsonb) AS e),
        CASE WHEN x.after_keys IS NOT NULL
          THEN ARRAY(SELECT e FROM jsonb_array_elements_text(x.after_keys::jsonb) AS e) END,
        x.step_key, x.group_key, ${now}
      FROM unnest(
        ${col((r) => r.id ?? null) as ReadonlyArray<string>}::bigint[],
        ${col((r) => r.input.taskType)}::text[],
        ${col((r) => normalizePayload(r.input.payload)) as ReadonlyArray<string>}::text[],
        ${col((r) => normalizePriority(r.input.priority))}::int[],
        ${col((r) => normalizeMaxRuns(r.input.maxRuns))}::int[],
        ${col((r) => normalizeThread(threadFor(r.input.thread, normalizeGroup(r.input.group))))}::int[],
        ${col((r) => normalizeRunAfter(r.input.runAfter)?.toISOString() ?? null) as ReadonlyArray<string>}::timestamptz[],
        ${col((r) => r.retry?.attempts ?? null) as ReadonlyArray<number>}::int[],
        ${col((r) => r.retry?.backoffMs ?? null) as ReadonlyArray<number>}::bigint[],
        ${col((r) => r.retry?.exponential ?? null) as ReadonlyArray<boolean>}::boolean[],
        ${col((r) => r.retry?.maxBackoffMs ?? null) as ReadonlyArray<number>}::bigint[],
        ${col((r) => JSON.stringify(r.after))}::text[],
        ${col((r) => (r.afterKeys === undefined ? null : JSON.stringify(r.afterKeys))) as ReadonlyArray<string>}::text[],
        ${col((r) => r.stepKey ?? null) as ReadonlyArray<string>}::text[],
        ${col((r) => normalizeGroup(r.input.group)) as ReadonlyArray<string>}::text[]
      ) WITH ORDINALITY AS x(id, task_type, payload, priority, max_runs, thread, run_after, retry_attempts,
        retry_backoff_ms, retry_exponential, retry_max_backoff_ms, after, after_keys, step_key, group_key, n)
      ORDER BY x.n
      RETURNING id::text AS id`.pipe(Effect.map((inserted) => inserted.map((r) => r.id)))
  }

  /** A flow's steps, checked and ordered, with their ids drawn first (a step's `after` names its peers by id). */
  const insertFlow = (
    steps: ReadonlyArray<FlowStepInput>,
    policies: ReadonlyMap<string, Retry.Policy | null>,
    now: Date
  ) =>
    Effect.gen(function* () {
      const ordered = Flow.order(steps)
      if (ordered.length === 0) return {} as Record<string, string>
      const drawn: ReadonlyArray<{ id: string }> = yield* sql<{ id: string }>`
        SELECT nextval(${sequence}::regclass)::text AS id FROM generate_series(1, ${ordered.length})`
      const ids = new Map(ordered.map((s, i) => [s.key, drawn[i]!.id]))
      yield* insertWaiting(
        ordered.map((s) => ({
          id: ids.get(s.key),
          input: s.step,
          retry: policies.get(s.key) ?? null,
          after: s.after.map((key) => ids.get(key)!),
          afterKeys: s.after,
          stepKey: s.key
        })),
        now
      )
      return Object.fromEntries(ids)
    })

  /**
   * Claims with their inputs: one statement more, only when a claimed item waited for others (its unique key, set
   * when it was released, says so). Such an item shows no unique key.
   */
  const withInputs = (claims: ReadonlyArray<QueueClaim>): Effect.Effect<ReadonlyArray<QueueClaim>, SqlError> => {
    const released = claims.filter((c) => c.item.uniqueKey?.startsWith(Flow.RELEASED_KEY_PREFIX) === true)
    return released.length === 0 ? Effect.succeed(claims) : readInputs(claims, released)
  }

  const readInputs = (claims: ReadonlyArray<QueueClaim>, released: ReadonlyArray<QueueClaim>) =>
    Effect.gen(function* () {
      const rows = yield* sql<{ id: string; inputs: unknown }>`
        SELECT id::text AS id, inputs FROM ${items} WHERE id = ANY(${released.map((c) => c.item.id)}::bigint[])`
      const inputs = new Map(rows.map((r) => [r.id, r.inputs]))
      return claims.map(
        (c): QueueClaim =>
          c.item.uniqueKey?.startsWith(Flow.RELEASED_KEY_PREFIX) === true
            ? {
                ...c,
                item: { ...c.item, uniqueKey: null },
                inputs: (inputs.get(c.item.id) ?? {}) as Readonly<Record<string, unknown>>
              }
            : c
      )
    })

  /** Cancels a waiting item (and dooms what waits for it); false when no item waits under that id. */
  const cancelWaiting = (id: string) =>
    sql<{ cancelled: boolean }>`SELECT ${sql(schema)}.kairos_flow_cancel(${id}::bigint) AS cancelled`.pipe(
      Effect.map((rows) => rows[0]?.cancelled === true)
    )

  return { insertWaiting, insertFlow, withInputs, cancelWaiting }
}
