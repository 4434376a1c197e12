/**
 * The import rule of the layout, checked over the sources: domain imports only domain; ports only domain; runtime
 * only ports and domain; adapters no runtime (the CLI, which drives the runtime, excepted); only composition
 * (`src/layers`), the entry points (`index.ts`, `testing.ts`, `dev.ts`, `dashboard.ts`), the CLI, benches and examples import adapters. `src/internal` holds the domain's pure
 * helpers and counts as domain. The web dashboard (`adapters/dashboard`) is a driving adapter like the CLI but needs no
 * runner: it reads through the Postgres adapter and acts through the runtime's `Admin` (the one admin path, over the
 * stores), so it may import adapters, runtime, ports and domain; no other adapter imports it (only the CLI and its entry point `dashboard.ts` do), so `kairos` never
 * loads an HTTP server.
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
  if (rel[0] === "internal") return "domain"
  if (rel[0] === "adapters") return rel[1] === "cli" ? "cli" : rel[1] === "dashboard" ? "dashboard" : "adapters"
  return rel[0]!
}

/** Relative imports of a file (static, dynamic and type-only), resolved to source files. */
const importsOf = (file: string): Array<string> => {
  const text = fs.readFileSync(file, "utf8")
  const specifiers = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1]!)
  return specifiers.map((s) => path.resolve(path.dirname(file), s.replace(/\.js$/, ".ts")))
}

const allowed: Record<string, ReadonlyArray<string>> = {
  domain: ["domain"],
  ports: ["ports", "domain"],
  runtime: ["runtime", "ports", "domain"],
  adapters: ["adapters", "ports", "domain"],
  dashboard: ["dashboard", "adapters", "runtime", "ports", "domain"],
  cli: ["cli", "dashboard", "adapters", "layers", "runtime", "ports", "domain"],
  layers: ["layers", "adapters", "runtime", "ports", "domain"],
  index: ["index", "dashboard", "layers", "adapters", "cli", "runtime", "ports", "domain"]
}

describe("the import rule", () => {
  const files = filesUnder(src)

  it("finds the layout's parts", () => {
    const parts = new Set(files.map(partOf))
    for (const part of ["domain", "ports", "runtime", "adapters", "dashboard", "cli", "layers", "index"]) {
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
  })
})
