/**
 * A graph of items that wait for other items: a flow of N steps with fan-out and fan-in, enqueued in one call and
 * drained by claims of 20, beside N plain items drained the same way, and the claim of plain items while the whole
 * graph waits in their schema. See bench/systems/flow.ts. Not a test: nothing is asserted.
 *
 *   npm run bench:flow                  10,000 steps
 *   npm run bench:flow -- --steps 2000
 *
 * The database is DATABASE_URL when set, else a throwaway embedded Postgres.
 */
import { parseArgs } from "node:util"
import { EmbeddedPostgres } from "../src/dev.js"
import type { Context } from "./lib/types.js"
import { adminPool, dropSchema } from "./lib/util.js"
import { flowGraph } from "./systems/flow.js"

const { values } = parseArgs({
  options: { steps: { type: "string", default: "10000" }, schema: { type: "string", default: "kbench_flow" } }
})
const steps = Number(values.steps)
if (!Number.isInteger(steps) || steps < 10) {
  process.stderr.write(`--steps: a whole number of at least 10, not ${values.steps}\n`)
  process.exit(2)
}
const log = (message: string) => console.error(message)

const main = async (url: string) => {
  const admin = adminPool(url)
  const ctx: Context = {
    url,
    admin,
    schema: values.schema,
    sizes: { items: steps, singles: 0, samples: 0, drainCapMs: 0, allCandidates: false },
    log
  }
  try {
    const figures = await flowGraph(ctx, steps)
    for (const [name, figure] of Object.entries(figures))
      console.log(
        `${name.padEnd(18)} ${figure.value.toFixed(name.endsWith("ate") ? 0 : 2).padStart(10)}${figure.capped === true ? "*" : ""}` +
          `  ${figure.detail ?? ""}`
      )
  } finally {
    for (const schema of [values.schema, `${values.schema}_plain`])
      await dropSchema(admin, schema).catch(() => undefined)
    await admin.end()
  }
}

EmbeddedPostgres.withDatabaseUrl(main, { log }).then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
