/**
 * tsc compiles the TypeScript only: this copies the migrations' .sql files next to the compiled migrations module,
 * where it reads them. `node scripts/copy-migrations.mjs <where src is compiled to>`: `dist` for the package,
 * `.bench-build/src` for the benchmarks. Plain Node (no tsx): it runs in `prepare`.
 */
import fs from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const target = process.argv[2]
if (target === undefined) {
  console.error("usage: node scripts/copy-migrations.mjs <output directory of src>")
  process.exit(2)
}
const from = path.join(root, "src/adapters/postgres/migrations")
const to = path.resolve(root, target, "adapters/postgres/migrations")
fs.mkdirSync(to, { recursive: true })
for (const name of fs.readdirSync(from)) {
  if (name.endsWith(".sql")) fs.copyFileSync(path.join(from, name), path.join(to, name))
}
