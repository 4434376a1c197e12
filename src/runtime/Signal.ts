/**
 * A wake-up signal: raised from anywhere (plain code on the hot path, a callback, an Effect), awaited by one fiber.
 * It de-duplicates by itself: raised again before it is taken, it stays one signal, and a raise costs nothing then
 * (no allocation, no Effect). A signal raised while nobody waits is kept until it is taken, so none is lost between a
 * look at the state and the wait that follows.
 */
import * as Effect from "effect/Effect"

export interface Signal {
  /** Raises the signal (idempotent until taken); wakes the fiber waiting for it, if any. */
  readonly raise: () => void
  /** Waits until the signal is raised (at once if it is), and takes it. One fiber at a time. */
  readonly take: Effect.Effect<void>
  /** Takes the signal if raised, without waiting: what it announced is about to be looked at anyway. */
  readonly clear: () => void
}

/** A new signal, lowered. */
export const make = (): Signal => {
  let raised = false
  let waiter: (() => void) | undefined
  const take = Effect.async<void>((resume) => {
    if (raised) {
      raised = false
      resume(Effect.void)
      return
    }
    waiter = () => {
      raised = false
      resume(Effect.void)
    }
    return Effect.sync(() => {
      waiter = undefined
    })
  })
  return {
    raise: () => {
      if (raised) return
      raised = true
      const wake = waiter
      if (wake === undefined) return
      waiter = undefined
      wake()
    },
    take,
    clear: () => {
      raised = false
    }
  }
}
