/**
 * `kairos/testing`: the in-memory adapters and a clock you drive, for deterministic tests of code that uses kairos.
 * They behave like the Postgres adapters (the same contract suites run against both). Build the memory ports over
 * one `MemoryDatabase` (as `TestRunner.memoryPorts` does) and they agree as the Postgres ones do over one schema.
 */
export * as MemoryJobStore from "./adapters/memory/MemoryJobStore.js"
/** The seed's name for `MemoryJobStore` (the same module): `FakeStore.layer`, `FakeStore.FakeStore`. */
export * as FakeStore from "./adapters/memory/MemoryJobStore.js"
export * as FakeClock from "./adapters/memory/FakeClock.js"
export * as NoopStore from "./adapters/memory/NoopStore.js"
export * as MemorySettings from "./adapters/memory/MemorySettings.js"
export * as MemoryDatabase from "./adapters/memory/MemoryDatabase.js"
export * as MemorySemaphore from "./adapters/memory/MemorySemaphore.js"
export * as MemoryWorkerRegistry from "./adapters/memory/MemoryWorkerRegistry.js"
export * as MemoryWakeUps from "./adapters/memory/MemoryWakeUps.js"
export * as EmptyQueueStore from "./adapters/memory/EmptyQueueStore.js"
export * as TestRunner from "./layers/TestRunner.js"
export * as MemoryQueueStore from "./adapters/memory/MemoryQueueStore.js"
export * as MemoryLimits from "./adapters/memory/MemoryLimits.js"
