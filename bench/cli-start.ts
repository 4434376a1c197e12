/**
 * The CLI's cold start: wall time of `kairos --help` and of `kairos queue` (one query on DATABASE_URL, when set),
 * each run as a new process, as a user types them. Prints the figures; asserts nothing.
 *
 *   npm run bench:cli
 */
import { spawnSync } from "node:child_process"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const bin = path.join(root, "bin/kairos.js")
const RUNS = 10

const time = (args: ReadonlyArray<string>): Array<number> =>
  Array.from({ length: RUNS }, () => {
    const start = performance.now()
    const run = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8" })
    const ms = performance.now() - start
    if (run.status !== 0) throw new Error(`kairos ${args.join(" ")} exited ${run.status}: ${run.stderr}`)
    return ms
  })

const summary = (label: string, ms: Array<number>) => {
  const sorted = [...ms].sort((a, b) => a - b)
  const median = sorted[Math.floor(sorted.length / 2)]!
  console.log(
    `${label.padEnd(34)} median ${median.toFixed(0).padStart(5)} ms   min ${sorted[0]!.toFixed(0).padStart(5)} ms   max ${sorted[sorted.length - 1]!.toFixed(0).padStart(5)} ms   (${RUNS} runs)`
  )
}

console.log(`kairos CLI cold start (node ${process.version})`)
summary(
  "node -e '' (Node itself)",
  Array.from({ length: RUNS }, () => {
    const start = performance.now()
    spawnSync(process.execPath, ["-e", ""])
    return performance.now() - start
  })
)
summary("kairos --help", time(["--help"]))
const url = process.env["DATABASE_URL"]
if (url !== undefined && url !== "") {
  spawnSync(process.execPath, [bin, "migrate", "--database-url", url, "--schema", "kairos_bench_cli"])
  summary("kairos queue (one query)", time(["queue", "--database-url", url, "--schema", "kairos_bench_cli"]))
} else console.log("(set DATABASE_URL to time `kairos queue` too)")
