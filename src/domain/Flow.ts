/**
 * Items that wait for other items, and flows: graphs of items enqueued together, each step named by a key and
 * waiting for the steps its `after` names. Pure: the checks a graph passes before anything is written.
 */
import { InvalidFlowError } from "./errors.js"

/** What a flow's step must have: its key, and the keys of the steps it waits for. */
export interface Keyed {
  readonly key: string
  readonly after?: ReadonlyArray<string> | undefined
}

/** A flow's step in order, with its `after` keys deduplicated. */
export interface OrderedStep<Step> {
  readonly key: string
  readonly step: Step
  readonly after: ReadonlyArray<string>
}

/**
 * Checks a flow and orders it: keys non-empty and unique, every `after` key a step of the flow, no cycle. The order
 * keeps the given order wherever the graph allows (a step is placed as soon as all it waits for are).
 */
export const order = <Step extends Keyed>(steps: ReadonlyArray<Step>): ReadonlyArray<OrderedStep<Step>> => {
  const byKey = new Map<string, OrderedStep<Step>>()
  for (const step of steps) {
    if (typeof step.key !== "string" || step.key.length === 0)
      throw new InvalidFlowError({ reason: "unknownKey", message: "flow: every step needs a non-empty key" })
    if (byKey.has(step.key))
      throw new InvalidFlowError({
        reason: "duplicateKey",
        message: `flow: the key ${JSON.stringify(step.key)} names two steps`
      })
    byKey.set(step.key, { key: step.key, step, after: [...new Set(step.after ?? [])] })
  }
  for (const step of byKey.values())
    for (const key of step.after)
      if (!byKey.has(key))
        throw new InvalidFlowError({
          reason: "unknownKey",
          message: `flow: step ${JSON.stringify(step.key)} waits for ${JSON.stringify(key)}, which no step is named`
        })
  // Kahn's algorithm, taking ready steps in the given order.
  const waitingOn = new Map<string, number>()
  const waiters = new Map<string, Array<string>>()
  for (const step of byKey.values()) {
    waitingOn.set(step.key, step.after.length)
    for (const key of step.after) {
      const list = waiters.get(key) ?? []
      list.push(step.key)
      waiters.set(key, list)
    }
  }
  const ordered: Array<OrderedStep<Step>> = []
  const ready = [...byKey.values()].filter((s) => s.after.length === 0).map((s) => s.key)
  for (let i = 0; i < ready.length; i++) {
    const key = ready[i]!
    ordered.push(byKey.get(key)!)
    for (const waiter of waiters.get(key) ?? []) {
      const left = waitingOn.get(waiter)! - 1
      waitingOn.set(waiter, left)
      if (left === 0) ready.push(waiter)
    }
  }
  if (ordered.length < byKey.size) {
    const stuck = [...byKey.keys()].filter((k) => waitingOn.get(k)! > 0)
    throw new InvalidFlowError({
      reason: "cycle",
      message: `flow: steps ${stuck
        .slice(0, 5)
        .map((k) => JSON.stringify(k))
        .join(", ")}${stuck.length > 5 ? ", …" : ""} wait for each other (a cycle)`
    })
  }
  return ordered
}

/** The message of a step that never ran because an item it waited for did not finish successfully. */
export const notRunMessage = (cause: string, how: "failed" | "was cancelled" | "did not run"): string =>
  `not run: it waited for item ${cause}, which ${how}`

/** Ids an `after` names: each once, in the order given. */
export const normalizeAfter = (after: ReadonlyArray<string> | undefined): ReadonlyArray<string> => [
  ...new Set((after ?? []).map(String))
]

/** The unique key a released item carries in Postgres (it tells a claim that the item has inputs); never shown. */
export const RELEASED_KEY_PREFIX = "kairos:after:"
