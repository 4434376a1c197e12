/**
 * The connections kairos opens bound how long a frozen process can hold locks: a statement timeout and an
 * idle-in-transaction timeout, set by `PgKairos.clientLayer` without session state (PgSession), here on a direct
 * connection; test/integration/pgbouncer.test.ts runs the same tests through PgBouncer. Integration: a real
 * Postgres, wall time (about 4 s).
 */
import { describe } from "vitest"
import { databaseUrl } from "../support/database.js"
import { sessionLimitTests } from "../support/sessionLimits.js"

describe("PgKairos.clientLayer's session limits, on a direct connection", () => {
  sessionLimitTests(databaseUrl, databaseUrl)
})
