/**
 * `kairos`: the command line. Every command takes `--database-url` (default `$DATABASE_URL`, else the embedded
 * development database in `./.kairos`), `--schema` and `--json`.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as RetryPolicy from "effect/Schedule"
import path from "node:path"
import { existsSync } from "node:fs"
import * as DurationInput from "../../domain/DurationInput.js"
import * as Schedule from "../../domain/Schedule.js"
import { migrate, MigrationError } from "../postgres/migrations.js"
import * as PgInspect from "../postgres/PgInspect.js"
import * as PgKairos from "../../layers/PgKairos.js"
import * as PgQueueStore from "../postgres/PgQueueStore.js"
import { schemaName } from "../postgres/PgSchema.js"
import type { Handler } from "../../runtime/Handler.js"
import * as Runner from "../../runtime/Runner.js"
import { QueueStore } from "../../ports/QueueStore.js"
import * as DevDatabase from "./DevDatabase.js"
import { importTasks } from "./importTasks.js"
import { escapeControls, table, terminalSafeJson } from "./format.js"

/** A user error: printed as one line, exit code 1, no stack trace. */
export class CliError extends Data.TaggedError("CliError")<{ readonly message: string }> {}

const common = {
  databaseUrl: Options.text("database-url").pipe(
    Options.withDescription("Postgres URL (default: $DATABASE_URL, else the embedded development database)"),
    Options.optional
  ),
  schema: Options.text("schema").pipe(
    Options.withDescription("schema of kairos's tables"),
    Options.withDefault("public")
  ),
  json: Options.boolean("json").pipe(Options.withDescription("machine-readable output"))
}

interface Common {
  readonly databaseUrl: Option.Option<string>
  readonly schema: string
  readonly json: boolean
}

/** Prints the JSON document with --json, the human text otherwise (its values escaped by whoever built it). */
const output = (c: Common, human: string, json: unknown) =>
  Effect.sync(() => process.stdout.write((c.json ? terminalSafeJson(JSON.stringify(json)) : human) + "\n"))

const resolveUrl = (c: Common): Effect.Effect<string, CliError> =>
  Effect.gen(function* () {
    if (Option.isSome(c.databaseUrl)) return c.databaseUrl.value
    const env = process.env["DATABASE_URL"]
    if (env !== undefined && env.length > 0) return env
    const dev = yield* Effect.tryPromise({
      try: () => DevDatabase.ensure(process.cwd()),
      catch: (e) => new CliError({ message: `could not start the development database: ${describe(e)}` })
    })
    if (dev.started) {
      process.stderr.write(`kairos: started the development database (${dev.dataDir}); \`kairos db stop\` stops it\n`)
      if (dev.note !== undefined) process.stderr.write(`kairos: ${dev.note}\n`)
    }
    return dev.url
  })

const describe = (e: unknown): string => {
  const cause = (e as { cause?: unknown }).cause
  const inner = cause instanceof Error ? cause.message : undefined
  const message = e instanceof Error ? e.message : String(e)
  return inner !== undefined && inner !== message && !message.includes(inner) ? `${message}: ${inner}` : message
}

/**
 * The database's own error under `e`: the first cause in its chain that carries a `code` (Postgres's SQLSTATE, or
 * Node's `ECONNREFUSED`...), else the innermost cause. Stores' errors wrap an `SqlError`, which wraps the driver's.
 */
const databaseCause = (e: unknown): { readonly code?: unknown; readonly message?: unknown } | undefined => {
  let innermost: object | undefined
  let cause = (e as { cause?: unknown } | null | undefined)?.cause
  for (let depth = 0; depth < 5 && typeof cause === "object" && cause !== null; depth++) {
    if (typeof (cause as { code?: unknown }).code === "string") return cause
    innermost = cause
    cause = (cause as { cause?: unknown }).cause
  }
  return innermost
}

