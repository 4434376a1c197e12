/**
 * `kairos/testing`: the in-memory adapters and a clock you drive, for deterministic tests of code that uses kairos.
 * They behave like the Postgres adapters (the same contract suites run against both).
 */
export * as FakeStore from "./adapters/memory/FakeStore.js"
export * as FakeClock from "./adapters/memory/FakeClock.js"
export * as NoopStore from "./adapters/memory/NoopStore.js"
export * as MemorySettings from "./adapters/memory/MemorySettings.js"
export * as MemoryMeta from "./adapters/memory/MemoryMeta.js"
export * as EmptyQueueStore from "./adapters/memory/EmptyQueueStore.js"
export * as TestRunner from "./layers/TestRunner.js"
export * as MemoryQueueStore from "./adapters/memory/MemoryQueueStore.js"
