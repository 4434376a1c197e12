/**
 * Flow limits from the Promise API (`Kairos.create`) on Postgres: set, list, clear, a bad limit refused, and a
 * group limit obeyed by the instance's runner. Integration: a real Postgres, wall time.
 */
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { InvalidLimitError, Kairos } from "../../src/index.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"

const schema = uniqueSchemaName("limitspromise")
afterAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl() })
  await client.connect()
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await client.end()
})

describe("Kairos.create: flow limits", () => {
  it("setLimit, limits, clearLimit; a bad limit rejects with InvalidLimitError; ordered groups run in order", async () => {
    const kairos = await Kairos.create({ url: databaseUrl(), schema, workers: 8, interval: "30 seconds" })
    try {
      expect(await kairos.setLimit({ taskType: "events", concurrency: 1, perGroup: true })).toEqual({
        taskType: "events",
        concurrency: 1,
        perGroup: true,
        rate: null,
        ratePerGroup: false
      })
      await kairos.setLimit({ taskType: "mails", rate: 100, per: "1 minute", ratePerGroup: true })
      expect(await kairos.limits()).toEqual([
        { taskType: "events", concurrency: 1, perGroup: true, rate: null, ratePerGroup: false },
        {
          taskType: "mails",
          concurrency: null,
          perGroup: false,
          rate: { limit: 100, perMs: 60_000 },
          ratePerGroup: true
        }
      ])
      await expect(kairos.setLimit({ taskType: "x", concurrency: 2, ratePerGroup: true })).rejects.toMatchObject({
        _tag: "InvalidLimitError",
        field: "ratePerGroup"
      })
      await expect(kairos.setLimit({ taskType: "x", concurrency: 0 })).rejects.toBeInstanceOf(InvalidLimitError)
      expect(await kairos.clearLimit("mails")).toBe(true)
      expect(await kairos.clearLimit("mails")).toBe(false)

      const seen: Array<string> = []
      let running = 0
      let most = 0
      const perGroup = new Map<string, number>()
      const groups = new Map<string, string | null>()
      await kairos.register("events", async (job) => {
        // The handler reads its item's group on the job.
        groups.set(job.payload, job.group)
        const group = job.payload.slice(0, 1)
        perGroup.set(group, (perGroup.get(group) ?? 0) + 1)
        running++
        most = Math.max(most, perGroup.get(group)!)
        await new Promise((resolve) => setTimeout(resolve, 5))
        seen.push(job.payload)
        perGroup.set(group, perGroup.get(group)! - 1)
        running--
      })
      // enqueue returns the item with its group.
      expect(await kairos.enqueue({ taskType: "events", payload: "a0", group: "a" })).toMatchObject({
        payload: "a0",
        group: "a"
      })
      await kairos.enqueueMany(
        ["a", "b", "c"]
          .flatMap((g) => Array.from({ length: 5 }, (_, i) => ({ taskType: "events", payload: `${g}${i}`, group: g })))
          .filter((i) => i.payload !== "a0")
      )
      await kairos.start()
      await kairos.drain({ timeout: "30 seconds" })
      expect(most).toBe(1)
      expect(running).toBe(0)
      expect(groups.size).toBe(15)
      for (const [payload, group] of groups) expect(group).toBe(payload.slice(0, 1))
      for (const g of ["a", "b", "c"])
        expect(seen.filter((p) => p.startsWith(g))).toEqual([0, 1, 2, 3, 4].map((i) => `${g}${i}`))
    } finally {
      await kairos.stop()
    }
  })
})
