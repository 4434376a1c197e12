/**
 * Starts one throwaway embedded Postgres for the whole test run unless `DATABASE_URL` is set, and stops it when
 * the run ends, failed tests included. Test files read the URL with `inject("databaseUrl")`.
 * It also brings `dist/` up to date first: the CLI tests spawn `bin/kairos.js`, which runs the compiled code, as
 * users do (from its bundles, dist/cli.js and the worker's), and so do the worker processes of the
 * multi-process tests (their fixtures compiled here).
 */
import { execFileSync } from "node:child_process"
import fs from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import type { TestProject } from "vitest/node"
import { startEmbedded, type EmbeddedServer } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { compileFixtures } from "./compiledFixtures.js"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
    /** Where the compiled fixtures are (see compiledFixtures.ts). */
    compiledFixtures: string
  }
}

let server: EmbeddedServer | undefined

/** The newest modification time (ms) among the files and folders under `dir` (a deletion changes its folder's). */
const newest = (dir: string): number =>
  fs
    .readdirSync(dir, { withFileTypes: true })
    .reduce(
      (m, e) =>
        Math.max(m, e.isDirectory() ? newest(path.join(dir, e.name)) : fs.statSync(path.join(dir, e.name)).mtimeMs),
      fs.statSync(dir).mtimeMs
    )

const mtime = (root: string, file: string): number => fs.statSync(path.join(root, file)).mtimeMs

/**
 * Whether `dist/` was built after the last change to what it is built from. A fresh clone's `npm install` has just
 * built it (`prepare`), so its test run need not start the compiler again.
 */
const distIsCurrent = (root: string, stamp: string): boolean => {
  if (!fs.existsSync(stamp)) return false
  const inputs = Math.max(
    newest(path.join(root, "src")),
    ...["package.json", "tsconfig.json", "tsconfig.build.json"].map((f) => fs.statSync(path.join(root, f)).mtimeMs)
  )
  return inputs < fs.statSync(stamp).mtimeMs
}

/** Compiles `dist/` unless it is current (an incremental build: only what changed is emitted). */
const buildDist = (root: string): void => {
  // tsc rewrites its build info only when something changed: the stamp is set to when this build started, so an
  // edit made while it ran counts as newer.
  const stamp = path.join(root, "dist", ".tsbuildinfo")
  if (distIsCurrent(root, stamp)) return
  const started = new Date()
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc")
  try {
    execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: root, stdio: "inherit" })
  } catch (e) {
    // A failed build (a type error) is not current: the next run compiles, and reports it, again.
    if (fs.existsSync(stamp)) fs.utimesSync(stamp, 0, 0)
    throw e
  }
  fs.utimesSync(stamp, started, started)
}

export const setup = async (project: TestProject): Promise<void> => {
  const root = project.config.root
  buildDist(root)
  // As `npm run build` does: the migrations' .sql files beside the compiled module that reads them.
  execFileSync(process.execPath, ["scripts/copy-migrations.mjs", "dist"], { cwd: root, stdio: "inherit" })
  // And the CLI's bundles (scripts/bundle-cli.mjs: dist/cli.js for every command but `worker`, and the worker's), when
  // one is missing or older than dist/ or than the script that makes them.
  const bundles = ["dist/cli.js", "dist/adapters/cli/main.bundle.js"]
  const newest = Math.max(mtime(root, "dist/.tsbuildinfo"), mtime(root, "scripts/bundle-cli.mjs"))
  if (bundles.some((file) => !fs.existsSync(path.join(root, file)) || mtime(root, file) < newest))
    execFileSync(process.execPath, ["scripts/bundle-cli.mjs"], { cwd: root, stdio: "inherit" })
  project.provide("compiledFixtures", await compileFixtures(root))
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
