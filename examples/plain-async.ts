/**
 * kairos with async functions only, no Effect: `npm run example examples/plain-async.ts`.
 * Uses DATABASE_URL, or a throwaway embedded Postgres.
 */
import { Kairos, Schedule } from "kairos"
import { EmbeddedPostgres } from "kairos/dev"

await EmbeddedPostgres.withDatabaseUrl(async (url) => {
  const kairos = await Kairos.create({ url, workers: 2, interval: "1 second" })

  await kairos.register("greet", async (job) => {
    const { name } = JSON.parse(job.payload) as { name: string }
    console.log(`hello, ${name} (attempt ${job.attempt})`)
    return { greeted: name }
  })
  await kairos.defineJobs([
    { name: "tick", taskType: "greet", schedule: Schedule.interval({ every: "1 second" }), payload: { name: "clock" } }
  ])
  await kairos.enqueue({ taskType: "greet", payload: JSON.stringify({ name: "Ada" }) })
  await kairos.start()
  await new Promise((resolve) => setTimeout(resolve, Number(process.env["KAIROS_EXAMPLE_SECONDS"] ?? 3) * 1000))
  console.log(await kairos.stats())
  await kairos.stop()
})
process.exit(0)
