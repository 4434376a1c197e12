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
