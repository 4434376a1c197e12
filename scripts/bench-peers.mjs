/**
 * The job queues the benchmark measures kairos against (graphile-worker, pg-boss) are not the project's dependencies:
 * a user's or a contributor's `npm install` never fetches them (they want a newer Node than kairos does, and said so
 * in ten warning lines on every install). `npm run build:bench` runs this first (every `bench` script builds through
 * it, and tsc checks the peers' modules against their types): it installs them from bench/package.json
 * and its lock into bench/node_modules (`npm ci`, once, and again when the lock changes), then links each into
 * .bench-build/node_modules, where the compiled benchmark finds them. kairos's own compiled code there still resolves
 * pg and effect from the project's node_modules. The lock pins what the project's tree held when they were its
 * devDependencies (bench/package.json's overrides keep the two that npm would otherwise update).
 *
 * Plain Node, no arguments.
 */
import { spawnSync } from "node:child_process"
import fs from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const bench = path.join(root, "bench")
const manifest = JSON.parse(fs.readFileSync(path.join(bench, "package.json"), "utf8"))
const peers = Object.keys(manifest.dependencies)
const lock = path.join(bench, "package-lock.json")
// npm writes this after every install: older than the lock, the install is from an earlier lock.
const installed = path.join(bench, "node_modules", ".package-lock.json")

const mtime = (file) => (fs.existsSync(file) ? fs.statSync(file).mtimeMs : Number.NEGATIVE_INFINITY)
if (mtime(installed) < mtime(lock)) {
  console.log(`installing the benchmark's peers into bench/node_modules: ${peerList()}`)
  // Errors only: npm would warn about the peers' engines at length; the line below says it once.
  const npm = spawnSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: bench, stdio: "inherit" })
  if (npm.status !== 0) {
    console.error(`bench-peers: npm ci in bench/ failed (${npm.error?.message ?? `exit ${npm.status}`})`)
    process.exit(1)
  }
}

const links = path.join(root, ".bench-build", "node_modules")
for (const name of peers) {
  const link = path.join(links, name)
  fs.mkdirSync(path.dirname(link), { recursive: true })
  fs.rmSync(link, { recursive: true, force: true })
  fs.symlinkSync(path.relative(path.dirname(link), path.join(bench, "node_modules", name)), link, "dir")
}

// A peer that declares a newer Node than this one runs outside what it supports: said with the figures' context.
const unmet = peers.flatMap((name) => {
  const wanted = readPeer(name).engines?.node
  return wanted !== undefined && !satisfied(wanted) ? [`${name} ${readPeer(name).version} wants node ${wanted}`] : []
})
if (unmet.length > 0) console.log(`note: measured on Node ${process.versions.node}; ${unmet.join(", ")}`)

function readPeer(name) {
  return JSON.parse(fs.readFileSync(path.join(bench, "node_modules", name, "package.json"), "utf8"))
}

function peerList() {
  return peers.map((name) => `${name} ${manifest.dependencies[name]}`).join(", ")
}

// Only the `>=x.y.z` form the peers use; anything else is taken as met.
function satisfied(range) {
  const floor = /^>=\s*(\d+)\.(\d+)\.(\d+)$/.exec(range.trim())
  if (floor === null) return true
  const have = process.versions.node.split(".").map(Number)
  const want = floor.slice(1).map(Number)
  for (let i = 0; i < 3; i++) if (have[i] !== want[i]) return have[i] > want[i]
  return true
}
