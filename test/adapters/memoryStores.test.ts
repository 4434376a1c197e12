/**
 * The memory adapters against the same contract suites as Postgres.
 */
import { Effect, Layer } from "effect"
import * as FakeStore from "../../src/adapters/memory/FakeStore.js"
import * as MemoryQueueStore from "../../src/adapters/memory/MemoryQueueStore.js"
import * as MemorySettings from "../../src/adapters/memory/MemorySettings.js"
import { JobStore } from "../../src/index.js"
import { StoreInspector, suite } from "../contracts/JobStoreContract.js"
import { suite as pauseSwitchSuite } from "../contracts/PauseSwitchContract.js"
import { suite as settingsSuite } from "../contracts/SettingsContract.js"

const inspector = Layer.effect(
  StoreInspector,
  Effect.map(FakeStore.FakeStore, (fake) =>
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

suite("memory", Layer.provideMerge(inspector, FakeStore.layer) as Layer.Layer<JobStore | StoreInspector>)
settingsSuite("memory", MemorySettings.layer())
// The queue and the settings over one in-memory scheduler_meta, as TestRunner wires them.
pauseSwitchSuite("memory", MemoryQueueStore.layerFromMeta.pipe(Layer.provideMerge(MemorySettings.layer())), {
  wakes: "synchronously"
})
