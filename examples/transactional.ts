/**
 * Transactional handlers with the Promise API: `npm run example examples/transactional.ts`.
 * Each charge writes its ledger row through `tx`, inside the transaction kairos records the execution in: a failed
 * attempt's row is rolled back with it, so the ledger holds exactly one row per successful execution.
 * Uses DATABASE_URL (in a schema of its own, `kairos_example_tx`, dropped at the end), or a throwaway embedded Postgres.
 */
import { Kairos } from "kairos"
import { EmbeddedPostgres } from "kairos/dev"
import pg from "pg"

const schema = "kairos_example_tx"

await EmbeddedPostgres.withDatabaseUrl(async (url) => {
  const db = new pg.Pool({ connectionString: url, max: 1 })
  // A pool reports a connection the server ends while idle as an 'error' event, which crashes the process unless
  // handled: a restart of the server, or this one stopping at the end (pool.end() resolves before its connection is
  // closed). The next query reconnects.
  db.on("error", () => {})
  try {
    await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    const kairos = await Kairos.create({ url, schema, workers: 4, interval: "200 millis" })
    // The application's own table, beside kairos's.
    await db.query(`CREATE TABLE ${schema}.ledger (order_id text NOT NULL, cents int NOT NULL)`)

    await kairos.register(
      "charge",
      async (job, tx) => {
        const { order, cents } = JSON.parse(job.payload) as { order: string; cents: number }
        await tx.query(`INSERT INTO ${schema}.ledger (order_id, cents) VALUES ($1, $2)`, [order, cents])
        // Thrown after the write: the write is rolled back, the failure recorded, the item retried.
        if (order === "B-2" && job.attempt === 1) throw new Error("card network timeout")
        if (cents <= 0) throw new Error(`refused: ${cents} cents`)
        console.log(`charged ${order}: ${cents} cents (attempt ${job.attempt})`)
      },
      { transactional: true, retry: { attempts: 2, backoff: "200ms" } }
    )
    await kairos.start()
    for (const [order, cents] of [
      ["A-1", 1200],
      ["B-2", 800],
      ["C-3", -500]
    ] as const) {
      await kairos.enqueue({ taskType: "charge", payload: JSON.stringify({ order, cents }) })
      await kairos.drain({ timeout: "30 seconds" })
    }
    await kairos.stop()

    const executions = await db.query<{ order_id: string; status: string; error_msg: string }>(
      `SELECT payload::json->>'order' AS order_id, status, error_msg FROM ${schema}.processed_items ORDER BY id`
    )
    console.log("executions:")
    for (const e of executions.rows) console.log(`  ${e.order_id}  ${e.status}${e.error_msg ? `  ${e.error_msg}` : ""}`)
    const ledger = await db.query<{ order_id: string; cents: number }>(
      `SELECT order_id, cents FROM ${schema}.ledger ORDER BY order_id`
    )
    console.log("ledger:")
    for (const row of ledger.rows) console.log(`  ${row.order_id}  ${row.cents}`)
    await db.query(`DROP SCHEMA ${schema} CASCADE`)
  } finally {
    await db.end()
  }
})
process.exit(0)