/** Turns database failures into one clear line. */
const explain = (c: Common, url: string) => (e: unknown) => {
  // Its message already names the migration and carries the database's reason (a code below would mislead:
  // 42P01 during `migrate` does not mean "run kairos migrate").
  if (e instanceof MigrationError && e.reason === "Failed") return new CliError({ message: e.message })
  const cause = databaseCause(e)
  const code = cause?.code
  const where = (() => {
    try {
      const u = new URL(url)
      return `${u.hostname}:${u.port || 5432}${u.pathname}`
    } catch {
      return "the database"
    }
  })()
  if (code === "42P01")
    return new CliError({ message: `kairos's tables are missing in schema "${c.schema}": run \`kairos migrate\`` })
  if (code === "42703")
    return new CliError({ message: `kairos's tables in schema "${c.schema}" are out of date: run \`kairos migrate\`` })
  if (code === "28P01" || code === "28000")
    return new CliError({ message: `cannot log in to ${where}: ${String(cause?.message)}` })
  if (code === "ECONNREFUSED" || code === "ENOTFOUND" || /connect|ECONNREFUSED|timeout/i.test(String(cause?.message)))
    return new CliError({
      message: `cannot reach the database at ${where}: ${typeof cause?.message === "string" ? cause.message : describe(e)}`
    })
  if (e instanceof CliError) return e
  // Its message already names what failed and why.
  if (e instanceof PgInspect.InspectError) return new CliError({ message: e.message })
  return new CliError({ message: describe(e) })
}

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
    const client = PgClient.layer({
      url: Redacted.make(url),
      maxConnections: 3,
      connectTimeout: "5 seconds",
      applicationName: "kairos-cli"
    })
    return yield* Effect.flatMap(SqlClient.SqlClient, (sql) => f(sql.withoutTransforms(), schema)).pipe(
      Effect.provide(client),
      Effect.scoped,
      Effect.mapError(explain(c, url))
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
).pipe(Command.withDescription("create or upgrade the tables"))

const enqueueCommand = Command.make(
  "enqueue",
  {
    ...common,
    taskType: Args.text({ name: "taskType" }),
    payload: Args.text({ name: "payload" }).pipe(Args.optional),
    priority: Options.integer("priority").pipe(Options.withDefault(0)),
    maxRuns: Options.integer("max-runs").pipe(Options.withDefault(1)),
    thread: Options.choice("thread", ["0", "1"]).pipe(Options.withDefault("0" as const))
  },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        const queue = yield* PgQueueStore.make({ schema })
        const item = yield* queue.enqueue(
          {
            taskType: c.taskType,
            payload: Option.getOrElse(c.payload, () => ""),
            priority: c.priority,
            maxRuns: c.maxRuns,
            thread: Number(c.thread)
          },
          new Date()
        )
        yield* output(
          c,
          `enqueued ${item.id} (${escapeControls(item.taskType)}, priority ${item.priority}, max runs ${item.maxRuns}, thread ${item.thread})`,
          item
        )
      })
    )
).pipe(Command.withDescription("add a queue item"))

/** "yes", or why nobody will run it: no live worker lists its task type. */
const handledCell = (handled: boolean) => (handled ? "yes" : "no (no live worker)")

/** Runs `f` with the inspection reads of the schema. */
const withInspect = <A, E>(c: Common, f: (inspect: PgInspect.PgInspect) => Effect.Effect<A, E>) =>
  withDb(c, (_sql, schema) => Effect.flatMap(PgInspect.make({ schema }), f))

const queueCommand = Command.make("queue", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const items = yield* inspect.queue()
      yield* output(
        c,
        table(
          ["id", "task_type", "status", "priority", "runs_left", "thread", "created_at", "handled"],
          items.map((item) => [
            item.id,
            item.taskType,
            item.status,
            item.priority,
            item.runsLeft === -1 ? "forever" : item.runsLeft,
            item.thread,
            item.createdAt,
            handledCell(item.handled)
          ])
        ),
        items.map((item) => ({
          id: item.id,
          task_type: item.taskType,
          status: item.status,
          priority: item.priority,
          runs_left: item.runsLeft,
          thread: item.thread,
          created_at: item.createdAt,
          handled: item.handled
        }))
      )
    })
  )
).pipe(Command.withDescription("pending and processing items"))

const processedCommand = Command.make(
  "processed",
  { ...common, n: Args.integer({ name: "N" }).pipe(Args.withDefault(20)) },
  (c) =>
    withInspect(c, (inspect) =>
      Effect.gen(function* () {
        const executions = yield* inspect.processed(c.n)
        yield* output(
          c,
          table(
            ["id", "item", "task_type", "status", "duration_ms", "started_at", "error"],
            executions.map((p) => [p.id, p.queueItemId, p.taskType, p.status, p.durationMs, p.startedAt, p.errorMsg])
          ),
          executions
        )
      })
    )
).pipe(Command.withDescription("the last N executions (default 20)"))

