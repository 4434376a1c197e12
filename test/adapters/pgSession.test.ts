/**
 * The connections kairos opens bound how long a frozen process can hold locks: a statement timeout and an
 * idle-in-transaction timeout, set by `PgKairos.clientLayer` without session state (PgSession), here on a direct
 * connection; test/integration/pgbouncer.test.ts runs the same tests through PgBouncer. Integration: a real
 * Postgres, wall time (about 4 s).
 */
import { describe, expect, it } from "vitest"
import { beginFor } from "../../src/adapters/postgres/PgTransaction.js"
import { beginWith, limitsOf, statementTimeoutSet } from "../../src/adapters/postgres/PgSession.js"
import { databaseUrl } from "../support/database.js"
import { sessionLimitTests } from "../support/sessionLimits.js"

describe("PgKairos.clientLayer's session limits, on a direct connection", () => {
  sessionLimitTests(databaseUrl, databaseUrl)
})

describe("limitsOf", () => {
  it("takes the limits out of the URL's query (they win over the options), keeps the rest, and defaults to 1 min / 30 s", () => {
    expect(limitsOf("postgres://u:p@h:5432/db", {})).toEqual({
      url: "postgres://u:p@h:5432/db",
      limits: { statementTimeoutMs: 60_000, idleInTransactionTimeoutMs: 30_000 }
    })
    expect(
      limitsOf("postgres://h/db?sslmode=require&statement_timeout=5000&application_name=x", {
        statementTimeout: "1 second",
        idleInTransactionTimeout: 0
      })
    ).toEqual({
      url: "postgres://h/db?sslmode=require&application_name=x",
      limits: { statementTimeoutMs: 5000, idleInTransactionTimeoutMs: 0 }
    })
    expect(limitsOf("postgres://h/db?idle_in_transaction_session_timeout=0&statement_timeout=0", {})).toEqual({
      url: "postgres://h/db",
      limits: { statementTimeoutMs: 0, idleInTransactionTimeoutMs: 0 }
    })
  })

  it("begins a transaction with both limits in the BEGIN's own round trip", () => {
    expect(beginWith({ statementTimeoutMs: 60_000, idleInTransactionTimeoutMs: 30_000 })).toBe(
      "BEGIN; SET LOCAL statement_timeout = 60000; SET LOCAL idle_in_transaction_session_timeout = 30000"
    )
  })
})

describe("statementTimeoutSet: the limit the client reads off a transaction's statements, to time them", () => {
  it("reads kairos's BEGINs and a migration's SET LOCAL; trusts nothing it cannot read; ignores other statements", () => {
    expect(statementTimeoutSet(beginWith({ statementTimeoutMs: 60_000, idleInTransactionTimeoutMs: 30_000 }))).toBe(
      60_000
    )
    // A transactional execution's: its handler's timeout and 5 s, or none.
    expect(statementTimeoutSet(beginFor(1_000))).toBe(6_000)
    expect(statementTimeoutSet(beginFor(0))).toBe(0)
    expect(statementTimeoutSet("SET LOCAL statement_timeout = 0")).toBe(0)
    // Units, a session SET, set_config, a second setting in one text: not read, so the transaction is not timed.
    expect(statementTimeoutSet("SET LOCAL statement_timeout = '5min'")).toBeUndefined()
    expect(statementTimeoutSet("SET statement_timeout = 1000")).toBeUndefined()
    expect(statementTimeoutSet("SELECT set_config('statement_timeout', '0', true)")).toBeUndefined()
    expect(statementTimeoutSet("SET LOCAL statement_timeout = 10; SET LOCAL statement_timeout = 0")).toBeUndefined()
    expect(statementTimeoutSet("SELECT 1")).toBeNull()
    expect(statementTimeoutSet("ROLLBACK")).toBeNull()
  })
})
