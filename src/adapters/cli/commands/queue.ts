/**
 * The queue's commands: `enqueue`, `queue`, `processed`, `cancel`, `retry`, `prune` and `truncate`.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { isId } from "../../../domain/Id.js"
import { ISO_TIME } from "../../../internal/isoTime.js"
import * as DurationInput from "../../../domain/DurationInput.js"
import * as Retention from "../../../domain/Retention.js"
import * as Retry from "../../../domain/Retry.js"
import * as PgJobStore from "../../postgres/PgJobStore.js"
import * as PgQueueStore from "../../postgres/PgQueueStore.js"
import * as PgReadModel from "../../postgres/PgReadModel.js"
import { CliError } from "../errors.js"
import { escapeControls, snakeKeys, table } from "../format.js"
import { common, int4Option, output, withDb, handledCell, withReads, count, withAdmin } from "../common.js"

export const enqueueCommand = Command.make(
  "enqueue",
  {
    ...common,
    taskType: Args.text({ name: "taskType" }).pipe(Args.withDescription("the task type: which handler runs the item")),
    payload: Args.text({ name: "payload" }).pipe(
      Args.withDescription("the text the handler gets as job.payload, usually JSON (default: empty)"),
      Args.optional
    ),
    priority: int4Option("priority").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("higher runs first (default 0)"),
      Options.withDefault(0)
    ),
    maxRuns: int4Option("max-runs").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("how many times the item runs: N times, -1 forever (default 1; 0 means 1)"),
      Options.withDefault(1)
    ),
    thread: Options.choice("thread", ["0", "1"]).pipe(
      Options.withDescription(
        "0: items of this task type run one at a time, in order, across all workers; 1: side by side (default 0; 1 with --group)"
      ),
      Options.optional
    ),
    group: Options.text("group").pipe(
      Options.withPseudoName("KEY"),
      Options.withDescription(
        "the item's group, for its task type's limits per group (`kairos limits set <type> --concurrency 1 --per-group` runs each group's items one at a time, in order)"
      ),
      Options.optional
    ),
    runAfter: Options.text("run-after").pipe(
      Options.withPseudoName("10m|TIME"),
      Options.withDescription(
        "not before then: a delay from now (30s, 10m, 2h) or an ISO time (2026-12-01T09:00:00Z) (default: at once)"
      ),
      Options.optional
    ),
    uniqueKey: Options.text("unique-key").pipe(
      Options.withPseudoName("KEY"),
      Options.withDescription(
        "while an item with this key is pending or processing, add nothing and print that item instead"
      ),
      Options.optional
    ),
    retry: Options.integer("retry").pipe(
      Options.withPseudoName("ATTEMPTS"),
      Options.withDescription(
        "attempts per run, the first included: 3 tries a failing item up to three times before its run counts as " +
          "failed (default: its task type's policy, else 1)"
      ),
      Options.optional
    ),
    backoff: Options.text("backoff").pipe(
      Options.withPseudoName("WAIT"),
      Options.withDescription(
        "with --retry, the wait before each retry: 30s (fixed) or exp:1s or exp:1s:10m (doubling from 1s, at most " +
          "10m) (default exp:1s:1h)"
      ),
      Options.optional
    ),
    after: Options.text("after").pipe(
      Options.withPseudoName("ID,ID"),
      Options.withDescription(
        "ids of items this one waits for: it runs once each finished successfully, and is recorded as not run " +
          "if one fails for good or is cancelled"
      ),
      Options.optional
    )
  },
  (c) =>
    Effect.gen(function* () {
      const now = new Date()
      // Checked before connecting: a bad value is a usage error, whatever the database.
      const runAfter = yield* Option.match(c.runAfter, {
        onNone: () => Either.right(undefined),
        onSome: (text) => parseRunAfter(text, now)
      })
      const retry = yield* parseRetry(c.retry, c.backoff)
      const after = yield* parseAfter(c.after)
      return yield* withDb(c, (_sql, schema) =>
        Effect.gen(function* () {
          const queue = yield* PgQueueStore.make({ schema })
          const item = yield* queue
            .enqueue(
              {
                taskType: c.taskType,
                payload: Option.getOrElse(c.payload, () => ""),
                priority: c.priority,
                maxRuns: c.maxRuns,
                thread: Option.getOrUndefined(Option.map(c.thread, Number)),
                group: Option.getOrUndefined(c.group),
                runAfter,
                uniqueKey: Option.getOrUndefined(c.uniqueKey),
                retry,
                after
              },
              now
            )
            .pipe(Effect.catchTag("InvalidFlowError", (e) => Effect.fail(new CliError({ message: e.message }))))
          // A new row is stamped with this command's time; the item already queued under the key was not.
          const existing = item.createdAt.getTime() !== now.getTime()
          const details =
            `${escapeControls(item.taskType)}, priority ${item.priority}, max runs ${item.maxRuns}, thread ${item.thread}` +
            (item.runAfter === null ? "" : `, run after ${item.runAfter.toISOString()}`) +
            (item.uniqueKey === null ? "" : `, unique key ${escapeControls(item.uniqueKey)}`) +
            (item.group === null ? "" : `, group ${escapeControls(item.group)}`) +
            (retry === undefined || existing ? "" : `, retry ${Retry.describe(Retry.policy(retry))}`) +
            (after === undefined ? "" : `, after ${after.join(",")}`)
          yield* output(c, `${existing ? "already queued" : "enqueued"} ${item.id} (${details})`, {
            ...snakeKeys(item),
            existing
          })
        })
      )
    })
).pipe(Command.withDescription("add a queue item"))

/** `--after 12,13` as ids, checked before connecting: one usage error naming the flag otherwise. */
export const parseAfter = (text: Option.Option<string>): Either.Either<ReadonlyArray<string> | undefined, CliError> => {
  if (Option.isNone(text)) return Either.right(undefined)
  const ids = text.value
    .split(",")
    .map((id) => id.trim())
    .filter((id) => id.length > 0)
  const bad = ids.find((id) => !isId(id))
  if (ids.length === 0 || bad !== undefined)
    return Either.left(
      new CliError({
        message: `--after takes item ids separated by commas (e.g. --after 12,13), got ${JSON.stringify(text.value)}`
      })
    )
  return Either.right(ids)
}

