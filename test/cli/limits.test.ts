/**
 * `kairos limits` on the command line, spawned as a real process against a real Postgres: a rate per group set,
 * listed and described; bad combinations refused as usage errors that change nothing; an enqueued item's group in
 * its output. Integration: real processes and wall time.
 */
import { describe, expect, it } from "vitest"
import { db, json, query, useCli } from "../support/cli.js"

useCli()

describe("kairos limits", () => {
  it("a rate per group: set, listed, described; --per-group alone refused; the item's group shown", async () => {
    await json(["migrate"])
    const set = await db(["limits", "set", "mails", "--rate", "10", "--per", "1m", "--per-group"])
    expect(set.stderr).toBe("")
    expect(set.code).toBe(0)
    expect(set.stdout).toBe("limits of mails: rate 10 per 1m per group (every worker obeys them now)\n")
    expect(
      await json(["limits", "set", "events", "--concurrency", "1", "--rate", "2", "--per", "1s", "--per-group"])
    ).toMatchObject({ task_type: "events", concurrency: 1, per_group: true, rate: 2, rate_per_ms: 1000 })
    // Stored as SQL sees it.
    expect(
      await query(
        `SELECT task_type, concurrency, per_group, rate, rate_per_ms::int AS per FROM $schema.queue_limits ORDER BY 1`
      )
    ).toEqual([
      { task_type: "events", concurrency: 1, per_group: true, rate: 2, per: 1000 },
      { task_type: "mails", concurrency: null, per_group: true, rate: 10, per: 60_000 }
    ])
    const listed = await db(["limits"])
    expect(listed.code).toBe(0)
    expect(listed.stdout.split("\n")[0]).toMatch(/^task_type\s+concurrency\s+per_group\s+rate\s+running$/)
    expect(listed.stdout).toMatch(/\nmails\s+-\s+yes\s+10 per 1m\s+0\n/)
    expect(listed.stdout).toMatch(/\nevents\s+1\s+yes\s+2 per 1s\s+0\n/)

    // --per-group with no bound to apply: a usage error, nothing stored.
    const bad = await db(["limits", "set", "other", "--per-group"])
    expect(bad.code).not.toBe(0)
    expect(bad.stderr).toBe(
      "kairos: --per-group applies the limits to each group: give --concurrency N, --rate N (--per 1s), or both\n"
    )
    expect(await query(`SELECT 1 FROM $schema.queue_limits WHERE task_type = 'other'`)).toEqual([])

    // An enqueued item shows its group, as stored.
    const item = (await json(["enqueue", "mails", "{}", "--group", "customer-42"])) as Record<string, unknown>
    expect(item).toMatchObject({ task_type: "mails", group: "customer-42", thread: 1 })
    const text = await db(["enqueue", "mails", "{}", "--group", "customer-42"])
    expect(text.stdout).toMatch(/, group customer-42\)\n$/)
  })
})
