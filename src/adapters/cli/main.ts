/**
 * `kairos`: the command line. Every command takes `--database-url` (default `$DATABASE_URL`, else the embedded
 * development database in the project's `.kairos`), `--schema` and `--json` (snake_case keys, like the tables).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as RetryPolicy from "effect/Schedule"
import path from "node:path"
import { existsSync } from "node:fs"
import * as DurationInput from "../../domain/DurationInput.js"
import * as Retention from "../../domain/Retention.js"
import * as Retry from "../../domain/Retry.js"
import * as Schedule from "../../domain/Schedule.js"
import { migrate } from "../postgres/migrations.js"
import * as PgInspect from "../postgres/PgInspect.js"
import * as PgJobStore from "../postgres/PgJobStore.js"
import * as PgKairos from "../../layers/PgKairos.js"
import * as PgQueueStore from "../postgres/PgQueueStore.js"
import * as PgSemaphore from "../postgres/PgSemaphore.js"
import { schemaName } from "../postgres/PgSchema.js"
import type { Handler, HandlerOptions } from "../../runtime/Handler.js"
import * as Runner from "../../runtime/Runner.js"
import { QueueStore } from "../../ports/QueueStore.js"
import * as DevDatabase from "./DevDatabase.js"
import { importTasks } from "./importTasks.js"
import { checkUrl, CliError, describe, explain } from "./errors.js"
import { escapeControls, snakeKeys, table, terminalSafeJson } from "./format.js"
import { withCliConsole } from "./help.js"

export { CliError } from "./errors.js"

/** Set from `--verbose` (read anywhere on the command line, before parsing): full causes on errors and in logs. */
let verbose = false

const common = {
  databaseUrl: Options.text("database-url").pipe(
    Options.withPseudoName("URL"),
    Options.withDescription(
      "the database, postgres://user:password@host:port/db (default: $DATABASE_URL, else the development database in the project's .kairos folder, started on first use)"
    ),
    Options.optional
  ),
  schema: Options.text("schema").pipe(
    Options.withPseudoName("NAME"),
    Options.withDescription("the schema of kairos's tables (default: public)"),
    Options.withDefault("public")
  ),
  json: Options.boolean("json").pipe(Options.withDescription("print JSON with snake_case keys instead of text")),
  // Read from the raw arguments by `main` (it also applies to usage errors); declared here to be listed in --help.
  verbose: Options.boolean("verbose").pipe(Options.withDescription("on an error, also print its full cause"))
}

interface Common {
  readonly databaseUrl: Option.Option<string>
  readonly schema: string
  readonly json: boolean
}

/** Prints the JSON document with --json, the human text otherwise (its values escaped by whoever built it). */
const output = (c: { readonly json: boolean }, human: string, json: unknown) =>
  Effect.sync(() => process.stdout.write((c.json ? terminalSafeJson(JSON.stringify(json)) : human) + "\n"))

const resolveUrl = (c: Common): Effect.Effect<string, CliError> =>
  Effect.gen(function* () {
    if (Option.isSome(c.databaseUrl)) {
      const bad = checkUrl(c.databaseUrl.value, "--database-url")
      return bad === undefined ? c.databaseUrl.value : yield* Effect.fail(bad)
    }
    const env = process.env["DATABASE_URL"]
    if (env !== undefined && env.length > 0) {
      const bad = checkUrl(env, "DATABASE_URL")
      return bad === undefined ? env : yield* Effect.fail(bad)
    }
    const dev = yield* ensureDev
    return dev.url
  })

/** The development database, started if needed (saying so on stderr). */
const ensureDev = Effect.gen(function* () {
  const dev = yield* Effect.tryPromise({
    try: () => DevDatabase.ensure(process.cwd()),
    catch: (e) => new CliError({ message: `could not start the development database: ${describe(e)}` })
  })
  if (dev.started) {
    process.stderr.write(`kairos: started the development database (${dev.dataDir}); \`kairos db stop\` stops it\n`)
    if (dev.note !== undefined) process.stderr.write(`kairos: ${dev.note}\n`)
  }
  return dev
})

const targetOf = (c: Common) => ({ schema: c.schema, flagUrl: Option.getOrUndefined(c.databaseUrl) })

/** Runs `f` with a client on the resolved database. */
const withDb = <A, E>(
  c: Common,
  f: (sql: SqlClient.SqlClient, schema: string) => Effect.Effect<A, E, SqlClient.SqlClient | PgClient.PgClient>
): Effect.Effect<A, CliError> =>
  Effect.gen(function* () {
    const schema = yield* Effect.try({
      try: () => schemaName({ schema: c.schema }),
      catch: (e) => new CliError({ message: describe(e) })
    })
    const url = yield* resolveUrl(c)
    // kairos's own client: its first connection fails within 5 s, and a failed login does not hold the process open
    // (see EndingClient). No statement timeout: a command may run as long as it needs (a truncate of a large log).
    const client = PgKairos.clientLayer({
      url: Redacted.make(url),
      maxConnections: 3,
      applicationName: "kairos-cli",
      statementTimeout: 0
    })
    return yield* Effect.flatMap(SqlClient.SqlClient, (sql) => f(sql.withoutTransforms(), schema)).pipe(
      Effect.provide(client),
      Effect.scoped,
      Effect.mapError(explain(targetOf(c), url))
    )
  })

