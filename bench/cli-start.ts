/**
 * The CLI's cold start: wall time of `kairos --help` and of `kairos queue` (one query on DATABASE_URL, when set),
 * each run as a new process, as a user types them; and, with DATABASE_URL, a worker's start up to its first line (its
 * tasks module loaded, the database reached), with the CPU it took on Linux (a fleet of workers starting at once, or a
 * deploy, pays that on every process). Prints the figures; asserts nothing.
 *
 *   npm run bench:cli
 */
import { spawn, spawnSync } from "node:child_process"
import fs from "node:fs"
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
    `${label.padEnd(46)} median ${median.toFixed(0).padStart(5)} ms   min ${sorted[0]!.toFixed(0).padStart(5)} ms   max ${sorted[sorted.length - 1]!.toFixed(0).padStart(5)} ms   (${RUNS} runs)`
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
  for (const tasks of ["examples/tasks.ts", "bench/lib/tasks.mjs"]) {
    const cpu: Array<number> = []
    const ms: Array<number> = []
    for (let i = 0; i < RUNS; i++) {
      const start = performance.now()
      const child = spawn(
        process.execPath,
        [bin, "worker", "--tasks", tasks, "--database-url", url, "--schema", "kairos_bench_cli", "--quiet"],
        { cwd: root, stdio: ["ignore", "pipe", "inherit"] }
      )
      await new Promise<void>((resolve, reject) => {
        let out = ""
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString()
          if (out.includes("\n")) resolve()
        })
        child.on("exit", (code) => reject(new Error(`kairos worker exited ${code} before its first line`)))
      })
      ms.push(performance.now() - start)
      // utime + stime, in clock ticks (1/100 s), after the command name's closing parenthesis.
      const stat = fs.existsSync(`/proc/${child.pid}/stat`) ? fs.readFileSync(`/proc/${child.pid}/stat`, "utf8") : ""
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      if (stat !== "") cpu.push((Number(fields[11]) + Number(fields[12])) * 10)
      child.removeAllListeners("exit")
      const exited = new Promise((resolve) => child.on("exit", resolve))
      child.kill("SIGTERM")
      await exited
    }
    summary(`kairos worker --tasks ${path.extname(tasks)} (to its first line)`, ms)
    if (cpu.length > 0) summary("  its CPU by then", cpu)
  }
} else console.log("(set DATABASE_URL to time `kairos queue` and a worker's start too)")
