/**
 * `kairos limits` on the command line, spawned as a real process against a real Postgres: a rate per group set,
 * listed and described; bad combinations refused as usage errors that change nothing; an enqueued item's group in
 * its output. Integration: real processes and wall time.
 */
import { describe, expect, it } from "vitest"
import { db, json, query, useCli } from "../support/cli.js"

useCli()

describe("kairos limits", () => {
  it("a rate per group: set, listed, described; each scope needs its bound; the item's group shown", async () => {
    await json(["migrate"])
    const set = await db(["limits", "set", "mails", "--rate", "10", "--per", "1m", "--rate-per-group"])
    expect(set.stderr).toBe("")
    expect(set.code).toBe(0)
    expect(set.stdout).toBe("limits of mails: rate 10 per 1m per group (every worker obeys them now)\n")
    // --per-group is the concurrency's scope, as before 0024: the rate stays the type's.
    const ordered = await db([
      "limits",
      "set",
      "events",
      "--concurrency",
      "1",
      "--rate",
      "2",
      "--per",
      "1s",
      "--per-group"
    ])
    expect(ordered.stdout).toBe(
      "limits of events: concurrency 1 per group (ordered), rate 2 per 1s in all (every worker obeys them now)\n"
    )
    expect(
      await json(["limits", "set", "sync", "--concurrency", "3", "--rate", "5", "--per-group", "--rate-per-group"])
    ).toMatchObject({
      task_type: "sync",
      concurrency: 3,
      per_group: true,
      rate: 5,
      rate_per_ms: 1000,
      rate_per_group: true
    })
    // Stored as SQL sees it.
    expect(
      await query(
        `SELECT task_type, concurrency, per_group, rate, rate_per_ms::int AS per, rate_per_group
         FROM $schema.queue_limits ORDER BY 1`
      )
    ).toEqual([
      { task_type: "events", concurrency: 1, per_group: true, rate: 2, per: 1000, rate_per_group: false },
      { task_type: "mails", concurrency: null, per_group: false, rate: 10, per: 60_000, rate_per_group: true },
      { task_type: "sync", concurrency: 3, per_group: true, rate: 5, per: 1000, rate_per_group: true }
    ])
    const listed = await db(["limits"])
    expect(listed.code).toBe(0)
    expect(listed.stdout.split("\n")[0]).toMatch(
      /^task_type\s+concurrency\s+per_group\s+rate\s+rate_per_group\s+running$/
    )
    expect(listed.stdout).toMatch(/\nevents\s+1\s+yes\s+2 per 1s\s+no\s+0\n/)
    expect(listed.stdout).toMatch(/\nmails\s+-\s+no\s+10 per 1m\s+yes\s+0\n/)
    expect(listed.stdout).toMatch(/\nsync\s+3\s+yes\s+5 per 1s\s+yes\s+0\n/)

    // Each scope without its bound: a usage error, nothing stored.
    const bad = await db(["limits", "set", "other", "--rate", "5", "--per-group"])
    expect(bad.code).not.toBe(0)
    expect(bad.stderr).toBe("kairos: --per-group bounds the concurrency of each group: give --concurrency N too\n")
    const badRate = await db(["limits", "set", "other", "--concurrency", "2", "--rate-per-group"])
    expect(badRate.code).not.toBe(0)
    expect(badRate.stderr).toBe(
      "kairos: --rate-per-group bounds the starts of each group per window: give --rate N too\n"
    )
    expect(await query(`SELECT 1 FROM $schema.queue_limits WHERE task_type = 'other'`)).toEqual([])

    // An enqueued item shows its group, as stored.
    const item = (await json(["enqueue", "mails", "{}", "--group", "customer-42"])) as Record<string, unknown>
    expect(item).toMatchObject({ task_type: "mails", group: "customer-42", thread: 1 })
    const text = await db(["enqueue", "mails", "{}", "--group", "customer-42"])
    expect(text.stdout).toMatch(/, group customer-42\)\n$/)
  })
})
