/**
 * The memory adapters against the same contract suites as Postgres.
 */
import { Effect, Layer } from "effect"
import * as MemoryDatabase from "../../src/adapters/memory/MemoryDatabase.js"
import * as MemoryJobStore from "../../src/adapters/memory/MemoryJobStore.js"
import * as MemorySemaphore from "../../src/adapters/memory/MemorySemaphore.js"
import * as MemorySettings from "../../src/adapters/memory/MemorySettings.js"
import * as MemoryWakeUps from "../../src/adapters/memory/MemoryWakeUps.js"
import * as MemoryWorkerRegistry from "../../src/adapters/memory/MemoryWorkerRegistry.js"
import { JobStore } from "../../src/index.js"
import { SEMAPHORE_KEY } from "../../src/domain/SettingValues.js"
import { StoreInspector, suite } from "../contracts/JobStoreContract.js"
import { suite as semaphoreSuite } from "../contracts/SemaphoreContract.js"
import { suite as settingsSuite } from "../contracts/SettingsContract.js"
import { WorkerInspector, suite as workerRegistrySuite } from "../contracts/WorkerRegistryContract.js"

const inspector = Layer.effect(
  StoreInspector,
  Effect.map(MemoryJobStore.MemoryJobStore, (fake) =>
    StoreInspector.of({
      runs: (jobId) => Effect.map(fake.runs, (runs) => runs.filter((r) => r.jobId === jobId)),
      job: (jobId) => Effect.map(fake.jobs, (jobs) => jobs.find((j) => j.id === jobId)),
      setEnabled: (jobId, enabled) =>
        Effect.flatMap(fake.jobs, (jobs) => {
          const job = jobs.find((j) => j.id === jobId)
          return job === undefined ? Effect.void : fake.setEnabled(job.name, enabled)
        })
    })
  )
)

suite("memory", Layer.provideMerge(inspector, MemoryJobStore.layer) as Layer.Layer<JobStore | StoreInspector>)
settingsSuite("memory", MemorySettings.layer())

// The switch, the settings and the wake-ups over one MemoryDatabase, as TestRunner wires them.
semaphoreSuite(
  "memory",
  Layer.mergeAll(MemorySemaphore.layer(), MemorySettings.layerFromDatabase, MemoryWakeUps.layer).pipe(
    Layer.provideMerge(MemoryDatabase.layer())
  ),
  {
    wakes: "synchronously",
    deleteRow: Effect.map(MemoryDatabase.MemoryDatabase, (db) => void db.set(SEMAPHORE_KEY, undefined)),
    startOver: (options) =>
      options.startGreen === false
        ? Effect.zipRight(MemorySemaphore.startRed, MemorySemaphore.make)
        : MemorySemaphore.make
  }
)

const workers = Layer.effect(
  WorkerInspector,
  Effect.map(MemoryDatabase.MemoryDatabase, (db) =>
    WorkerInspector.of({
      live: (now) =>
        Effect.sync(() =>
          [...db.workers.values()]
            .filter((w) => w.liveUntil.getTime() > now.getTime())
            .sort((a, b) => (a.id < b.id ? -1 : 1))
        )
    })
  )
)
workerRegistrySuite(
  "memory",
  Layer.merge(MemoryWorkerRegistry.layer, workers).pipe(Layer.provideMerge(MemoryDatabase.layer()))
)
