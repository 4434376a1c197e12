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

  describe("errorMessage on hostile values: always a string, never a throw", () => {
    const throwing = () => {
      throw new Error("trap")
    }
    const messageGetterThrows = Object.defineProperty(new Error("hidden"), "message", { get: throwing })
    const everythingThrows = new Proxy(
      {},
      { get: throwing, has: throwing, getPrototypeOf: throwing, ownKeys: throwing }
    )
    const revocable = Proxy.revocable({}, {})
    revocable.revoke()
    it.each([
      ["an Error whose message getter throws", messageGetterThrows, "Error"],
      [
        "an Error whose message getter and toString throw",
        Object.defineProperties(new Error("x"), { message: { get: throwing }, name: { get: throwing } }),
        "a thrown object that cannot be read"
      ],
      [
        "an object whose toString throws",
        { toString: throwing, toJSON: throwing },
        "a thrown object that cannot be read"
      ],
      ["a Proxy that throws on every access", everythingThrows, "a thrown object that cannot be read"],
      ["a revoked Proxy", revocable.proxy, "a thrown object that cannot be read"],
      ["a symbol", Symbol("why"), "Symbol(why)"],
      ["a bigint", 10n, "10"],
      ["null", null, "null"],
      ["undefined", undefined, "undefined"],
      ["a Cause of a hostile value", Cause.die(everythingThrows), undefined]
    ])("%s", (_name, value, expected) => {
      const message = Result.errorMessage(value)
      expect(typeof message).toBe("string")
      if (expected !== undefined) expect(message).toBe(expected)
      expect(() => Result.failure(value)).not.toThrow()
    })
  })

  it("cuts a message longer than 64 KiB and says how long it was", () => {
    const huge = "x".repeat(10 * 1024 * 1024)
    const message = Result.errorMessage(new Error(huge))
    expect(message.length).toBeLessThanOrEqual(Result.MAX_MESSAGE_CHARS)
    expect(message).toBe(`${"x".repeat(Result.MAX_MESSAGE_CHARS - 1024)}… (truncated: 10485760 characters)`)
    // A message given explicitly is bounded the same way.
    expect((Result.failure(null, huge) as Result.Failure).message).toBe(message)
    // A cut message with a short prefix is not cut again: the count stays the original's.
    expect((Result.failure(null, `died: ${message}`) as Result.Failure).message).toBe(`died: ${message}`)
    // At the limit nothing is cut.
    const exact = "y".repeat(Result.MAX_MESSAGE_CHARS)
    expect(Result.errorMessage(exact)).toBe(exact)
    // Never half a surrogate pair at the cut.
    const emoji = "a".repeat(Result.MAX_MESSAGE_CHARS - 1025) + "😀".repeat(1000)
    expect(Result.errorMessage(emoji)).toBe(
      `${"a".repeat(Result.MAX_MESSAGE_CHARS - 1025)}… (truncated: 66511 characters)`
    )
  })

  it("replaces NUL, which Postgres text cannot hold, in messages and outputs", () => {
    expect(Result.errorMessage(new Error("a\u0000b"))).toBe("a\ufffdb")
    expect(JSON.parse(Result.encodeOutput({ "k\u0000": "x\u0000y" }))).toEqual({ "k\ufffd": "x\ufffdy" })
    // The text "\u0000" (a backslash, then u0000) is kept as it is.
    expect(JSON.parse(Result.encodeOutput({ text: "\\u0000", both: "\\\u0000" }))).toEqual({
      text: "\\u0000",
      both: "\\\ufffd"
    })
  })

  it("replaces a lone surrogate, which jsonb refuses, in outputs; a pair and the text \\ud800 stay", () => {
    expect(JSON.parse(Result.encodeOutput({ lone: "a\ud800b", low: "\udc00", pair: "\ud83d\ude00" }))).toEqual({
      lone: "a\ufffdb",
      low: "\ufffd",
      pair: "\ud83d\ude00"
    })
    expect(JSON.parse(Result.encodeOutput({ text: "\\ud800" }))).toEqual({ text: "\\ud800" })
  })

  it("replaces an output JSON longer than 1 MiB by a note saying how large it was", () => {
    const big = { data: "x".repeat(10 * 1024 * 1024) }
    const stored = Result.encodeOutput(big)
    expect(JSON.parse(stored)).toEqual({
      tooLarge: { characters: 10 * 1024 * 1024 + 11, limit: Result.MAX_OUTPUT_CHARS }
    })
    const fits = { data: "x".repeat(Result.MAX_OUTPUT_CHARS - 11) }
    expect(Result.encodeOutput(fits)).toBe(JSON.stringify(fits))
  })
})
