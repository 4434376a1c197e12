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
    projects: [
      { extends: true, test: { name: "unit", include: unit } },
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
