/**
 * `describe` for the tests that need PgBouncer (see pgbouncer.ts): skipped, saying why, where it is not installed;
 * failing instead when KAIROS_REQUIRE_PGBOUNCER=1 (CI).
 */
import { describe, expect, it } from "vitest"
import { pgbouncerPath } from "./pgbouncer.js"

const required = process.env["KAIROS_REQUIRE_PGBOUNCER"] === "1"

/**
 * `describe` for tests that need PgBouncer. Without it: one skipped test that says why (and a warning line), or, with
 * KAIROS_REQUIRE_PGBOUNCER=1, one failing test.
 */
export const pgbouncerTests = (name: string, body: () => void): void => {
  if (pgbouncerPath !== undefined) {
    describe(name, body)
    return
  }
  const why = "pgbouncer is not installed (apt-get install -y pgbouncer, or set PGBOUNCER_PATH)"
  if (required) {
    describe(name, () => {
      it("has pgbouncer installed (KAIROS_REQUIRE_PGBOUNCER=1)", () => {
        expect.fail(`KAIROS_REQUIRE_PGBOUNCER=1 but ${why}`)
      })
    })
    return
  }
  console.warn(`\n*** ${name}: SKIPPED, ${why}; CI sets KAIROS_REQUIRE_PGBOUNCER=1, which makes it a failure ***\n`)
  describe(name, () => {
    it.skip(`skipped: ${why}`, () => {})
  })
}
