/**
 * Imports a `--tasks` module. TypeScript is loaded (tsx) only when the module is written in it, and only where tsx
 * is installed. A bare import the
 * module cannot resolve from its own folder ("kairos", "effect"... in a file outside any project that installed
 * them) resolves from kairos's package instead, so the tasks module shares the running CLI's kairos and Effect:
 * through `resolveFallback`'s hook for `import`, and through the CommonJS resolver for `require` (which is what a
 * `.ts` file outside an ESM package compiles to; Node 20's hooks do not reach `require`).
 */
import Module, { register } from "node:module"
import { fileURLToPath, pathToFileURL } from "node:url"
import { bare } from "./resolveFallback.js"

let registered = false

interface CjsResolver {
  _resolveFilename: (request: string, parent: unknown, isMain: boolean, options?: unknown) => string
  _nodeModulePaths: (dir: string) => Array<string>
}

const requireFallback = () => {
  const resolver = Module as unknown as CjsResolver
  const here = fileURLToPath(import.meta.url)
  // A stand-in parent inside kairos's package: node_modules lookups and the package's self-reference start there.
  const parent = new Module(here)
  parent.filename = here
  parent.paths = resolver._nodeModulePaths(here)
  const original = resolver._resolveFilename
  resolver._resolveFilename = function (request, from, isMain, options) {
    try {
      return original.call(this, request, from, isMain, options)
    } catch (error) {
      if (!bare(request) || (error as { code?: unknown }).code !== "MODULE_NOT_FOUND") throw error
      return original.call(this, request, parent, isMain, options)
    }
  }
}

/**
 * tsx is an optional peer of kairos (it brings esbuild, ~12 MB, into every install otherwise): where it is missing, a
 * `.ts` tasks module gets one line that names the fix.
 */
const missingTsx = (e: unknown): Error | undefined => {
  const code = (e as { code?: unknown } | null)?.code
  const message = e instanceof Error ? e.message : ""
  return (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") && /['"]tsx['"]/.test(message)
    ? new Error("a .ts tasks module needs tsx: npm install --save-dev tsx (or compile the module to .js)")
    : undefined
}

/**
 * Loads what a tasks module almost always imports, Effect and kairos (a few hundred modules), before any resolve hook
 * is registered: once one is (ours, tsx's), every module Node 20 loads costs a round trip to the hooks' thread. Loaded
 * here, they are cache hits for the tasks module: ~0.25 s of CPU off a worker's start (docs/troubleshooting.md). The
 * specifiers are not literals, so that the bundler leaves both packages where they are. A failure here is left for the
 * tasks module to meet, if it imports them; a module that resolves other copies (its own project's) loads those, and
 * one that imports neither at run time (type imports are erased) pays ~0.07 s for them.
 */
const preload = (specifiers: ReadonlyArray<string>): Promise<unknown> =>
  Promise.all(specifiers.map((specifier) => import(specifier).catch(() => undefined)))

export const importTasks = async (file: string): Promise<unknown> => {
  if (!registered) {
    registered = true
    const typescript = /\.[cm]?tsx?$/.test(file)
    // Both loaders: a .ts file outside an ESM package is CommonJS to Node.
    const [tsx] = await Promise.all([
      typescript
        ? Promise.all([import("tsx/esm/api"), import("tsx/cjs/api")]).catch((e: unknown) => {
            throw missingTsx(e) ?? e
          })
        : undefined,
      preload(["effect", "kairos"])
    ])
    register(new URL("./resolveFallback.js", import.meta.url))
    requireFallback()
    if (tsx !== undefined) {
      const [esm, cjs] = tsx
      esm.register()
      cjs.register()
    }
  }
  const namespace = (await import(pathToFileURL(file).href)) as { default?: unknown }
  // A module compiled to CommonJS arrives as { default: module.exports }, its own exports one level down.
  const inner = namespace.default as { __esModule?: unknown } | null | undefined
  return typeof inner === "object" && inner !== null && inner.__esModule === true ? inner : namespace
}
