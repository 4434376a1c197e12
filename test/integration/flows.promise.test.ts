/**
 * Workflows through the Promise API (`Kairos.create`) on Postgres: `enqueue({ after })` and `enqueueFlow`, outputs
 * read as `job.inputs`, `drain` waiting for waiting items too, and refusals as kairos's own error.
 * Integration: a real Postgres, wall time.
 */
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { InvalidFlowError, Kairos } from "../../src/index.js"
import { databaseUrl, uniqueSchemaName } from "../support/database.js"

const schemas: Array<string> = []
afterAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl() })
  await client.connect()
  for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await client.end()
})

describe("Kairos.create with workflows", () => {
  it("after and enqueueFlow: each runs after what it waits for, with their outputs; drain waits for all", async () => {
    const schema = uniqueSchemaName("promise_flow")
    schemas.push(schema)
    const kairos = await Kairos.create({ url: databaseUrl(), schema, workers: 4, interval: "30 seconds" })
    try {
      const order: Array<string> = []
      const inputs: Record<string, unknown> = {}
      for (const type of ["a", "b", "c"])
        await kairos.register(type, async (job) => {
          order.push(`${type}:${job.payload}`)
          inputs[`${type}:${job.payload}`] = job.inputs
          await new Promise((resolve) => setTimeout(resolve, 20))
          return { from: `${type}:${job.payload}` }
        })
      const first = await kairos.enqueue({ taskType: "a", payload: "1" })
      const second = await kairos.enqueue({ taskType: "b", payload: "2", after: [first.id] })
      const ids = await kairos.enqueueFlow([
        { key: "last", taskType: "c", payload: "4", after: ["mid"] },
        { key: "mid", taskType: "b", payload: "3" }
      ])
      const many = await kairos.enqueueMany([
        { taskType: "c", payload: "5", after: [second.id, ids["last"]!] },
        { taskType: "a", payload: "6" }
      ])
      expect(many).toHaveLength(2)
      await kairos.start()
      await kairos.drain({ timeout: "30 seconds" })
      expect(order).toHaveLength(6)
      const at = (step: string) => order.indexOf(step)
      expect(at("a:1")).toBeLessThan(at("b:2"))
      expect(at("b:3")).toBeLessThan(at("c:4"))
      expect(at("c:5")).toBeGreaterThan(Math.max(at("b:2"), at("c:4")))
      expect(inputs["b:2"]).toEqual({ [first.id]: { from: "a:1" } })
      expect(inputs["c:4"]).toEqual({ mid: { from: "b:3" } })
      expect(inputs["c:5"]).toEqual({ [second.id]: { from: "b:2" }, [ids["last"]!]: { from: "c:4" } })
      expect(inputs["a:6"]).toEqual({})

      const cycle = await kairos
        .enqueueFlow([
          { key: "x", taskType: "a", after: ["y"] },
          { key: "y", taskType: "a", after: ["x"] }
        ])
        .catch((e: unknown) => e)
      expect(cycle).toBeInstanceOf(InvalidFlowError)
      expect((cycle as InvalidFlowError).reason).toBe("cycle")
      const unknown = await kairos.enqueue({ taskType: "a", after: ["876543210"] }).catch((e: unknown) => e)
      expect(unknown).toBeInstanceOf(InvalidFlowError)
      expect((unknown as InvalidFlowError).message).toMatch(/^after names item 876543210, which is unknown/)
    } finally {
      await kairos.stop()
    }
  })
})
