import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { Job, unsafeMakeJob } from "../../src/domain/Job.js"

const fields = {
  id: "42",
  kind: "queue" as const,
  name: "email",
  taskType: "email",
  payload: '{"to":"a@example.com"}',
  scheduledFor: new Date("2026-12-02T08:30:00.000Z"),
  attempt: 2,
  metadata: { priority: 5, thread: 1, maxRuns: 1, leaseId: "-42" },
  inputs: { render: { pages: 3 } },
  group: "customer-42"
}

describe("unsafeMakeJob", () => {
  it("builds the Job the class's constructor builds", () => {
    const made = unsafeMakeJob(fields)
    const constructed = new Job(fields)
    expect(made).toBeInstanceOf(Job)
    expect(Schema.is(Job)(made)).toBe(true)
    expect(Object.getPrototypeOf(made)).toBe(Object.getPrototypeOf(constructed))
    expect(Object.keys(made)).toEqual(Object.keys(constructed))
    expect(JSON.stringify(made)).toBe(JSON.stringify(constructed))
    expect(String(made)).toBe(String(constructed))
    expect(Schema.encodeSync(Job)(made)).toEqual(Schema.encodeSync(Job)(constructed))
  })

  it("holds the fields it was given, as the constructor does", () => {
    const made = unsafeMakeJob(fields)
    expect({ ...made }).toEqual({ ...new Job(fields) })
    expect(made.scheduledFor).toBe(fields.scheduledFor)
    expect(made.metadata).toEqual(fields.metadata)
  })
})