const migrateCommand = Command.make("migrate", common, (c) =>
  withDb(c, (_sql, schema) =>
    Effect.gen(function* () {
      const applied = yield* migrate({ schema })
      const names = applied.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`)
      yield* output(c, names.length === 0 ? `schema "${schema}" is up to date` : `applied ${names.join(", ")}`, {
        schema,
        applied: names
      })
    })
  )
).pipe(Command.withDescription("create or upgrade kairos's tables in the schema"))

const enqueueCommand = Command.make(
  "enqueue",
  {
    ...common,
    taskType: Args.text({ name: "taskType" }).pipe(Args.withDescription("the task type: which handler runs the item")),
    payload: Args.text({ name: "payload" }).pipe(
      Args.withDescription("the text the handler gets as job.payload, usually JSON (default: empty)"),
      Args.optional
    ),
    priority: Options.integer("priority").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("higher runs first (default 0)"),
      Options.withDefault(0)
    ),
    maxRuns: Options.integer("max-runs").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("how many times the item runs: N times, -1 forever (default 1; 0 means 1)"),
      Options.withDefault(1)
    ),
    thread: Options.choice("thread", ["0", "1"]).pipe(
      Options.withDescription(
        "0: items of this task type run one at a time, in order, across all workers; 1: side by side (default 0)"
      ),
      Options.withDefault("0" as const)
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
      return yield* withDb(c, (_sql, schema) =>
        Effect.gen(function* () {
          const queue = yield* PgQueueStore.make({ schema })
          const item = yield* queue.enqueue(
            {
              taskType: c.taskType,
              payload: Option.getOrElse(c.payload, () => ""),
              priority: c.priority,
              maxRuns: c.maxRuns,
              thread: Number(c.thread),
              runAfter,
              uniqueKey: Option.getOrUndefined(c.uniqueKey),
              retry
            },
            now
          )
          // A new row is stamped with this command's time; the item already queued under the key was not.
          const existing = item.createdAt.getTime() !== now.getTime()
          const details =
            `${escapeControls(item.taskType)}, priority ${item.priority}, max runs ${item.maxRuns}, thread ${item.thread}` +
            (item.runAfter === null ? "" : `, run after ${item.runAfter.toISOString()}`) +
            (item.uniqueKey === null ? "" : `, unique key ${escapeControls(item.uniqueKey)}`) +
            (retry === undefined || existing ? "" : `, retry ${Retry.describe(Retry.policy(retry))}`)
          yield* output(c, `${existing ? "already queued" : "enqueued"} ${item.id} (${details})`, {
            ...snakeKeys(item),
            existing
          })
        })
      )
    })
).pipe(Command.withDescription("add a queue item"))

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

/** Matches an ISO 8601 date or date-time, e.g. `2026-12-01`, `2026-12-01T09:00`, `2026-12-01T09:00:00.5+01:00`. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i

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

/**
 * "yes", or why nobody will run it: no live worker at all, or live workers none of which lists its task type.
 */
const handledCell = (handled: boolean, anyLiveWorker: boolean) =>
  handled ? "yes" : anyLiveWorker ? "no (no live worker handles it)" : "no (no live worker)"

/** Runs `f` with the inspection reads of the schema. */
const withInspect = <A, E>(c: Common, f: (inspect: PgInspect.PgInspect) => Effect.Effect<A, E>) =>
  withDb(c, (_sql, schema) => Effect.flatMap(PgInspect.make({ schema }), f))

const queueCommand = Command.make("queue", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const items = yield* inspect.queue()
      const live = c.json ? 0 : (yield* inspect.workers()).length
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
        ),
        items.map(snakeKeys)
      )
    })
  )
).pipe(Command.withDescription("pending and processing queue items, in the order they are claimed"))

const count = (what: string) =>
  Args.integer({ name: "N" }).pipe(Args.withDescription(`how many ${what} (default 20)`), Args.withDefault(20))

const processedCommand = Command.make("processed", { ...common, n: count("executions") }, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const executions = yield* inspect.processed(c.n)
      yield* output(
        c,
        table(
          ["id", "item", "task_type", "status", "duration_ms", "started_at", "error"],
          executions.map((p) => [p.id, p.queueItemId, p.taskType, p.status, p.durationMs, p.startedAt, p.errorMsg])
        ),
        executions.map(snakeKeys)
      )
    })
  )
).pipe(Command.withDescription("the last N executions of queue items, newest first"))

/** A job's schedule as people read it; a stored value that does not decode is shown as it is. */
const scheduleCell = (schedule: PgInspect.StoredSchedule) =>
  schedule._tag === "Valid" ? Schedule.format(schedule.schedule) : `invalid: ${JSON.stringify(schedule.stored)}`

/** A numeric id argument: anything else is one clear error, before the database sees it. */
const idArgument = (name: string, description: string) =>
  Args.text({ name }).pipe(
    Args.withDescription(description),
    Args.mapEffect((text) =>
      /^[1-9][0-9]{0,18}$/.test(text)
        ? Effect.succeed(text)
        : Effect.fail(HelpDoc.p(`<${name}> must be a number (an id), not ${JSON.stringify(escapeControls(text))}`))
    )
  )

const cancelCommand = Command.make(
  "cancel",
  { ...common, item: idArgument("item", "the queue item's id (as `kairos queue` lists it)") },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        const queue = yield* PgQueueStore.make({ schema })
        const status = yield* queue.cancel(c.item)
        if (Option.isNone(status))
          return yield* Effect.fail(
            new CliError({ message: `no queue item ${c.item}: \`kairos queue\` lists the pending and processing ones` })
          )
        yield* output(
          c,
          status.value === "processing"
            ? `cancelled item ${c.item}: it was running; that execution finishes but its result is not recorded`
            : `cancelled item ${c.item} (it was pending)`,
          { item: c.item, cancelled: true, was: status.value }
        )
      })
    )
).pipe(
  Command.withDescription("cancel a queue item, pending or processing (a running execution's result is then refused)")
)