/** A job's schedule as people read it; a stored value that does not decode is shown as it is. */
const scheduleCell = (schedule: PgInspect.StoredSchedule) =>
  schedule._tag === "Valid" ? Schedule.format(schedule.schedule) : `invalid: ${JSON.stringify(schedule.stored)}`

const jobsCommand = Command.make("jobs", common, (c) =>
  withInspect(c, (inspect) =>
    Effect.gen(function* () {
      const jobs = yield* inspect.jobs()
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
            handledCell(job.handled)
          ])
        ),
        jobs.map((job) => ({
          id: job.id,
          name: job.name,
          task_type: job.taskType,
          schedule: job.schedule.stored,
          enabled: job.enabled,
          next_run_at: job.nextRunAt,
          handled: job.handled
        }))
      )
    })
  )
).pipe(Command.withDescription("scheduled jobs"))

const runsCommand = Command.make(
  "runs",
  { ...common, n: Args.integer({ name: "N" }).pipe(Args.withDefault(20)) },
  (c) =>
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
          runs.map((run) => ({
            id: run.id,
            job: run.job,
            scheduled_for: run.scheduledFor,
            attempt: run.attempt,
            status: run.status,
            started_at: run.startedAt,
            finished_at: run.finishedAt,
            error: run.error
          }))
        )
      })
    )
).pipe(Command.withDescription("the last N job runs (default 20)"))

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
    ).pipe(Args.optional)
  },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        const queue = yield* PgQueueStore.make({ schema })
        if (Option.isSome(c.value)) yield* queue.setSemaphore(c.value.value === "green", new Date())
        const green = yield* queue.getSemaphore()
        yield* output(c, green ? "green (work runs)" : "red (nothing new starts)", {
          semaphore: green ? "green" : "red"
        })
      })
    )
).pipe(Command.withDescription("show or set the kill switch (takes effect on the next tick)"))

const truncateCommand = Command.make("truncate", { ...common, yes: Options.boolean("yes") }, (c) =>
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
).pipe(Command.withDescription("empty queue_items, processed_items and job_runs"))

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
        workers.map((worker) => ({
          id: worker.id,
          task_types: worker.taskTypes,
          started_at: worker.startedAt,
          heartbeat_at: worker.heartbeatAt
        }))
      )
    })
  )
).pipe(Command.withDescription("live workers, their task types and last heartbeat"))

const dbStatus = Command.make("status", { json: common.json }, (c) =>
  Effect.gen(function* () {
    const s = yield* Effect.promise(() => DevDatabase.status(process.cwd()))
    yield* output(
      { ...c, databaseUrl: Option.none(), schema: "public" },
      s.running ? `running: ${s.url} (data in ${s.dataDir})` : `not running (data in ${s.dataDir})`,
      s
    )
  })
)
const dbStop = Command.make("stop", { json: common.json }, (c) =>
  Effect.gen(function* () {
    const stopped = yield* Effect.promise(() => DevDatabase.stop(process.cwd()))
    yield* output(
      { ...c, databaseUrl: Option.none(), schema: "public" },
      stopped ? "stopped the development database" : "the development database was not running",
      { stopped }
    )
  })
)
const dbCommand = Command.make("db").pipe(
  Command.withSubcommands([dbStatus, dbStop]),
  Command.withDescription("the embedded development database")
)

