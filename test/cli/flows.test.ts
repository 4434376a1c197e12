/**
 * The command line's side of workflows: `kairos enqueue … --after`, and outputs in `kairos processed`.
 * Integration: real processes against a real Postgres.
 */
import { spawn } from "node:child_process"
import fs from "node:fs/promises"
import os from "node:os"
import path from "node:path"
import { describe, expect, it } from "vitest"
import { bin, db, json, query, schema, url, useCli } from "../support/cli.js"
import { exited, projectRoot } from "../support/process.js"
import { until } from "../support/workers.js"

useCli()

describe("kairos enqueue --after, kairos processed", () => {
  it(
    "an item waits for the ids --after names; a cancelled one dooms it; bad ids are one clear line",
    { timeout: 90_000 },
    async () => {
      await json(["migrate"])
      const a = (await json(["enqueue", "render_pdf", `{"order":"A-1"}`])) as { id: string }
      const human = await db(["enqueue", "send_invoice", "A-1", "--after", `${a.id}`])
      expect(human.stderr).toBe("")
      expect(human.code).toBe(0)
      const waiter = /^enqueued (\d+) \(send_invoice, priority 0, max runs 1, thread 0, after (\d+)\)\n$/.exec(
        human.stdout
      )
      expect(waiter?.[2]).toBe(a.id)
      const b = waiter![1]!
      const c = (await json(["enqueue", "archive", "", "--after", `${a.id}, ${b}`])) as Record<string, unknown>
      expect(c).toMatchObject({ task_type: "archive", status: "pending", existing: false })

      // Not claimable while it waits: not in queue_items. `kairos queue` lists it after the queue, as waiting.
      const queue = (await json(["queue"])) as Array<Record<string, unknown>>
      expect(queue.map((i) => [i["id"], i["status"]])).toEqual([
        [a.id, "pending"],
        [b, "waiting"],
        [String(c["id"]), "waiting"]
      ])
      expect(queue[2]).toMatchObject({ task_type: "archive", after: [a.id, b], waiting_on: 2 })
      const listed = await db(["queue"])
      expect(listed.stdout).toMatch(
        new RegExp(
          `\\n\\nwaiting for other items:\\nid +task_type +after +waiting_on +created_at\\n${b} +send_invoice +${a.id} +1 +\\S+\\n${c["id"]} +archive +${a.id},${b} +2 +\\S+\\n$`
        )
      )

      expect((await db(["cancel", a.id])).code).toBe(0)
      const processed = (await json(["processed"])) as Array<Record<string, unknown>>
      expect(processed.map((p) => [p["queue_item_id"], p["status"], p["error_msg"]])).toEqual([
        [String(c["id"]), "error", `not run: it waited for item ${a.id}, which was cancelled`],
        [b, "error", `not run: it waited for item ${a.id}, which was cancelled`]
      ])

      const notAnId = await db(["enqueue", "x", "", "--after", "12,abc"])
      expect(notAnId.code).not.toBe(0)
      expect(notAnId.stderr).toBe(
        `kairos: --after takes item ids separated by commas (e.g. --after 12,13), got "12,abc"\n`
      )
      const unknown = await db(["enqueue", "x", "", "--after", "987654321"])
      expect(unknown.code).not.toBe(0)
      expect(unknown.stderr).toMatch(/^kairos: after names item 987654321, which is unknown .*\n$/)
      expect(unknown.stderr.split("\n")).toHaveLength(2)
    }
  )

  it("kairos processed shows what a handler returned, in the table and in --json", { timeout: 60_000 }, async () => {
    await json(["migrate"])
    // A success's output reaches the log through the record's error column (moved by the log's trigger).
    await query(
      `INSERT INTO $schema.processed_items
         (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
       VALUES (424242, 'render_pdf', '{}', 'ok', '{"pdf":"invoices/A-1.pdf","pages":2}', now(), now(), 3),
              (424243, 'render_pdf', '{}', 'ok', '', now(), now(), 3)`
    )
    const rows = (await json(["processed", "2"])) as Array<Record<string, unknown>>
    expect(rows.map((r) => [r["queue_item_id"], r["error_msg"], r["output"]])).toEqual([
      ["424243", "", null],
      ["424242", "", { pdf: "invoices/A-1.pdf", pages: 2 }]
    ])
    const table = await db(["processed", "2"])
    expect(table.stdout.split("\n")[0]!.split(/\s+/)).toEqual([
      "id",
      "item",
      "task_type",
      "status",
      "duration_ms",
      "started_at",
      "error",
      "output"
    ])
    expect(table.stdout).toContain(`{"pdf":"invoices/A-1.pdf","pages":2}`)
  })

  it(
    "kairos worker runs an item after the one it waits for; its handler reads that one's output",
    { timeout: 90_000 },
    async () => {
      await json(["migrate"])
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), "kairos-flow-"))
      const tasks = path.join(dir, "tasks.mjs")
      await fs.writeFile(
        tasks,
        `export default {
  flow_render: (job) => ({ pdf: job.payload + ".pdf" }),
  flow_send: (job) => ({ got: job.inputs })
}
`
      )
      const render = (await json(["enqueue", "flow_render", "A-1"])) as { id: string }
      const send = (await json(["enqueue", "flow_send", "A-1", "--after", render.id])) as { id: string }
      const worker = spawn(
        process.execPath,
        [bin, "worker", "--tasks", tasks, "--database-url", url, "--schema", schema, "--interval", "500ms", "--quiet"],
        { cwd: projectRoot, stdio: ["ignore", "pipe", "pipe"] }
      )
      try {
        await until(
          async () =>
            (await query(`SELECT 1 FROM $schema.processed_items WHERE queue_item_id = $1`, schema, [send.id]))
              .length === 1,
          60_000,
          "the waiting item to run"
        )
      } finally {
        worker.kill("SIGTERM")
        await exited(worker)
        await fs.rm(dir, { recursive: true, force: true })
      }
      const rows = (await json(["processed", "10"])) as Array<Record<string, unknown>>
      const byItem = new Map(rows.map((r) => [r["queue_item_id"], r]))
      expect(byItem.get(render.id)).toMatchObject({ status: "ok", output: { pdf: "A-1.pdf" } })
      expect(byItem.get(send.id)).toMatchObject({ status: "ok", output: { got: { [render.id]: { pdf: "A-1.pdf" } } } })
      expect(Number(byItem.get(send.id)!["id"])).toBeGreaterThan(Number(byItem.get(render.id)!["id"]))
    }
  )
})