/**
 * `--retry` and `--backoff` as a policy, checked before connecting: `--backoff` is `30s` (fixed), `exp:1s` or
 * `exp:1s:10m` (exponential, with its max). One usage error naming the flag otherwise.
 */
export const parseRetry = (
  attempts: Option.Option<number>,
  backoff: Option.Option<string>
): Either.Either<Retry.Input | undefined, CliError> => {
  if (Option.isNone(attempts))
    return Option.isSome(backoff)
      ? Either.left(new CliError({ message: "--backoff needs --retry: how many attempts a run may take" }))
      : Either.right(undefined)
  const text = Option.getOrUndefined(backoff)?.trim()
  const parts = text?.split(":")
  const input: Retry.Input =
    text === undefined
      ? { attempts: attempts.value }
      : parts![0]!.toLowerCase() === "exp" && parts!.length >= 2 && parts!.length <= 3
        ? {
            attempts: attempts.value,
            backoff: {
              type: "exponential",
              delay: parts![1]! as DurationInput.Input,
              max: parts![2] as DurationInput.Input | undefined
            }
          }
        : { attempts: attempts.value, backoff: text as DurationInput.Input }
  return Either.match(Retry.parse(input), {
    onLeft: (e) =>
      Either.left(
        new CliError({
          message: `${e.field === "attempts" ? "--retry" : "--backoff"}: ${e.message.replace(/^invalid retry: /, "")}`
        })
      ),
    onRight: () => Either.right(input)
  })
}

/**
 * `--run-after`: a delay from `now` (read like every duration flag) or an ISO time (a time without an offset is
 * local, as JavaScript reads it). Anything else is one clear usage error.
 */
export const parseRunAfter = (text: string, now: Date): Either.Either<Date, CliError> => {
  const trimmed = text.trim()
  if (ISO_TIME.test(trimmed)) {
    const at = new Date(trimmed)
    if (Number.isFinite(at.getTime())) return Either.right(at)
  }
  const delay = DurationInput.parse(trimmed)
  if (Either.isRight(delay)) return Either.right(new Date(now.getTime() + Duration.toMillis(delay.right)))
  // A duration that is zero, negative or infinite: say that, as every duration flag does.
  if (delay.left !== "not a duration")
    return Either.left(
      new CliError({
        message: Either.match(DurationInput.decodeField("--run-after", trimmed), {
          onLeft: (e) => e.message,
          onRight: () => `--run-after: ${JSON.stringify(text)} is not a usable delay`
        })
      })
    )
  return Either.left(
    new CliError({
      message: `--run-after: ${JSON.stringify(text)} is neither a delay (e.g. 30s, 10m, 2h) nor an ISO time (e.g. 2026-12-01T09:00:00Z)`
    })
  )
}

