/**
 * `kairos worker`: runs the handlers of a tasks module until SIGINT/SIGTERM, one line per execution.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as HashMap from "effect/HashMap"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as RetryPolicy from "effect/Schedule"
import path from "node:path"
import { existsSync } from "node:fs"
import * as DurationInput from "../../../domain/DurationInput.js"
import * as Retry from "../../../domain/Retry.js"
import * as Schedule from "../../../domain/Schedule.js"
import * as PgKairos from "../../../layers/PgKairos.js"
import type { Handler, HandlerOptions, TransactionalOptions } from "../../../runtime/Handler.js"
import * as Runner from "../../../runtime/Runner.js"
import { QueueStore } from "../../../ports/QueueStore.js"
import { importTasks } from "../importTasks.js"
import { CliError, describe, explain } from "../errors.js"
import { escapeControls, snakeKeys, terminalSafeJson } from "../format.js"
import { common, countOption, directUrlOption, flags, resolveDirectUrl, resolveUrl, targetOf } from "../common.js"
import * as CliOutput from "../CliOutput.js"

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
const workerLogger = (json: boolean, write: (line: string, toStderr?: boolean) => void) =>
  Logger.make(({ annotations, cause, date, logLevel, message }) => {
    const fields = Object.fromEntries(HashMap.toEntries(annotations))
    const text = logText(message)
    const detail = Cause.isEmpty(cause) ? undefined : flags.verbose ? Cause.pretty(cause) : undefined
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
        )
      )
      return
    }
    const taskType = fields["taskType"]
    const jobId = fields["jobId"]
    const prefix = typeof taskType === "string" ? `[${taskType}${jobId === undefined ? "" : ` ${String(jobId)}`}] ` : ""
    const line = `${logLevel.label.toLowerCase()}: ${prefix}${text}`
    write(
      escapeControls(line) + (detail === undefined ? "" : `\n${detail}`),
      LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)
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

export const workerCommand = Command.make(
  "worker",
  {
    ...common,
    directUrl: directUrlOption,
    tasks: Options.text("tasks").pipe(
      Options.withPseudoName("MODULE"),
      Options.withDescription(
        "the tasks module (.js or .ts): its default export is { taskType: handler, ... }; it may export schedules, upserted by name at start"
      )
    ),
    concurrency: countOption("concurrency", 1).pipe(
      Options.withPseudoName("N"),
      Options.withDescription("executions run at once by this worker (default 4)"),
      Options.withDefault(4)
    ),
    maxConnections: countOption("max-connections", 1).pipe(
      Options.withPseudoName("N"),
      Options.withDescription(
        "the most connections this worker's pool opens (default 10); the listener holds one more, on --direct-url when given"
      ),
      Options.withDefault(10)
    ),
    interval: Options.text("interval").pipe(
      Options.withPseudoName("DURATION"),
      Options.withDescription(
        "the poll interval, e.g. 500ms, 5s, 1m (default 5s); new items wake the worker at once, and a scheduler.interval_seconds setting overrides it"
      ),
      Options.withDefault("5s")
    ),
    batch: countOption("batch", 1).pipe(
      Options.withPseudoName("N"),
      Options.withDescription("most items claimed in one statement (default 20)"),
      Options.withDefault(20)
    ),
    rateLimit: countOption("rate-limit", 0).pipe(
      Options.withPseudoName("N"),
      Options.withDescription("most queue items started per poll interval; 0: no limit (default 0)"),
      Options.withDefault(0)
    ),
    vacuumDeadRows: Options.integer("vacuum-dead-rows").pipe(
      Options.withPseudoName("N"),
      Options.withDescription(
        "vacuum the queue's tables once Postgres counts more dead rows in one than this, one worker at a time and only as their owner; 0: never, leaving them to autovacuum (default 20000)"
      ),
      Options.withDefault(20_000)
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
      const directUrl = yield* resolveDirectUrl(c.directUrl)
      const tty = process.stdout.isTTY === true && !c.json
      // The worker's lines are its output, printed through the Console (its `unsafe` side: they are written from
      // the runner's callback, a signal handler and the logger, outside any fiber). On a terminal a status line is
      // redrawn in place: clear it before printing a line of its own.
      const out = (yield* Effect.console).unsafe
      const write = (line: string, toStderr = false) => {
        const text = (tty ? "\r\u001b[2K" : "") + line
        if (toStderr) out.error(text)
        else out.log(text)
      }
      /** An event: with --json a JSON line on stdout, otherwise the human text (escaped here). */
      const emit = (event: Record<string, unknown>, human: string) =>
        c.json
          ? write(terminalSafeJson(JSON.stringify({ ...event, at: new Date().toISOString() })))
          : write(escapeControls(human))
      const Live = PgKairos.layer({
        url,
        directUrl,
        schema: c.schema,
        workers: c.concurrency,
        maxConnections: c.maxConnections,
        interval,
        batchSize: c.batch,
        rateLimit: c.rateLimit,
        vacuumDeadRows: c.vacuumDeadRows,
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
          yield* runner.register(taskType, task.handler, task.options as HandlerOptions)
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
            write("kairos: forced stop", true)
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
        // unknown ("?", null) while the database cannot be reached, and estimated ("~") past EXACT_DEPTH_UP_TO items.
        yield* Effect.gen(function* () {
          const stats = yield* runner.stats
          const depth = Option.getOrNull(yield* queue.depth().pipe(Effect.option))
          const shown = depth === null ? "?" : `${depth.exact ? "" : "~"}${depth.count}`
          const running = yield* runner.running
          if (tty) {
            CliOutput.redraw(
              `claimed ${stats.started}  ok ${stats.ok}  failed ${stats.failed}  running ${running}  queue ${shown}`
            )
          } else {
            emit(
              {
                event: "status",
                claimed: stats.started,
                ok: stats.ok,
                failed: stats.failed,
                running,
                queue: depth?.count ?? null,
                queue_exact: depth?.exact ?? null
              },
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
        Logger.withMinimumLogLevel(c.quiet ? LogLevel.Warning : flags.verbose ? LogLevel.Debug : LogLevel.Info),
        Effect.provide(Logger.replace(CliOutput.logger, CliOutput.withNotices(workerLogger(c.json, write))))
      )
    })
).pipe(
  Command.withDescription(
    "run a worker until SIGINT/SIGTERM: one line per execution, handler logs, a status line; Ctrl-C stops gracefully, twice forces"
  )
)

/** A task type of a tasks module: its handler and, when it has them, its options. */
interface Task {
  /** Called with the job and, as its second argument, the signal, or a transactional handler's transaction. */
  readonly handler: Handler<unknown, unknown, never>
  readonly options: HandlerOptions | TransactionalOptions | undefined
}

export const loadTasks = (
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
    // Each task is a handler, or { handler, retry?, timeout?, transactional? } for a task type with options of its own.
    const tasks = mod.default
    const usage = `--tasks ${file}: its default export must be { taskType: handler, ... } (or { taskType: { handler, retry, timeout, transactional } }) with at least one handler`
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
      const { retry, timeout, transactional } = task as Partial<TransactionalOptions>
      if (transactional !== undefined && typeof transactional !== "boolean")
        return yield* Effect.fail(
          new CliError({ message: `--tasks ${file}: "${taskType}": transactional must be true or false` })
        )
      if (retry !== undefined) {
        const checked = Retry.parse(retry)
        if (Either.isLeft(checked))
          return yield* Effect.fail(
            new CliError({ message: `--tasks ${file}: "${taskType}": ${checked.left.message}` })
          )
      }
      handlers[taskType] = {
        handler: handler as Handler<unknown, unknown, never>,
        options: transactional === true ? { retry, timeout, transactional } : { retry, timeout }
      }
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
