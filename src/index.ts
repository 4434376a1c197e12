/**
 * kairos — a durable job scheduler for TypeScript, built on Effect, that keeps its state in Postgres.
 */
export * as Schedule from "./domain/Schedule.js"
export * from "./domain/errors.js"
export * from "./domain/Job.js"
export * as Result from "./domain/Result.js"
export * as QueueItem from "./domain/QueueItem.js"
export * as ProcessedItem from "./domain/ProcessedItem.js"
export * as SchedulerConfig from "./domain/SchedulerConfig.js"
export * as ScheduledJob from "./domain/ScheduledJob.js"
export * as Clock from "./ports/Clock.js"
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
export { QueueStore, QueueStoreError, type EnqueueInput, type QueueClaim, type WorkerInfo } from "./ports/QueueStore.js"
export * as FakeStore from "./adapters/memory/FakeStore.js"
export * as FakeClock from "./adapters/memory/FakeClock.js"
export * as NoopStore from "./adapters/memory/NoopStore.js"
export * as MemorySettings from "./adapters/memory/MemorySettings.js"
export * as MemoryMeta from "./adapters/memory/MemoryMeta.js"
export * as EmptyQueueStore from "./adapters/memory/EmptyQueueStore.js"
export * as Runner from "./runtime/Runner.js"
export type { RecurringJob } from "./runtime/ScheduledSource.js"
export { HandlerTimeoutError, type Handler, type HandlerOptions } from "./runtime/Handler.js"
export * as TestRunner from "./layers/TestRunner.js"
export * as PgJobStore from "./adapters/postgres/PgJobStore.js"
export * as PgSettings from "./adapters/postgres/PgSettings.js"
export { migrate, MigrationError } from "./adapters/postgres/migrations.js"
export * as EmbeddedPostgres from "./adapters/postgres/EmbeddedPostgres.js"
export * as PgKairos from "./layers/PgKairos.js"
export * as MemoryQueueStore from "./adapters/memory/MemoryQueueStore.js"
export * as PgQueueStore from "./adapters/postgres/PgQueueStore.js"
export * as PgListener from "./adapters/postgres/PgListener.js"
export * as PgClock from "./adapters/postgres/PgClock.js"
export * as Kairos from "./layers/Kairos.js"