export const queueCommand = Command.make("queue", common, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      // Every item (the table holds only pending and processing ones), whole; payloads are not listed.
      const { rows: items } = yield* reads.items({ cut: 0 })
      const waiting = yield* reads.waiting()
      const live = c.json ? 0 : (yield* reads.workers()).length
      // Items waiting for others are listed after the queue, in a table of their own (and with status "waiting").
      const waitingTable =
        waiting.length === 0
          ? ""
          : "\n\nwaiting for other items:\n" +
            table(
              ["id", "task_type", "after", "waiting_on", "created_at"],
              waiting.map((w) => [w.id, w.taskType, w.after.join(","), w.waitingOn, w.createdAt])
            )
      yield* output(
        c,
        table(
          [
            "id",
            "task_type",
            "status",
            "priority",
            "runs_left",
            "thread",
            "created_at",
            "run_after",
            "unique_key",
            "failures",
            "handled"
          ],
          items.map((item) => [
            item.id,
            item.taskType,
            item.status,
            item.priority,
            item.runsLeft === -1 ? "forever" : item.runsLeft,
            item.thread,
            item.createdAt,
            item.runAfter ?? "-",
            item.uniqueKey ?? "-",
            // Of how many attempts, when the item has its own policy (else its task type's, known to the worker).
            item.retryAttempts === null ? item.failures : `${item.failures} of ${item.retryAttempts}`,
            handledCell(item.handled, live > 0)
          ])
        ) + waitingTable,
        [
          ...items.map(({ payload: _, runsDone: __, ...item }) => snakeKeys(item)),
          ...waiting.map((w) => ({ ...snakeKeys(w), status: "waiting" }))
        ]
      )
    })
  )
).pipe(
  Command.withDescription(
    "pending and processing queue items, in the order they are claimed, then the items waiting for others"
  )
)

export const processedCommand = Command.make("processed", { ...common, n: count("executions") }, (c) =>
  withReads(c, (reads) =>
    Effect.gen(function* () {
      // The newest by id, as retention counts them, whole (the JSON carries payloads and errors in full).
      const { rows: executions } = yield* reads.executions({ order: "id", limit: c.n })
      yield* output(
        c,
        table(
          ["id", "item", "task_type", "status", "duration_ms", "started_at", "error", "output"],
          executions.map((p) => [
            p.id,
            p.queueItemId,
            p.taskType,
            p.status,
            p.durationMs,
            p.startedAt,
            p.errorMsg,
            outputCell(p.output)
          ])
        ),
        executions.map(snakeKeys)
      )
    })
  )
).pipe(Command.withDescription("the last N executions of queue items, newest first"))

/** An output as the table shows it: its JSON, cut to a line; empty when the handler returned nothing. */
const outputCell = (output: unknown): string => {
  if (output === null || output === undefined) return ""
  const json = JSON.stringify(output)
  return json.length > 60 ? `${json.slice(0, 59)}…` : json
}

/** A numeric id argument: anything else is one clear error, before the database sees it. */
const idArgument = (name: string, description: string) =>
  Args.text({ name }).pipe(
    Args.withDescription(description),
    Args.mapEffect((text) =>
      isId(text)
        ? Effect.succeed(text)
        : Effect.fail(HelpDoc.p(`<${name}> must be a number (an id), not ${JSON.stringify(escapeControls(text))}`))
    )
  )

export const cancelCommand = Command.make(
  "cancel",
  { ...common, item: idArgument("item", "the queue item's id (as `kairos queue` lists it)") },
  (c) =>
    withAdmin(c, (admin) =>
      Effect.gen(function* () {
        const status = yield* admin.cancel(c.item)
        yield* output(
          c,
          status === "processing"
            ? `cancelled item ${c.item}: it was running; that execution finishes but its result is not recorded`
            : `cancelled item ${c.item} (it was pending)`,
          { item: c.item, cancelled: true, was: status }
        )
      })
    )
).pipe(
  Command.withDescription("cancel a queue item, pending or processing (a running execution's result is then refused)")
)