const retryCommand = Command.make(
  "retry",
  { ...common, execution: idArgument("execution", "the execution's id (the id column of `kairos processed`)") },
  (c) =>
    withDb(c, (sql, schema) =>
      Effect.gen(function* () {
        const queue = yield* PgQueueStore.make({ schema })
        const item = yield* queue.retryExecution(c.execution, yield* databaseNow(sql))
        if (Option.isNone(item))
          return yield* Effect.fail(
            new CliError({ message: `no execution ${c.execution}: \`kairos processed\` lists them` })
          )
        yield* output(
          c,
          `enqueued ${item.value.id} (${escapeControls(item.value.taskType)}, the payload of execution ${c.execution})`,
          snakeKeys({ ...item.value })
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

const pruneCommand = Command.make(
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
          const now = yield* databaseNow(sql)
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

const statsCommand = Command.make("stats", common, (c) =>
  withDb(c, (sql, schema) =>
    Effect.gen(function* () {
      const s = sql(schema)
      // Read from the tables, so every worker on the database counts, not only this process.
      const depth = yield* sql<{ task_type: string; pending: number; processing: number }>`
        SELECT task_type, count(*) FILTER (WHERE status = 'pending')::int AS pending,
               count(*) FILTER (WHERE status = 'processing')::int AS processing
        FROM ${s}.queue_items GROUP BY task_type ORDER BY task_type`
      const hour = yield* sql<{
        task_type: string
        ok: number
        error: number
        p50_ms: number | null
        max_ms: number | null
      }>`
        SELECT task_type, count(*) FILTER (WHERE status = 'ok')::int AS ok, count(*) FILTER (WHERE status = 'error')::int AS error,
               (percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::int AS p50_ms, max(duration_ms)::int AS max_ms
        FROM ${s}.processed_items WHERE created_at > clock_timestamp() - interval '1 hour'
        GROUP BY task_type ORDER BY task_type`
      const runs = yield* sql<{ status: string; n: number }>`
        SELECT status, count(*)::int AS n FROM ${s}.job_runs
        WHERE status IN ('pending', 'running') OR finished_at > clock_timestamp() - interval '1 hour'
        GROUP BY status ORDER BY status`
      const [workers] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ${s}.scheduler_workers WHERE live_until > clock_timestamp()`
      const queueTable = table(
        ["task_type", "pending", "processing"],
        depth.map((d) => [d.task_type, d.pending, d.processing])
      )
      const hourTable = table(
        ["task_type", "ok", "error", "p50_ms", "max_ms"],
        hour.map((h) => [h.task_type, h.ok, h.error, h.p50_ms ?? "", h.max_ms ?? ""])
      )
      yield* output(
        c,
        [
          `live workers: ${workers?.n ?? 0}`,
          "",
          "queue:",
          depth.length === 0 ? "  (empty)" : queueTable,
          "",
          "executions in the last hour:",
          hour.length === 0 ? "  (none)" : hourTable,
          "",
          `job runs (pending, running, and finished in the last hour): ${
            runs.length === 0 ? "none" : runs.map((r) => `${r.status} ${r.n}`).join(", ")
          }`
        ].join("\n"),
        {
          live_workers: workers?.n ?? 0,
          queue: depth,
          last_hour: hour,
          job_runs: Object.fromEntries(runs.map((r) => [r.status, r.n]))
        }
      )
    })
  )
).pipe(
  Command.withDescription(
    "live figures from the tables: queue depth by task type, executions of the last hour by outcome, job runs, live workers"
  )
)

/** The database's time: an operator's change is stamped by the clock every runner judges time by. */
const databaseNow = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ now: Date }>`SELECT clock_timestamp() AS now`, (rows) => new Date(rows[0]!.now))

const jobName = Args.text({ name: "name" }).pipe(Args.withDescription("the job's name (as `kairos jobs` lists it)"))
const noSuchJob = (name: string) =>
  new CliError({ message: `no job named ${JSON.stringify(escapeControls(name))}: \`kairos jobs\` lists them` })

/** `kairos jobs pause|resume <name>`. */
const setEnabledCommand = (verb: "pause" | "resume") =>
  Command.make(verb, { ...common, name: jobName }, (c) =>
    withDb(c, (sql, schema) =>
      Effect.gen(function* () {
        const store = yield* PgJobStore.make({ schema })
        const job = yield* store.setJobEnabled(c.name, verb === "resume", yield* databaseNow(sql))
        if (Option.isNone(job)) return yield* Effect.fail(noSuchJob(c.name))
        const name = escapeControls(job.value.name)
        yield* output(
          c,
          verb === "pause"
            ? `paused ${name}: no slot of it starts until \`kairos jobs resume ${name}\` (a re-definition in code keeps it paused)`
            : `resumed ${name}: next slot ${job.value.nextRunAt?.toISOString() ?? "computed by the next runner"}`,
          { name: job.value.name, enabled: job.value.enabled, next_run_at: job.value.nextRunAt }
        )
      })
    )
  ).pipe(
    Command.withDescription(
      verb === "pause"
        ? "pause a job: its slots stop starting (running ones finish); code that defines it again keeps it paused"
        : "resume a paused job; slots missed meanwhile follow its missedSlots policy"
    )
  )

const jobsRunCommand = Command.make("run", { ...common, name: jobName }, (c) =>
  withDb(c, (sql, schema) =>
    Effect.gen(function* () {
      const store = yield* PgJobStore.make({ schema })
      const run = yield* store.runJobNow(c.name, yield* databaseNow(sql))
      if (Option.isNone(run)) return yield* Effect.fail(noSuchJob(c.name))
      yield* output(
        c,
        `fired ${escapeControls(c.name)}: run ${run.value.id} for ${run.value.scheduledFor.toISOString()}, due now (\`kairos runs\` shows it)`,
        { run_id: run.value.id, job: c.name, scheduled_for: run.value.scheduledFor, status: run.value.status }
      )
    })
  )
).pipe(
  Command.withDescription(
    "fire a job now, as an extra slot beside its schedule (it waits while the job is paused, or while another run of an overlap-skip job goes)"
  )
)

const jobsCommand = Command.make("jobs", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const jobs = yield* inspect.jobs()
      const live = c.json ? 0 : (yield* inspect.workers()).length
      yield* output(
        c,
        table(
          ["id", "name", "task_type", "schedule", "enabled", "next_run_at", "handled"],
          jobs.map((job) => [
            job.id,
            job.name,
            job.taskType,
            scheduleCell(job.schedule),
            job.enabled ? "yes" : "no",
            job.nextRunAt,
            handledCell(job.handled, live > 0)
          ])
        ),
        jobs.map((job) => snakeKeys({ ...job, schedule: job.schedule.stored }))
      )
    })
  )
).pipe(
  Command.withDescription("scheduled jobs, their next slot and whether a live worker runs them"),
  Command.withSubcommands([jobsRunCommand, setEnabledCommand("pause"), setEnabledCommand("resume")])
)

const runsCommand = Command.make("runs", { ...common, n: count("runs") }, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const runs = yield* inspect.runs(c.n)
      yield* output(
        c,
        table(
          ["id", "job", "scheduled_for", "attempt", "status", "started_at", "finished_at", "error"],
          runs.map((run) => [
            run.id,
            run.job,
            run.scheduledFor,
            run.attempt,
            run.status,
            run.startedAt,
            run.finishedAt,
            run.error
          ])
        ),
        runs.map(snakeKeys)
      )
    })
  )
).pipe(Command.withDescription("the last N runs of scheduled jobs, newest first"))

const semaphoreCommand = Command.make(
  "semaphore",
  {
    ...common,
    value: Args.choice(
      [
        ["green", "green"],
        ["red", "red"]
      ] as const,
      { name: "green|red" }
    ).pipe(Args.withDescription("green: work runs; red: nothing new starts (without it: show)"), Args.optional)
  },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        const semaphore = yield* PgSemaphore.make({ schema })
        if (Option.isSome(c.value)) yield* c.value.value === "green" ? semaphore.setGreen : semaphore.setRed
        const green = yield* semaphore.isGreen
        yield* output(c, green ? "green (work runs)" : "red (nothing new starts)", {
          semaphore: green ? "green" : "red"
        })
      })
    )
).pipe(Command.withDescription("show or set the kill switch (every worker obeys it on its next tick)"))

