import { describe, expect, it } from "@effect/vitest"
import * as Flow from "../../src/domain/Flow.js"
import { InvalidFlowError } from "../../src/domain/errors.js"

const refusal = (steps: ReadonlyArray<Flow.Keyed>) => {
  try {
    Flow.order(steps)
  } catch (e) {
    return e
  }
  return undefined
}

describe("Flow.order", () => {
  it("places each step after what it waits for, keeping the given order where the graph allows", () => {
    const ordered = Flow.order([
      { key: "send", after: ["render", "charge", "render"] },
      { key: "render", after: ["fetch"] },
      { key: "fetch" },
      { key: "charge" }
    ])
    expect(ordered.map((s) => s.key)).toEqual(["fetch", "charge", "render", "send"])
    expect(ordered[3]!.after).toEqual(["render", "charge"])
  })

  it("refuses a cycle (naming its steps), an unknown key, a key used twice and an empty key", () => {
    const cycle = refusal([{ key: "a", after: ["b"] }, { key: "b", after: ["a"] }, { key: "c" }])
    expect(cycle).toBeInstanceOf(InvalidFlowError)
    expect(cycle).toMatchObject({ reason: "cycle", message: 'flow: steps "a", "b" wait for each other (a cycle)' })
    expect(refusal([{ key: "a", after: ["a"] }])).toMatchObject({ reason: "cycle" })
    expect(refusal([{ key: "a", after: ["z"] }])).toMatchObject({
      reason: "unknownKey",
      message: 'flow: step "a" waits for "z", which no step is named'
    })
    expect(refusal([{ key: "a" }, { key: "a" }])).toMatchObject({ reason: "duplicateKey" })
    expect(refusal([{ key: "" }])).toMatchObject({ reason: "unknownKey" })
  })

  it("orders a 10,000-step graph with fan-out and fan-in", () => {
    const steps: Array<Flow.Keyed> = [{ key: "root" }]
    for (let i = 0; i < 9_998; i++)
      steps.push({ key: `s${i}`, after: i < 100 ? ["root"] : [`s${i - 100}`, `s${i - 99}`] })
    steps.push({ key: "sink", after: Array.from({ length: 100 }, (_, i) => `s${9_898 + i}`) })
    const ordered = Flow.order(steps.slice().reverse())
    const at = new Map(ordered.map((s, i) => [s.key, i]))
    for (const s of ordered) for (const k of s.after) expect(at.get(k)!).toBeLessThan(at.get(s.key)!)
  })
})