export const retryCommand = Command.make(
  "retry",
  { ...common, execution: idArgument("execution", "the execution's id (the id column of `kairos processed`)") },
  (c) =>
    withAdmin(c, (admin) =>
      Effect.gen(function* () {
        const item = yield* admin.retry(c.execution)
        yield* output(
          c,
          `enqueued ${item.id} (${escapeControls(item.taskType)}, the payload of execution ${c.execution})`,
          snakeKeys({ ...item })
        )
      })
    )
).pipe(
  Command.withDescription(
    "enqueue again the item an execution ran: a new item with its task type and payload (priority 0, one run)"
  )
)

const retentionOption = (name: string, pseudo: string, description: string) =>
  Options.text(name).pipe(Options.withPseudoName(pseudo), Options.withDescription(description), Options.optional)

export const pruneCommand = Command.make(
  "prune",
  {
    ...common,
    logAge: retentionOption("log-age", "DURATION", "delete executions (processed_items) older than this, e.g. 30d"),
    logKeep: retentionOption("log-keep", "N", "keep at least the newest N executions, whatever their age"),
    runsAge: retentionOption("runs-age", "DURATION", "delete finished job runs older than this, e.g. 7d"),
    runsKeep: retentionOption("runs-keep", "N", "keep at least the newest N finished job runs")
  },
  (c) =>
    Effect.gen(function* () {
      const policy = (prefix: string, age: Option.Option<string>, keep: Option.Option<string>) =>
        Option.isSome(keep) && !/^\d+$/.test(keep.value)
          ? Either.left(
              new CliError({
                message: `--${prefix}-keep: ${JSON.stringify(escapeControls(keep.value))} is not a count (a whole number, 0 or more)`
              })
            )
          : Either.mapLeft(
              Retention.decode(
                prefix,
                {
                  // Checked by decode, like every duration: a string that is none fails there with a clear message.
                  maxAge: Option.getOrUndefined(age) as DurationInput.Input | undefined,
                  keepLast: Option.getOrUndefined(Option.map(keep, Number))
                },
                { maxAge: `--${prefix}-age`, keepLast: `--${prefix}-keep` }
              ),
              (message) => new CliError({ message })
            )
      const log = yield* policy("log", c.logAge, c.logKeep)
      const runs = yield* policy("runs", c.runsAge, c.runsKeep)
      if (!Retention.isActive(log) && !Retention.isActive(runs))
        return yield* Effect.fail(
          new CliError({ message: "nothing to prune: give --log-age, --log-keep, --runs-age or --runs-keep" })
        )
      yield* withDb(c, (sql, schema) =>
        Effect.gen(function* () {
          const queue = yield* PgQueueStore.make({ schema })
          const jobs = yield* PgJobStore.make({ schema })
          const now = yield* (yield* PgReadModel.make({ schema })).now()
          const executions = Retention.isActive(log) ? yield* Retention.pruneAll(queue.pruneProcessed, log, now) : 0
          const jobRuns = Retention.isActive(runs) ? yield* Retention.pruneAll(jobs.pruneRuns, runs, now) : 0
          yield* output(c, `pruned ${executions} execution(s) and ${jobRuns} job run(s)`, {
            executions,
            job_runs: jobRuns
          })
        })
      )
    })
).pipe(
  Command.withDescription(
    "delete old executions and finished job runs once, in small batches (nothing else may delete from the execution log)"
  )
)

export const truncateCommand = Command.make(
  "truncate",
  { ...common, yes: Options.boolean("yes").pipe(Options.withDescription("confirm: without it nothing is deleted")) },
  (c) =>
    c.yes
      ? withReads(c, (reads) =>
          Effect.gen(function* () {
            const truncated = yield* reads.truncate()
            yield* output(c, `emptied ${truncated.join(", ")} (jobs, limits and settings stay)`, { truncated })
          })
        )
      : Effect.fail(
          new CliError({ message: "truncate deletes every queue item, execution and run: add --yes to confirm" })
        )
).pipe(
  Command.withDescription(
    "empty queue_items (with their leases), queue_waiting, flow_steps, processed_items and job_runs (jobs, limits and settings stay); results still in flight are refused"
  )
)