const truncateCommand = Command.make(
  "truncate",
  { ...common, yes: Options.boolean("yes").pipe(Options.withDescription("confirm: without it nothing is deleted")) },
  (c) =>
    c.yes
      ? withInspect(c, (inspect) =>
          Effect.gen(function* () {
            yield* inspect.truncate()
            yield* output(c, "emptied queue_items, processed_items and job_runs (jobs and settings stay)", {
              truncated: ["queue_items", "processed_items", "job_runs"]
            })
          })
        )
      : Effect.fail(
          new CliError({ message: "truncate deletes every queue item, execution and run: add --yes to confirm" })
        )
).pipe(
  Command.withDescription(
    "empty queue_items, processed_items and job_runs (jobs and settings stay); results still in flight are refused"
  )
)

const workersCommand = Command.make("workers", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const workers = yield* inspect.workers()
      yield* output(
        c,
        table(
          ["id", "task_types", "started_at", "heartbeat_at"],
          workers.map((worker) => [worker.id, worker.taskTypes, worker.startedAt, worker.heartbeatAt])
        ),
        workers.map(({ liveUntil: _, ...worker }) => snakeKeys(worker))
      )
    })
  )
).pipe(Command.withDescription("live workers, their task types and last heartbeat"))

const dbOptions = { json: common.json, verbose: common.verbose }