const workerCommand = Command.make(
  "worker",
  {
    ...common,
    tasks: Options.text("tasks").pipe(
      Options.withDescription("module exporting { taskType: handler } (and schedules)")
    ),
    concurrency: Options.integer("concurrency").pipe(Options.withDefault(4)),
    interval: Options.text("interval").pipe(Options.withDefault("5s")),
    batch: Options.integer("batch").pipe(Options.withDefault(20)),
    rateLimit: Options.integer("rate-limit").pipe(Options.withDefault(0))
  },
  (c) =>
    Effect.gen(function* () {
      const interval = yield* Either.mapLeft(
        DurationInput.decodeField("--interval", c.interval),
        (e) => new CliError({ message: e.message })
      )
      const mod = yield* loadTasks(c.tasks)
      const url = yield* resolveUrl(c)
      const Live = PgKairos.layer({
        url,
        schema: c.schema,
        workers: c.concurrency,
        interval,
        batchSize: c.batch,
        rateLimit: c.rateLimit
      })
      const log = (event: Record<string, unknown>) =>
        Effect.sync(() =>
          process.stdout.write(
            (c.json
              ? terminalSafeJson(JSON.stringify({ ...event, at: new Date().toISOString() }))
              : escapeControls(`${event["message"] ?? JSON.stringify(event)}`)) + "\n"
          )
        )
      yield* Effect.gen(function* () {
        const runner = yield* Runner.Runner
        for (const [taskType, handler] of Object.entries(mod.handlers)) yield* runner.register(taskType, handler)
        if (mod.schedules.length > 0) yield* runner.defineJobs(mod.schedules)
        yield* runner.start
        yield* log({
          event: "started",
          owner: runner.owner,
          taskTypes: Object.keys(mod.handlers),
          message: `kairos worker ${runner.owner}: ${Object.keys(mod.handlers).join(", ")} (Ctrl-C stops, twice forces)`
        })
        // A second SIGINT does not wait for the grace period.
        let interrupts = 0
        process.on("SIGINT", () => {
          if (++interrupts >= 2) {
            process.stderr.write("\nkairos: forced stop\n")
            process.exit(130)
          }
        })
        const queue = yield* QueueStore
        const tty = process.stdout.isTTY === true && !c.json
        // A live status line on a terminal; a structured line every few seconds otherwise.
        yield* Effect.gen(function* () {
          const stats = yield* runner.stats
          const depth = yield* queue.pendingCount().pipe(Effect.orElseSucceed(() => -1))
          const running = yield* runner.running
          if (tty) {
            process.stdout.write(
              `\r\x1b[2Kclaimed ${stats.started}  ok ${stats.ok}  failed ${stats.failed}  running ${running}  queue ${depth}`
            )
          } else {
            yield* log({
              event: "status",
              claimed: stats.started,
              ok: stats.ok,
              failed: stats.failed,
              running,
              queue: depth,
              message: `status claimed=${stats.started} ok=${stats.ok} failed=${stats.failed} running=${running} queue=${depth}`
            })
          }
        }).pipe(Effect.repeat(RetryPolicy.spaced(tty ? "1 second" : "5 seconds")), Effect.forkScoped)
        yield* Effect.addFinalizer(() =>
          Effect.gen(function* () {
            // Stop first (waiting for running handlers), so the counters below are final.
            yield* runner.stop
            const stats = yield* runner.stats
            if (tty) process.stdout.write("\n")
            yield* log({
              event: "stopped",
              ...stats,
              message: `stopped: ${stats.started} claimed, ${stats.ok} ok, ${stats.failed} failed`
            })
          })
        )
        yield* Effect.never
      }).pipe(Effect.provide(Live), Effect.scoped, Effect.mapError(explain(c, url)))
    })
).pipe(Command.withDescription("run a worker until SIGINT/SIGTERM (graceful stop)"))

const loadTasks = (
  file: string
): Effect.Effect<
  {
    handlers: Record<string, Handler<unknown, unknown, never>>
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
    const handlers = mod.default
    if (
      handlers === null ||
      typeof handlers !== "object" ||
      Object.keys(handlers).length === 0 ||
      !Object.values(handlers).every((h) => typeof h === "function")
    ) {
      return yield* Effect.fail(
        new CliError({
          message: `--tasks ${file}: its default export must be { taskType: handler, ... } with at least one handler`
        })
      )
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
    return {
      handlers: handlers as Record<string, Handler<unknown, unknown, never>>,
      schedules: schedules as ReadonlyArray<Runner.RecurringJob>
    }
  })

const root = Command.make("kairos").pipe(
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
    dbCommand
  ])
)

const cli = Command.run(root, { name: "kairos", version: "0.1.0" })

/** Runs the CLI on `argv` (as `process.argv`), exiting with 0, or 1 after one clear line. */
export const main = (argv: ReadonlyArray<string>): void => {
  const verbose = argv.includes("--verbose")
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
    Effect.provide(NodeContext.layer),
    Logger.withMinimumLogLevel(verbose ? LogLevel.Debug : LogLevel.Warning)
  )
  NodeRuntime.runMain(program, { disableErrorReporting: true, disablePrettyLogger: true })
}
