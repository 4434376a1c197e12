/**
 * The import rule of the layout, checked over the sources. Each part may import only the parts its row of `allowed`
 * lists, with no exception for any file:
 * - `internal` (pure helpers: zone arithmetic, cron fields, formatting) imports nothing of kairos's;
 * - `domain` (pure) imports only itself and `internal`; `ports` add the domain; `runtime` adds the ports;
 * - the driven adapters, `postgres` and `memory`, implement ports: they import ports, the domain and `internal`,
 *   never the runtime and never each other;
 * - the driving adapters: the dashboard reads through the Postgres adapter and acts through the runtime's `Admin`
 *   (the one admin path); the CLI composes a runner (`layers`) and serves the dashboard;
 * - `layers` composes runtime and adapters; the entry points (`index.ts`, `testing.ts`, `dev.ts`, `dashboard.ts`)
 *   re-export, and none reaches into the CLI.
 * No other part imports the dashboard (only the CLI and its entry point `dashboard.ts` do), so `kairos` never loads an
 * HTTP server.
 */
import { describe, expect, it } from "vitest"
import fs from "node:fs"
import path from "node:path"
import { projectRoot } from "./support/process.js"

const src = path.join(projectRoot, "src")

const filesUnder = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    return entry.isDirectory() ? filesUnder(full) : entry.name.endsWith(".ts") ? [full] : []
  })

/** The part of the layout a source file belongs to. */
const partOf = (file: string): string => {
  const rel = path.relative(src, file).split(path.sep)
  // The package's entry points: `kairos`, `kairos/testing`, `kairos/dev`, `kairos/dashboard`.
  if (rel.length === 1) return ["index.ts", "testing.ts", "dev.ts", "dashboard.ts"].includes(rel[0]!) ? "index" : "root"
  // Each adapter is a part of its own: `postgres`, `memory`, `cli`, `dashboard`.
  if (rel[0] === "adapters") return rel[1]!
  return rel[0]!
}

/** Relative imports of a file (static, dynamic and type-only), resolved to source files. */
const importsOf = (file: string): Array<string> => {
  const text = fs.readFileSync(file, "utf8")
  const specifiers = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1]!)
  return specifiers.map((s) => path.resolve(path.dirname(file), s.replace(/\.js$/, ".ts")))
}

const allowed: Record<string, ReadonlyArray<string>> = {
  internal: ["internal"],
  domain: ["domain", "internal"],
  ports: ["ports", "domain", "internal"],
  runtime: ["runtime", "ports", "domain", "internal"],
  postgres: ["postgres", "ports", "domain", "internal"],
  memory: ["memory", "ports", "domain", "internal"],
  dashboard: ["dashboard", "postgres", "runtime", "ports", "domain", "internal"],
  cli: ["cli", "dashboard", "layers", "postgres", "runtime", "ports", "domain", "internal"],
  layers: ["layers", "postgres", "memory", "runtime", "ports", "domain", "internal"],
  index: ["index", "dashboard", "layers", "postgres", "memory", "runtime", "ports", "domain", "internal"]
}

describe("the import rule", () => {
  const files = filesUnder(src)

  it("finds the layout's parts", () => {
    const parts = new Set(files.map(partOf))
    // Every part of the table exists (a renamed folder would otherwise escape the rule), and nothing else does.
    expect([...parts].sort()).toEqual(Object.keys(allowed).sort())
    for (const part of Object.keys(allowed)) {
      expect(parts.has(part)).toBe(true)
    }
    expect(parts.has("root")).toBe(false)
  })

  it("holds for every source file", () => {
    const violations = files.flatMap((file) => {
      const from = partOf(file)
      return importsOf(file)
        .filter((target) => target.startsWith(src))
        .map((target) => ({ target, to: partOf(target) }))
        .filter(({ to }) => !(allowed[from] ?? []).includes(to))
        .map(({ target, to }) => `${path.relative(src, file)} (${from}) imports ${path.relative(src, target)} (${to})`)
    })
    expect(violations).toEqual([])
  })

  it("keeps the HTTP server out of the main entry point (kairos/dashboard brings it)", () => {
    const seen = new Set<string>()
    const visit = (file: string): void => {
      if (seen.has(file) || !fs.existsSync(file)) return
      seen.add(file)
      importsOf(file).forEach(visit)
    }
    visit(path.join(src, "index.ts"))
    expect([...seen].filter((file) => partOf(file) === "dashboard")).toEqual([])
    expect(
      [...seen].some((file) => fs.readFileSync(file, "utf8").includes("@effect/platform-node/NodeHttpServer"))
    ).toBe(false)
  })

  it("catches a violation (the checker itself works)", () => {
    const file = path.join(src, "domain/Job.ts")
    expect(partOf(file)).toBe("domain")
    expect(allowed["domain"]).not.toContain(partOf(path.join(src, "adapters/memory/MemoryJobStore.ts")))
    expect(importsOf(path.join(src, "runtime/Runner.ts")).some((t) => partOf(t) === "ports")).toBe(true)
    // internal/zone.ts once imported the domain's errors: that is now a violation.
    expect(partOf(path.join(src, "internal/zone.ts"))).toBe("internal")
    expect(allowed["internal"]).not.toContain("domain")
    // No entry point reaches into the CLI, and no driven adapter into another.
    expect(allowed["index"]).not.toContain("cli")
    expect(allowed["postgres"]).not.toContain("memory")
  })
})

/**
 * Every line kairos writes goes through Effect's Logger (diagnostics) or Console (a command's output), so a program
 * (or a test) decides where it goes. Only two places write to the process's streams themselves: the runner's exit
 * hook (a synchronous write at process exit, when no fiber runs any more) and the CLI's sinks, the one module that
 * implements the Console and Logger the CLI installs.
 */
describe("the output rule", () => {
  const direct = /\bconsole\.(?=\w)|process\.std(?:out|err)\.write|\bwriteSync\(/g
  const exempt: Record<string, ReadonlyArray<string>> = {
    [path.join("runtime", "Runner.ts")]: ["writeSync("],
    [path.join("adapters", "cli", "CliOutput.ts")]: ["console.", "process.stdout.write", "process.stderr.write"]
  }

  it("nothing writes to the console or the standard streams directly, except the exit hook and the CLI's sinks", () => {
    const offenders = filesUnder(src).flatMap((file) => {
      const rel = path.relative(src, file)
      return fs
        .readFileSync(file, "utf8")
        .split("\n")
        .flatMap((line, i) =>
          [...line.matchAll(direct)]
            .filter((m) => !(exempt[rel] ?? []).includes(m[0]))
            .map((m) => `${rel}:${i + 1}: ${m[0]}`)
        )
    })
    expect(offenders).toEqual([])
  })

  it("the exempt places exist and still write (the exemptions are not stale)", () => {
    for (const [rel, allowedWrites] of Object.entries(exempt)) {
      const text = fs.readFileSync(path.join(src, rel), "utf8")
      expect(
        allowedWrites.some((w) => text.includes(w)),
        rel
      ).toBe(true)
    }
  })
})