const dbStatus = Command.make("status", dbOptions, (c) =>
  Effect.gen(function* () {
    const s = yield* Effect.promise(() => DevDatabase.status(process.cwd()))
    yield* output(
      c,
      s.running ? `running: ${s.url} (data in ${s.dataDir})` : `not running (data in ${s.dataDir})`,
      snakeKeys(s)
    )
  })
).pipe(Command.withDescription("whether the development database runs, its URL and data folder"))

const dbStart = Command.make("start", dbOptions, (c) =>
  Effect.gen(function* () {
    const dev = yield* ensureDev
    yield* output(c, `running: ${dev.url} (data in ${dev.dataDir})`, {
      running: true,
      started: dev.started,
      url: dev.url,
      data_dir: dev.dataDir
    })
  })
).pipe(Command.withDescription("start the development database (if it is not running) and print its URL"))

const dbStop = Command.make("stop", dbOptions, (c) =>
  Effect.gen(function* () {
    const stopped = yield* Effect.promise(() => DevDatabase.stop(process.cwd()))
    yield* output(c, stopped ? "stopped the development database" : "the development database was not running", {
      stopped
    })
  })
).pipe(Command.withDescription("stop the development database (its data stays)"))

const dbCommand = Command.make("db").pipe(
  Command.withSubcommands([dbStatus, dbStart, dbStop]),
  Command.withDescription(
    "the development database: an embedded Postgres in the project's .kairos folder, used when no URL is given"
  )
)

/** A duration flag: absent, or a positive duration read like `--interval` (`500ms`, `30s`, `5m`, `"5 minutes"`). */
const durationFlag = (flag: string, value: Option.Option<string>) =>
  Option.match(value, {
    onNone: () => Either.right(undefined),
    onSome: (text) => Either.mapLeft(DurationInput.decodeField(flag, text), (e) => new CliError({ message: e.message }))
  })

/** A log message as text: Effect passes the arguments of `Effect.log(a, b)` as an array. */
const logText = (message: unknown): string =>
  (Array.isArray(message) ? message : [message])
    .map((part) => {
      if (typeof part === "string") return part
      try {
        return JSON.stringify(part) ?? String(part)
      } catch {
        return String(part)
      }
    })
    .join(" ")

/** A long error message shortened for a one-line report (the full text is in processed_items / job_runs). */
const shortError = (message: string): string => (message.length > 300 ? `${message.slice(0, 297)}...` : message)

/**
 * The worker's logger: handler logs (`Effect.log` inside a handler) and the runner's own, one line each. With
 * --json, an event on stdout like every other; otherwise info and below on stdout, warnings and errors on stderr,
 * prefixed with the task type and id of the execution that logged it.
 */
const workerLogger = (json: boolean, write: (line: string, stream: NodeJS.WriteStream) => void) =>
  Logger.make(({ annotations, cause, date, logLevel, message }) => {
    const fields = Object.fromEntries(HashMap.toEntries(annotations))
    const text = logText(message)
    const detail = Cause.isEmpty(cause) ? undefined : verbose ? Cause.pretty(cause) : undefined
    if (json) {
      write(
        terminalSafeJson(
          JSON.stringify({
            event: "log",
            level: logLevel.label.toLowerCase(),
            message: text,
            ...snakeKeys(fields),
            ...(detail === undefined ? {} : { cause: detail }),
            at: date.toISOString()
          })
        ),
        process.stdout
      )
      return
    }
    const taskType = fields["taskType"]
    const jobId = fields["jobId"]
    const prefix = typeof taskType === "string" ? `[${taskType}${jobId === undefined ? "" : ` ${String(jobId)}`}] ` : ""
    const line = `${logLevel.label.toLowerCase()}: ${prefix}${text}`
    write(
      escapeControls(line) + (detail === undefined ? "" : `\n${detail}`),
      LogLevel.greaterThanEqual(logLevel, LogLevel.Warning) ? process.stderr : process.stdout
    )
  })

/** One execution as a line ("Completed send_email item 12 (attempt 1) in 3ms") or a JSON event. */
const executionLine = (r: Runner.ExecutionReport): { readonly human: string; readonly event: object } => {
  const job = r.job
  const what = `${job.taskType} ${job.kind === "queue" ? `item ${job.id}` : `job ${job.name}`} (attempt ${job.attempt})`
  const human =
    r.outcome === "ok"
      ? `Completed ${what} in ${r.durationMs}ms`
      : r.outcome === "failed"
        ? `Failed ${what} after ${r.durationMs}ms: ${shortError(r.error ?? "")}`
        : r.outcome === "lost"
          ? `Lost ${what}: its lease was lost, the result is discarded (it runs again)`
          : `Interrupted ${what}: handed back for another worker`
  return {
    human,
    event: {
      event: "execution",
      kind: job.kind,
      task_type: job.taskType,
      id: job.id,
      name: job.name,
      attempt: job.attempt,
      outcome: r.outcome,
      duration_ms: r.durationMs ?? null,
      error: r.error === undefined ? null : shortError(r.error)
    }
  }
}

