/**
 * kairos — a durable job scheduler for TypeScript, built on Effect, that keeps its state in Postgres.
 *
 * Test helpers (an in-memory store and a clock you drive) are in `kairos/testing`; the embedded development
 * Postgres is in `kairos/dev`.
 */
export * as Schedule from "./domain/Schedule.js"
export * from "./domain/errors.js"
export * from "./domain/Job.js"
export * as Result from "./domain/Result.js"
export * as QueueItem from "./domain/QueueItem.js"
export * as Retry from "./domain/Retry.js"
export * as Flow from "./domain/Flow.js"
export * as ProcessedItem from "./domain/ProcessedItem.js"
export * as SchedulerConfig from "./domain/SchedulerConfig.js"
export * as ScheduledJob from "./domain/ScheduledJob.js"
export * as Clock from "./ports/Clock.js"
export * as Logger from "./ports/Logger.js"
export {
  JobStore,
  JobStoreError,
  type Lease,
  type RunSlot,
  type RunOutcome,
  type RunCompletion,
  type DueJob,
  type RunWithJob,
  type JobDefinition
} from "./ports/JobStore.js"
export { Settings, SettingsError, SettingKeys, SettingsWriter, type Switches } from "./ports/Settings.js"
export {
  QueueStore,
  QueueStoreError,
  EXACT_DEPTH_UP_TO,
  type EnqueueInput,
  type FlowStepInput,
  type QueueClaim,
  type QueueDepth,
  type VacuumOutcome,
  type VacuumRequest
} from "./ports/QueueStore.js"
export { Semaphore, SemaphoreError, SemaphoreKey, Green, Red, type SemaphoreOptions } from "./ports/Semaphore.js"
export { WorkerRegistry, WorkerRegistryError, type WorkerInfo } from "./ports/WorkerRegistry.js"
export { WakeUps, type WakeTopic, type Subscription } from "./ports/WakeUps.js"
export * as Runner from "./runtime/Runner.js"
export * as Metrics from "./runtime/Metrics.js"
export type { RecurringJob } from "./runtime/ScheduledSource.js"
export {
  HandlerTimeoutError,
  type Handler,
  type HandlerOptions,
  type HandlerTransaction,
  type TransactionalHandler,
  type TransactionalOptions
} from "./runtime/Handler.js"
export type { Transaction, Transacted, TransactOptions, QueryResult } from "./ports/Transaction.js"
export * as PgJobStore from "./adapters/postgres/PgJobStore.js"
export * as PgSettings from "./adapters/postgres/PgSettings.js"
export { migrate, MigrationError } from "./adapters/postgres/migrations.js"
export * as PgKairos from "./layers/PgKairos.js"
export { DatabaseConnectionError } from "./adapters/postgres/PgConnect.js"
export * as PgQueueStore from "./adapters/postgres/PgQueueStore.js"
export * as PgSemaphore from "./adapters/postgres/PgSemaphore.js"
export * as PgWorkerRegistry from "./adapters/postgres/PgWorkerRegistry.js"
export * as PgWakeUps from "./adapters/postgres/PgWakeUps.js"
export * as PgListener from "./adapters/postgres/PgListener.js"
export * as PgClock from "./adapters/postgres/PgClock.js"
export * as Kairos from "./layers/Kairos.js"
export { Limits, LimitsError } from "./ports/Limits.js"
export { InvalidLimitError, type FlowLimit, type FlowLimitInput, type Rate as FlowRate } from "./domain/Limits.js"
export * as PgLimits from "./adapters/postgres/PgLimits.js"
