/**
 * A setup file (it runs before each test file): puts back @effect/vitest's own `it.effect`, `it.scoped`, ….
 *
 * @effect/vitest 0.30's `layer(...)` installs its layer-bound testers by `Object.assign` on the one shared `it` (its
 * `it` is Vitest's `it` object), so after a file calls `layer(l, { excludeTestServices: true })`, a later file run in
 * the same worker without isolation got an `it.effect` that provides that (closed) layer and no TestClock:
 * "testClock.setTime is not a function". Fixed upstream in effect-smol (Effect-TS/effect-smol#2177), not in 0.30.
 * The first run in a worker keeps the untouched methods; every later file starts from them.
 */
import { it } from "@effect/vitest"

const methods = ["effect", "scoped", "live", "scopedLive", "flakyTest", "layer", "prop"] as const
const key = Symbol.for("kairos/test/effectVitestIt")
const store = globalThis as { [key]?: Partial<Record<(typeof methods)[number], unknown>> }

const saved = store[key]
if (saved === undefined) store[key] = Object.fromEntries(methods.map((m) => [m, it[m]]))
else Object.assign(it, saved)