const duration = (flag: string, description: string) =>
  Options.text(flag).pipe(Options.withPseudoName("DURATION"), Options.withDescription(description), Options.optional)

const workerCommand = Command.make(
  "worker",
  {
    ...common,
    tasks: Options.text("tasks").pipe(
      Options.withPseudoName("MODULE"),
      Options.withDescription(
        "the tasks module (.js or .ts): its default export is { taskType: handler, ... }; it may export schedules, upserted by name at start"
      )
    ),
    concurrency: Options.integer("concurrency").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("executions run at once by this worker (default 4)"),
      Options.withDefault(4)
    ),
    interval: Options.text("interval").pipe(
      Options.withPseudoName("DURATION"),
      Options.withDescription(
        "the poll interval, e.g. 500ms, 5s, 1m (default 5s); new items wake the worker at once, and a scheduler.interval_seconds setting overrides it"
      ),
      Options.withDefault("5s")
    ),
    batch: Options.integer("batch").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("most items claimed in one statement (default 20)"),
      Options.withDefault(20)
    ),
    rateLimit: Options.integer("rate-limit").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("most queue items started per poll interval; 0: no limit (default 0)"),
      Options.withDefault(0)
    ),
    timeout: duration("timeout", "how long one execution may run before it is interrupted and fails (default 15m)"),
    lease: duration(
      "lease",
      "how long a claim holds without renewal; renewed every third of it, and another worker takes the work over once it expires (default 30s)"
    ),
    grace: duration(
      "grace",
      "how long a stop waits for running handlers before it interrupts them and hands their work back (default 30s)"
    ),
    quiet: Options.boolean("quiet").pipe(
      Options.withDescription("no line per execution and no info logs: status lines, warnings and errors only")
    )
  },
  (c) =>
    Effect.gen(function* () {
      const interval = yield* Either.mapLeft(
        DurationInput.decodeField("--interval", c.interval),
        (e) => new CliError({ message: e.message })
      )
      const timeout = yield* durationFlag("--timeout", c.timeout)
      const leaseDuration = yield* durationFlag("--lease", c.lease)
      const gracePeriod = yield* durationFlag("--grace", c.grace)
      const mod = yield* loadTasks(c.tasks)
      const url = yield* resolveUrl(c)
      const tty = process.stdout.isTTY === true && !c.json
      // On a terminal a status line is redrawn in place: clear it before printing a line of its own.
      const write = (line: string, stream: NodeJS.WriteStream = process.stdout) =>
        void stream.write((tty ? "\r\u001b[2K" : "") + line + "\n")
      /** An event: with --json a JSON line on stdout, otherwise the human text (escaped here). */
      const emit = (event: Record<string, unknown>, human: string, stream: NodeJS.WriteStream = process.stdout) =>
        c.json
          ? write(terminalSafeJson(JSON.stringify({ ...event, at: new Date().toISOString() })))
          : write(escapeControls(human), stream)
      const Live = PgKairos.layer({
        url,
        schema: c.schema,
        workers: c.concurrency,
        interval,
        batchSize: c.batch,
        rateLimit: c.rateLimit,
        timeout,
        leaseDuration,
        gracePeriod,
        // Without a listener the runner builds nothing per execution (--quiet at thousands a second).
        onExecution: c.quiet
          ? undefined
          : (report) => {
              const line = executionLine(report)
              emit(line.event as Record<string, unknown>, line.human)
            }
      })
      yield* Effect.gen(function* () {
        const runner = yield* Runner.Runner
        for (const [taskType, task] of Object.entries(mod.handlers))
          yield* runner.register(taskType, task.handler, task.options)
        if (mod.schedules.length > 0) yield* runner.defineJobs(mod.schedules)
        yield* runner.start
        const types = Object.keys(mod.handlers)
        emit(
          {
            event: "started",
            owner: runner.owner,
            task_types: types,
            concurrency: runner.config.workers,
            timeout_ms: Duration.toMillis(runner.config.timeout),
            lease_ms: Duration.toMillis(runner.config.leaseDuration),
            grace_ms: Duration.toMillis(runner.config.gracePeriod)
          },
          `kairos worker ${runner.owner}: ${types.join(", ")} (Ctrl-C stops, twice forces)`
        )
        // The first signal starts the graceful stop (runMain interrupts this program); say at once what it waits
        // for. A second SIGINT does not wait for the grace period.
        let interrupts = 0
        let announced = false
        const onSignal = (signal: "SIGINT" | "SIGTERM") => () => {
          if (signal === "SIGINT" && ++interrupts >= 2) {
            write("kairos: forced stop", process.stderr)
            process.exit(130)
          }
          if (announced) return
          announced = true
          const running = Effect.runSync(runner.running)
          emit(
            { event: "stopping", signal, running },
            `stopping: waiting for ${running} running${signal === "SIGINT" ? " (Ctrl-C again forces)" : ""}`
          )
        }
        process.on("SIGINT", onSignal("SIGINT"))
        process.on("SIGTERM", onSignal("SIGTERM"))
        const queue = yield* QueueStore
        // A live status line on a terminal; a structured line every few seconds otherwise. The queue depth is
        // unknown ("?", null) while the database cannot be reached.
        yield* Effect.gen(function* () {
          const stats = yield* runner.stats
          const depth = Option.getOrNull(yield* queue.pendingCount().pipe(Effect.option))
          const shown = depth === null ? "?" : String(depth)
          const running = yield* runner.running
          if (tty) {
            process.stdout.write(
              `\r\u001b[2Kclaimed ${stats.started}  ok ${stats.ok}  failed ${stats.failed}  running ${running}  queue ${shown}`
            )
          } else {
            emit(
              { event: "status", claimed: stats.started, ok: stats.ok, failed: stats.failed, running, queue: depth },
              `status claimed=${stats.started} ok=${stats.ok} failed=${stats.failed} running=${running} queue=${shown}`
            )
          }
        }).pipe(Effect.repeat(RetryPolicy.spaced(tty ? "1 second" : "5 seconds")), Effect.forkScoped)
        yield* Effect.addFinalizer(() =>
          Effect.gen(function* () {
            // Stop first (waiting for running handlers), so the counters below are final.
            yield* runner.stop
            const stats = yield* runner.stats
            emit(
              { event: "stopped", claimed: stats.started, ok: stats.ok, failed: stats.failed },
              `stopped: ${stats.started} claimed, ${stats.ok} ok, ${stats.failed} failed`
            )
          })
        )
        yield* Effect.never
      }).pipe(
        Effect.provide(Live),
        Effect.scoped,
        Effect.mapError(explain(targetOf(c), url)),
        // Handler logs are shown (info), unless --quiet; --verbose adds debug.
        Logger.withMinimumLogLevel(c.quiet ? LogLevel.Warning : verbose ? LogLevel.Debug : LogLevel.Info),
        Effect.provide(Logger.replace(Logger.defaultLogger, workerLogger(c.json, write)))
      )
    })
).pipe(
  Command.withDescription(
    "run a worker until SIGINT/SIGTERM: one line per execution, handler logs, a status line; Ctrl-C stops gracefully, twice forces"
  )
)

