/**
 * Module resolution hooks for a `--tasks` module: a bare import it cannot resolve from where it lives ("kairos",
 * "effect"... in a file outside any project that installed them) resolves from kairos's own package instead, so the
 * tasks module shares the running CLI's kairos and Effect. Registered with `module.register` by `importTasks`.
 */
import type { ResolveHook } from "node:module"

/** A bare specifier ("kairos", "effect/Effect"): not relative, absolute, or with a scheme such as node: or file:. */
export const bare = (specifier: string) => !/^(?:[./]|[a-z][a-z0-9+.-]*:)/i.test(specifier)

export const resolve: ResolveHook = async (specifier, context, nextResolve) => {
  try {
    return await nextResolve(specifier, context)
  } catch (error) {
    if (!bare(specifier) || (error as { code?: unknown }).code !== "ERR_MODULE_NOT_FOUND") throw error
    return nextResolve(specifier, { ...context, parentURL: import.meta.url })
  }
}
