/**
 * Starts one throwaway embedded Postgres for the whole test run unless `DATABASE_URL` is set, and stops it when
 * the run ends, failed tests included. Test files read the URL with `inject("databaseUrl")`.
 * It also compiles `dist/` first: the CLI tests spawn `bin/kairos.js`, which runs the compiled code, as users do.
 */
import { execFileSync } from "node:child_process"
import { createRequire } from "node:module"
import type { TestProject } from "vitest/node"
import { startEmbedded, type EmbeddedServer } from "../../src/adapters/postgres/EmbeddedPostgres.js"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

let server: EmbeddedServer | undefined

export const setup = async (project: TestProject): Promise<void> => {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc")
  execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: project.config.root, stdio: "inherit" })
  // As `npm run build` does: the migrations' .sql files beside the compiled module that reads them.
  execFileSync(process.execPath, ["scripts/copy-migrations.mjs", "dist"], {
    cwd: project.config.root,
    stdio: "inherit"
  })
  const fromEnv = process.env["DATABASE_URL"]
  if (fromEnv !== undefined && fromEnv.length > 0) {
    project.provide("databaseUrl", fromEnv)
    return
  }
  server = await startEmbedded()
  project.provide("databaseUrl", server.url)
}

export const teardown = async (): Promise<void> => {
  await server?.stop()
  server = undefined
}