/** A task type of a tasks module: its handler and, when it has them, its options. */
interface Task {
  readonly handler: Handler<unknown, unknown, never>
  readonly options: HandlerOptions | undefined
}

const loadTasks = (
  file: string
): Effect.Effect<
  {
    handlers: Record<string, Task>
    schedules: ReadonlyArray<Runner.RecurringJob>
  },
  CliError
> =>
  Effect.gen(function* () {
    const full = path.resolve(file)
    if (!existsSync(full)) return yield* Effect.fail(new CliError({ message: `--tasks ${file}: no such file` }))
    const mod = yield* Effect.tryPromise({
      try: () => importTasks(full) as Promise<{ default?: unknown; schedules?: unknown }>,
      // The file exists: what failed is inside it (an import it makes, a syntax error, a throw at load).
      catch: (e) => new CliError({ message: `--tasks ${file}: ${describe(e)}` })
    })
    // Each task is a handler, or { handler, retry?, timeout? } for a task type with options of its own.
    const tasks = mod.default
    const usage = `--tasks ${file}: its default export must be { taskType: handler, ... } (or { taskType: { handler, retry, timeout } }) with at least one handler`
    if (tasks === null || typeof tasks !== "object" || Object.keys(tasks).length === 0)
      return yield* Effect.fail(new CliError({ message: usage }))
    const handlers: Record<string, Task> = {}
    for (const [taskType, task] of Object.entries(tasks as Record<string, unknown>)) {
      if (typeof task === "function") {
        handlers[taskType] = { handler: task as Handler<unknown, unknown, never>, options: undefined }
        continue
      }
      const handler = (task as { handler?: unknown } | null)?.handler
      if (typeof handler !== "function")
        return yield* Effect.fail(new CliError({ message: `${usage}; "${taskType}" is neither` }))
      const { retry, timeout } = task as HandlerOptions
      if (retry !== undefined) {
        const checked = Retry.parse(retry)
        if (Either.isLeft(checked))
          return yield* Effect.fail(
            new CliError({ message: `--tasks ${file}: "${taskType}": ${checked.left.message}` })
          )
      }
      handlers[taskType] = { handler: handler as Handler<unknown, unknown, never>, options: { retry, timeout } }
    }
    const schedules = mod.schedules ?? []
    if (!Array.isArray(schedules))
      return yield* Effect.fail(new CliError({ message: `--tasks ${file}: \`schedules\` must be an array` }))
    for (const s of schedules as Array<Record<string, unknown>>) {
      if (typeof s["name"] !== "string" || typeof s["taskType"] !== "string") {
        return yield* Effect.fail(
          new CliError({ message: `--tasks ${file}: every schedule needs a name and a taskType` })
        )
      }
      const decoded = Schedule.decode(s["schedule"])
      if (decoded._tag === "Left")
        return yield* Effect.fail(
          new CliError({
            message: `--tasks ${file}: schedule "${s["name"]}": ${decoded.left.message.replace(/^invalid stored schedule: /, "")}`
          })
        )
    }
    return { handlers, schedules: schedules as ReadonlyArray<Runner.RecurringJob> }
  })

