import os from "node:os"
import { defineConfig } from "vitest/config"

// Files that need no database: the domain, the runtime on the memory adapters, the memory adapters, the migration
// files, the import rule, the user-facing testing example. They run without the Postgres global setup.
const unit = [
  "test/domain/**/*.test.ts",
  "test/runtime/**/*.test.ts",
  "test/adapters/memory*.test.ts",
  "test/adapters/migrationFiles.test.ts",
  "test/architecture.test.ts",
  "examples/**/*.test.ts"
]

export default defineConfig({
  // "kairos" (examples import it as users do) resolves to the sources, as under tsc and tsx (the package's
  // "kairos-source" export condition), not to a dist/ that may be stale.
  resolve: { conditions: ["kairos-source"] },
  ssr: { resolve: { conditions: ["kairos-source"] } },
  test: {
    exclude: ["test/fixtures/**", "node_modules/**"],
    testTimeout: 30_000,
    // Two files at a time at least (vitest's default is one fewer than the cores: one, on two). Most of the suite waits
    // on real processes and Postgres, not on this CPU: on two cores it took ~890 s one file at a time, ~510 s two.
    maxWorkers: Math.max(2, (os.availableParallelism?.() ?? os.cpus().length) - 1),
    hookTimeout: 60_000,
    // Without isolation files share modules in a worker; this undoes what one file's @effect/vitest `layer` left.
    setupFiles: ["test/support/restoreEffectIt.ts"],
    poolOptions: { threads: { isolate: false } },
    projects: [
      // No isolation: the unit files share one module graph per worker, loading effect and the sources once rather
      // than per file (the project's CPU ~84 s to ~45 s). Isolation is a pool-wide setting, so they run in the
      // threads pool and the postgres files keep their own processes (forks); groupOrder runs the unit files first,
      // then the postgres ones, so the two pools never add up to more than maxWorkers files at once. Nothing in
      // these files keeps state in modules between files (restoreEffectIt.ts undoes @effect/vitest's).
      {
        extends: true,
        test: { name: "unit", include: unit, pool: "threads", sequence: { groupOrder: 0 } }
      },
      {
        extends: true,
        test: {
          name: "postgres",
          sequence: { groupOrder: 1 },
          include: ["test/**/*.test.ts"],
          exclude: [...unit, "test/fixtures/**", "node_modules/**"],
          // One Postgres for the whole run (embedded unless DATABASE_URL is set); each file works in its own schema.
          globalSetup: ["test/support/globalSetup.ts"]
        }
      }
    ]
  }
})
