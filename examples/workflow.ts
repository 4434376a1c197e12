/**
 * Workflows with the Promise API: `npm run example examples/workflow.ts`.
 * An order's flow: the PDF is rendered and the payment captured side by side, the invoice is sent once both
 * finished, reading their outputs as `job.inputs`. A second order's capture fails for good: its invoice is not sent,
 * and is recorded as not run, naming the step it waited for.
 * Uses DATABASE_URL (in a schema of its own, `kairos_example_flow`, dropped at the end), or a throwaway embedded
 * Postgres.
 */
import { Kairos } from "kairos"
import { EmbeddedPostgres } from "kairos/dev"
import pg from "pg"

const schema = "kairos_example_flow"

await EmbeddedPostgres.withDatabaseUrl(async (url) => {
  const db = new pg.Pool({ connectionString: url, max: 1 })
  // A pool reports a connection the server ends while idle as an 'error' event, which crashes the process unless
  // handled: a restart of the server, or this one stopping at the end (pool.end() resolves before its connection is
  // closed). The next query reconnects.
  db.on("error", () => {})
  try {
    await db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    const kairos = await Kairos.create({ url, schema, workers: 4, interval: "200 millis" })

    await kairos.register("render_pdf", async (job) => {
      const { order } = JSON.parse(job.payload) as { order: string }
      return { pdf: `invoices/${order}.pdf`, pages: 2 }
    })
    await kairos.register("capture_payment", async (job) => {
      const { order, cents } = JSON.parse(job.payload) as { order: string; cents: number }
      if (cents <= 0) throw new Error(`card declined: ${cents} cents`)
      return { charge: `ch_${order}`, cents }
    })
    await kairos.register("send_invoice", async (job) => {
      const pdf = job.inputs["render"] as { pdf: string }
      const payment = job.inputs["capture"] as { charge: string; cents: number }
      console.log(`send_invoice ${job.payload}: ${pdf.pdf} for ${payment.charge} (${payment.cents} cents)`)
      return { sent: true }
    })

    for (const [order, cents] of [
      ["A-1", 1200],
      ["B-2", -1]
    ] as const) {
      const payload = JSON.stringify({ order, cents })
      const ids = await kairos.enqueueFlow([
        { key: "render", taskType: "render_pdf", payload },
        { key: "capture", taskType: "capture_payment", payload },
        { key: "send", taskType: "send_invoice", payload: order, after: ["render", "capture"] }
      ])
      console.log(`order ${order}: ${JSON.stringify(ids)}`)
    }
    await kairos.start()
    await kairos.drain({ timeout: "30 seconds" })
    await kairos.stop()

    const executions = await db.query<{
      id: string
      task_type: string
      status: string
      error_msg: string
      output: unknown
    }>(
      `SELECT queue_item_id::text AS id, task_type, status, error_msg, output FROM ${schema}.processed_items ORDER BY id`
    )
    console.log("executions:")
    for (const e of executions.rows)
      console.log(
        `  ${e.id.padEnd(3)} ${e.task_type.padEnd(16)} ${e.status.padEnd(7)}` +
          (e.error_msg ? e.error_msg : JSON.stringify(e.output))
      )
    await db.query(`DROP SCHEMA ${schema} CASCADE`)
  } finally {
    await db.end()
  }
})
process.exit(0)