const dashboardCommand = Command.make(
  "dashboard",
  {
    ...common,
    port: Options.integer("port").pipe(
      Options.withPseudoName("N"),
      Options.withDescription("the TCP port (default 4500; 0 picks a free one)"),
      Options.withDefault(4500)
    ),
    host: Options.text("host").pipe(
      Options.withPseudoName("HOST"),
      Options.withDescription("the address to listen on (default 127.0.0.1); another than loopback needs --token"),
      Options.withDefault("127.0.0.1")
    ),
    token: Options.text("token").pipe(
      Options.withPseudoName("TOKEN"),
      Options.withDescription(
        "the token actions need (pause, run now, cancel, retry) (default: a random one, printed in the URL at start)"
      ),
      Options.optional
    ),
    readOnly: Options.boolean("read-only").pipe(Options.withDescription("no actions: pages only"))
  },
  (c) =>
    Effect.gen(function* () {
      if (c.readOnly && Option.isSome(c.token))
        return yield* Effect.fail(new CliError({ message: "--token and --read-only exclude each other" }))
      if (Option.isSome(c.token) && c.token.value.length < 8)
        return yield* Effect.fail(new CliError({ message: "--token: use at least 8 characters" }))
      // Loaded here, not at the top: every other command starts without the HTTP server's modules.
      const Dashboard = yield* Effect.promise(() => import("../dashboard/Dashboard.js"))
      const generated = !c.readOnly && Option.isNone(c.token)
      const token = c.readOnly ? undefined : Option.getOrElse(c.token, Dashboard.generateToken)
      yield* withDb(c, (_sql, schema) =>
        Effect.gen(function* () {
          const served = yield* Dashboard.serve({ schema, host: c.host, port: c.port, token }).pipe(
            Effect.mapError((e) => new CliError({ message: e.message }))
          )
          // A generated token is shown once, in the URL; the page moves it out of the address bar at once.
          const url = generated && token !== undefined ? `${served.url}?token=${token}` : served.url
          const mode = c.readOnly
            ? "read-only"
            : generated
              ? "the token in this URL unlocks actions"
              : "actions need --token"
          yield* output(c, `kairos dashboard: ${url} (schema ${schema}; ${mode}; Ctrl-C stops)`, {
            url,
            schema,
            read_only: c.readOnly
          })
          return yield* Effect.never
        }).pipe(Effect.scoped)
      )
    })
).pipe(
  Command.withDescription(
    "serve the web dashboard: queue, executions, jobs, workers and the pause switch, live; actions need the token"
  )
)

const root = Command.make("kairos").pipe(
  Command.withDescription(
    "a durable job scheduler on Postgres. Run `kairos <command> --help` for a command's options; durations read like 200ms, 1s, 30s, 5m, 1h"
  ),
  Command.withSubcommands([
    migrateCommand,
    workerCommand,
    enqueueCommand,
    queueCommand,
    processedCommand,
    jobsCommand,
    runsCommand,
    semaphoreCommand,
    truncateCommand,
    workersCommand,
    cancelCommand,
    retryCommand,
    pruneCommand,
    statsCommand,
    dashboardCommand,
    dbCommand
  ])
)

const cli = Command.run(root, { name: "kairos", version: "0.1.0" })

/** Runs the CLI on `argv` (as `process.argv`), exiting with 0, or 1 after one clear line. */
export const main = (argv: ReadonlyArray<string>): void => {
  verbose = argv.includes("--verbose")
  const args = argv.filter((a) => a !== "--verbose")
  const program = cli(args).pipe(
    Effect.catchAllCause((cause) => {
      const failure = Cause.failureOption(cause)
      if (failure._tag === "Some" && ValidationError.isValidationError(failure.value)) {
        // @effect/cli has already printed what was wrong with the arguments.
        return Effect.sync(() => void (process.exitCode = 1))
      }
      if (Cause.isInterruptedOnly(cause)) return Effect.void
      const error = failure._tag === "Some" ? failure.value : Cause.squash(cause)
      return Effect.sync(() => {
        // One line, whatever the database or a tasks module put in the message.
        process.stderr.write(`kairos: ${escapeControls(error instanceof CliError ? error.message : describe(error))}\n`)
        if (verbose) process.stderr.write(`${Cause.pretty(cause)}\n`)
        process.exitCode = 1
      })
    }),
    withCliConsole(args.slice(2)),
    Effect.provide(NodeContext.layer),
    Logger.withMinimumLogLevel(verbose ? LogLevel.Debug : LogLevel.Warning)
  )
  NodeRuntime.runMain(program, { disableErrorReporting: true, disablePrettyLogger: true })
}
