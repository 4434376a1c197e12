import { describe, expect, it } from "@effect/vitest"
import { Cause, Data } from "effect"
import { Result } from "../../src/index.js"

class PaymentDeclined extends Data.TaggedError("PaymentDeclined")<{ readonly message: string }> {}

describe("Result", () => {
  it("failed is true exactly when there is an error", () => {
    expect(Result.success({ sent: 3 }).failed).toBe(false)
    expect(Result.success().failed).toBe(false)
    expect(Result.failure(new Error("boom")).failed).toBe(true)
    expect(Result.isFailure(Result.failure("x"))).toBe(true)
    expect(Result.isFailure(Result.success(1))).toBe(false)
  })

  it("takes a readable message from whatever failed", () => {
    expect(Result.errorMessage(new Error("boom"))).toBe("boom")
    expect(Result.errorMessage(new PaymentDeclined({ message: "card expired" }))).toBe("PaymentDeclined: card expired")
    expect(Result.errorMessage("plain text")).toBe("plain text")
    expect(Result.errorMessage({ code: 42 })).toBe(`{"code":42}`)
    expect(Result.errorMessage(Cause.fail(new Error("inside a cause")))).toContain("inside a cause")
    expect((Result.failure(new Error("boom")) as Result.Failure).message).toBe("boom")
  })

  it("encodes the output as JSON, {} when there is none", () => {
    expect(Result.encodeOutput(undefined)).toBe("{}")
    expect(Result.encodeOutput({ a: 1 })).toBe(`{"a":1}`)
    expect(Result.encodeOutput(null)).toBe("null")
    expect(Result.encodeOutput(7)).toBe("7")
    const cyclic: Record<string, unknown> = {}
    cyclic["self"] = cyclic
    expect(JSON.parse(Result.encodeOutput(cyclic))).toHaveProperty("unserializable")
    expect(JSON.parse(Result.encodeOutput(10n))).toHaveProperty("unserializable")
  })
})
