import os from "node:os"
import { defineConfig } from "vitest/config"
import { LongestFirstSequencer } from "./test/support/sequencer.js"

// Files that need no database: the domain, the runtime on the memory adapters, the memory adapters, the migration
// files, how Postgres errors are classified and retried, the CLI's help text, the dashboard's pacing of live
// refreshes, the import rule, the user-facing testing example. They run without the Postgres global setup.
const unit = [
  "test/domain/**/*.test.ts",
  "test/runtime/**/*.test.ts",
  "test/adapters/memory*.test.ts",
  "test/adapters/migrationFiles.test.ts",
  "test/adapters/pgErrors.test.ts",
  "test/cli/help.test.ts",
  "test/dashboard/paced.test.ts",
  "test/architecture.test.ts",
  "examples/**/*.test.ts"
]

/**
 * How many postgres files run at a time: KAIROS_TEST_FILES when set, else three more than the cores. Most of these files
 * wait on real time (storms of 40 s, leases that must expire, processes starting), so more of them than cores keep the
 * cores busy. Measured on one 2-core machine (docs/development.md): two at a time 313 s with the cores 30 % idle, three
 * 252 s, four 234–256 s. Later, without PgBouncer and Chromium (their files skipped): four 170–176 s with the cores
 * 11 % idle, five 163 s (4 %), six 163 s (1 %). On a slower 2-core machine four was no faster than two (the cores
 * were the limit already) and no slower; the liveness bounds that such load broke were widened.
 */
const cores = os.availableParallelism?.() ?? os.cpus().length
const postgresFiles = Number(process.env["KAIROS_TEST_FILES"] ?? "") || cores + 3

export default defineConfig({
  // "kairos" (examples import it as users do) resolves to the sources, as under tsc and tsx (the package's
  // "kairos-source" export condition), not to a dist/ that may be stale.
  resolve: { conditions: ["kairos-source"] },
  ssr: { resolve: { conditions: ["kairos-source"] } },
  test: {
    exclude: ["test/fixtures/**", "node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The default report, then the tests that came near their time limit (test/support/boundsReporter.ts).
    reporters: ["default", "./test/support/boundsReporter.ts"],
    // The longest files first (test/support/sequencer.ts), so the run does not end on a long file started last.
    sequence: { sequencer: LongestFirstSequencer },
    // Without isolation files share modules in a worker; this undoes what one file's @effect/vitest `layer` left.
    setupFiles: ["test/support/restoreEffectIt.ts", "test/support/cpuLog.ts"],
    // Each pool has its own size (below); the unit files and the postgres files run at the same time.
    poolOptions: {
      // The unit files, one at a time: CPU work, done while the postgres files mostly wait. One thread only: a second
      // would take CPU from the postgres files' processes when they need it most (the first two minutes).
      threads: { isolate: false, maxThreads: 1, minThreads: 1 },
      // The postgres files, in processes that each run file after file: effect, pg and the sources load once per
      // process, not once per file (isolation cost ~2 s of CPU a file). minForks = maxForks: a process is never ended
      // between files.
      forks: { isolate: false, maxForks: postgresFiles, minForks: postgresFiles }
    },
    projects: [
      // No isolation in either project: a worker runs its files one after the other in one module graph, loading
      // effect and the sources once (the unit project's CPU ~84 s to ~45 s). Files share the modules, not the tests'
      // data: each postgres file works in a schema of its own (test/support/cli.ts makes one per file too), and
      // restoreEffectIt.ts undoes what @effect/vitest's `layer` leaves on the shared `it`.
      {
        extends: true,
        test: { name: "unit", include: unit, pool: "threads" }
      },
      {
        extends: true,
        test: {
          name: "postgres",
          include: ["test/**/*.test.ts"],
          exclude: [...unit, "test/fixtures/**", "node_modules/**"],
          // One Postgres for the whole run (embedded unless DATABASE_URL is set); each file works in its own schema.
          globalSetup: ["test/support/globalSetup.ts"]
        }
      }
    ]
  }
})
