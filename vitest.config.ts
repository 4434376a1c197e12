import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "examples/**/*.test.ts"],
    exclude: ["test/fixtures/**", "node_modules/**"],
    // One Postgres for the whole run (embedded unless DATABASE_URL is set); each file works in its own schema.
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000
  }
})
