/**
 * Medians over rounds, and the tables the benchmark prints (Markdown, so they can be pasted as they are).
 */
import type { Figure, Figures, Sizes, SystemName } from "./types.js"
import { fmtInt, fmtNum, median } from "./util.js"

/** The median of each figure over the rounds that have it; capped when any round was. */
export const mediansOf = (rounds: ReadonlyArray<Figures>): Figures => {
  const keys = new Set(rounds.flatMap((r) => Object.keys(r)))
  const out: Record<string, Figure> = {}
  for (const key of keys) {
    const got = rounds.map((r) => r[key]).filter((f): f is Figure => f !== undefined && Number.isFinite(f.value))
    if (got.length === 0) continue
    // The detail shown is that of the round nearest the median (every round's is in the JSON).
    const value = median(got.map((f) => f.value))
    const nearest = [...got].sort((a, b) => Math.abs(a.value - value) - Math.abs(b.value - value))[0]!
    out[key] = {
      value,
      capped: got.some((f) => f.capped === true),
      ...(nearest.detail !== undefined ? { detail: nearest.detail } : {})
    }
  }
  return out
}

export const medians = (
  rounds: ReadonlyArray<Partial<Record<SystemName, Figures>>>
): Partial<Record<SystemName, Figures>> => {
  const names = new Set(rounds.flatMap((r) => Object.keys(r) as Array<SystemName>))
  return Object.fromEntries([...names].map((n) => [n, mediansOf(rounds.map((r) => r[n] ?? {}))]))
}

type Unit = "/s" | "ms" | "s" | "count" | "MB" | "%" | "×"
const format = (unit: Unit, f: Figure | undefined): string => {
  if (f === undefined) return "—"
  const mark = f.capped === true ? "*" : ""
  switch (unit) {
    case "/s":
      return `${f.value < 10 ? fmtNum(f.value, 1) : fmtInt(f.value)}${mark}`
    case "ms":
      return `${fmtNum(f.value, f.value < 10 ? 2 : 1)}${mark}`
    case "s":
      return f.capped === true ? `> ${fmtNum(f.value, 1)}` : fmtNum(f.value, 2)
    case "count":
      return `${fmtInt(f.value)}${mark}`
    case "MB":
      return fmtNum(f.value, 1)
    case "×":
      return `${fmtNum(f.value, 2)}${mark}`
    case "%": {
      const pct = Math.round(f.value)
      return `${pct > 0 ? "+" : ""}${pct === 0 ? 0 : pct} %`
    }
  }
}

interface Row {
  readonly label: string
  readonly unit: Unit
  readonly better: "higher" | "lower"
  readonly kairos: string
  /** The key of the peers' and the floor's figure (none: a kairos-only row). */
  readonly peers?: string
}

const PEERS: ReadonlyArray<SystemName> = ["graphile-worker", "pg-boss"]

/** A ratio as the tables print it. */
const times = (r: number): string => `${r >= 0.1 ? fmtNum(r, 2) : r.toPrecision(2)}×`

/** The best peer's figure of `row` among `figures` (highest or lowest, as the row is better), if any peer has it. */
const bestPeer = (figures: Partial<Record<SystemName, Figures>>, row: Row): number | undefined => {
  if (row.peers === undefined) return undefined
  const values = PEERS.map((p) => figures[p]?.[row.peers!]?.value).filter((v): v is number => v !== undefined)
  if (values.length === 0) return undefined
  return row.better === "higher" ? Math.max(...values) : Math.min(...values)
}

const ratio = (k: Figure | undefined, best: number | undefined): string => {
  if (k === undefined || best === undefined || !Number.isFinite(best) || best === 0) return "—"
  return times(k.value / best)
}

/** The side-by-side rows, in the order the table prints them. */
const comparedRows = (sizes: Sizes): ReadonlyArray<Row> => {
  const n = sizes.items.toLocaleString("en-US")
  return [
    {
      label: `bulk enqueue of ${n} (items/s), Promise API`,
      unit: "/s",
      better: "higher",
      kairos: "bulk",
      peers: "bulk"
    },
    {
      label: `bulk enqueue of ${n} (items/s), Effect API`,
      unit: "/s",
      better: "higher",
      kairos: "bulk.effect",
      peers: "bulk"
    },
    {
      label: "single enqueue, sequential (items/s), Promise API",
      unit: "/s",
      better: "higher",
      kairos: "single.promise",
      peers: "single"
    },
    {
      label: "single enqueue, sequential (items/s), Effect API",
      unit: "/s",
      better: "higher",
      kairos: "single.effect",
      peers: "single"
    },
    {
      label: "single enqueue, 10 callers (items/s), Promise API",
      unit: "/s",
      better: "higher",
      kairos: "single10.promise",
      peers: "single10"
    },
    {
      label: "single enqueue, 10 callers (items/s), Effect API",
      unit: "/s",
      better: "higher",
      kairos: "single10.effect",
      peers: "single10"
    },
    {
      label: `drain of ${n} no-op items, defaults (items/s)`,
      unit: "/s",
      better: "higher",
      kairos: "drain.default",
      peers: "drain.default"
    },
    {
      label: `drain, kairos defaults vs peers' best (items/s)`,
      unit: "/s",
      better: "higher",
      kairos: "drain.default",
      peers: "drain.best"
    },
    { label: `drain, best options (items/s)`, unit: "/s", better: "higher", kairos: "drain.best", peers: "drain.best" },
    {
      label: `drain, sequential (thread 0) items of one type (items/s)`,
      unit: "/s",
      better: "higher",
      kairos: "drain.sequential"
    },
    {
      label: `drain, defaults with named prepared statements (items/s)`,
      unit: "/s",
      better: "higher",
      kairos: "drain.named"
    },
    {
      label: `drain, sequential items with named prepared statements (items/s)`,
      unit: "/s",
      better: "higher",
      kairos: "drain.sequential.named"
    },
    { label: `pickup latency p50 (ms)`, unit: "ms", better: "lower", kairos: "pickup.p50", peers: "pickup.p50" },
    { label: `pickup latency p99 (ms)`, unit: "ms", better: "lower", kairos: "pickup.p99", peers: "pickup.p99" },
    { label: `pickup latency max (ms)`, unit: "ms", better: "lower", kairos: "pickup.max", peers: "pickup.max" },
    {
      label: `pickups slower than 0.5 s (of ${sizes.samples})`,
      unit: "count",
      better: "lower",
      kairos: "pickup.slow",
      peers: "pickup.slow"
    }
  ]
}

export const render = (options: {
  readonly medians: Partial<Record<SystemName, Figures>>
  readonly alone: Figures
  readonly sizes: Sizes
  readonly kairosOnlySizes: {
    readonly cronJobs: number
    readonly claimRows: number
    readonly claimBacklog: number
    readonly rssFirst: number
    readonly rssTotal: number
    readonly procs: ReadonlyArray<number>
    readonly backlog: number
    readonly flow: number
    readonly limits: number
  }
  readonly rounds: number
}): string => {
  const { medians: m, alone, sizes, kairosOnlySizes: ko } = options
  const n = sizes.items.toLocaleString("en-US")
  const rows = comparedRows(sizes)
  const get = (s: SystemName, key: string | undefined) => (key === undefined ? undefined : m[s]?.[key])
  const lines: Array<string> = []
  lines.push(
    `| measure (medians of ${options.rounds} round${options.rounds === 1 ? "" : "s"}) | kairos | graphile-worker | pg-boss | floor | kairos / best peer | kairos / floor |`
  )
  lines.push("|---|--:|--:|--:|--:|--:|--:|")
  for (const row of rows) {
    const k = get("kairos", row.kairos)
    const best = bestPeer(m, row)
    const fl = get("floor", row.peers)
    lines.push(
      `| ${row.label} | ${format(row.unit, k)} | ${format(row.unit, get("graphile-worker", row.peers))} | ` +
        `${format(row.unit, get("pg-boss", row.peers))} | ${format(row.unit, fl)} | ${ratio(k, best)} | ${ratio(k, fl?.value)} |`
    )
  }
  lines.push("")
  lines.push("Ratios are kairos / best peer: above 1 is better for rates, below 1 is better for latencies.")
  lines.push("`*`: cut at the time cap (the rate is over the time it ran) or a sample timed out.")

  // kairos alone.
  const a = (key: string) => alone[key]
  const aloneRows: Array<[string, string]> = []
  const put = (label: string, unit: Unit, f: Figure | undefined) => {
    if (f !== undefined) aloneRows.push([label, format(unit, f) + (f.detail !== undefined ? ` (${f.detail})` : "")])
  }
  const jobs = ko.cronJobs.toLocaleString("en-US")
  for (const [tag, name] of [
    ["default", "defaults"],
    ["tuned", "tuned"]
  ] as const) {
    put(`${jobs} interval jobs due at one instant, ${name}: defineJobs (s)`, "s", a(`cron.define.${tag}`))
    put(`… ${name}: until every one has a job_runs row (s)`, "s", a(`cron.fired.${tag}`))
    put(`… ${name}: until every handler ran (s)`, "s", a(`cron.ran.${tag}`))
  }
  const rows1 = ko.claimRows.toLocaleString("en-US")
  put("claimBatch(20) median, empty processed_items (ms)", "ms", a("claim.empty"))
  put(`claimBatch(20) median, ${rows1} rows in processed_items (ms)`, "ms", a("claim.full"))
  if (a("claim.empty") !== undefined && a("claim.full") !== undefined) {
    put("… claim cost change", "%", { value: (a("claim.full")!.value / a("claim.empty")!.value - 1) * 100 })
  }
  put(
    `claimBatch(20) median, ${ko.claimBacklog.toLocaleString("en-US")} more items queued (ms)`,
    "ms",
    a("claim.backlog")
  )
  if (a("claim.empty") !== undefined && a("claim.backlog") !== undefined) {
    put("… claim cost change", "%", { value: (a("claim.backlog")!.value / a("claim.empty")!.value - 1) * 100 })
  }
  put("recordResults(20) median, empty processed_items (ms)", "ms", a("record.empty"))
  put(`recordResults(20) median, ${rows1} rows (ms)`, "ms", a("record.full"))
  put(`worker RSS after ${ko.rssFirst.toLocaleString("en-US")} items (MB)`, "MB", a("rss.first"))
  put(`worker RSS after ${ko.rssTotal.toLocaleString("en-US")} items (MB)`, "MB", a("rss.total"))
  if (a("rss.first") !== undefined && a("rss.total") !== undefined) {
    put("… RSS growth", "%", { value: (a("rss.total")!.value / a("rss.first")!.value - 1) * 100 })
  }
  for (const p of ko.procs) {
    put(`drain of ${n} with ${p} worker process${p === 1 ? "" : "es"} (items/s)`, "/s", a(`scale.${p}`))
  }
  const backlog = ko.backlog.toLocaleString("en-US")
  put(`backlog of ${backlog} drained by one worker: first tenth (items/s)`, "/s", a("backlog.first"))
  put(`… last tenth (items/s)`, "/s", a("backlog.last"))
  put(`… last tenth / first tenth`, "×", a("backlog.ratio"))
  put(`… the whole drain (s)`, "s", a("backlog.seconds"))
  const flow = ko.flow.toLocaleString("en-US")
  put(`flow of ${flow} steps (fan-out, fan-in): enqueueFlow (s)`, "s", a("flow.enqueue"))
  put(`… claimBatch(20) median beside the waiting flow (ms)`, "ms", a("flow.claimBeside"))
  put(`… claimBatch(20) median, same items without it (ms)`, "ms", a("flow.claimAlone"))
  put(`… claimBatch(20) median while the flow drains (ms)`, "ms", a("flow.claim"))
  put(`… claimBatch(20) median, ${flow} plain items (ms)`, "ms", a("flow.plainClaim"))
  put(`… the flow drained by claims of 20 (steps/s)`, "/s", a("flow.rate"))
  put(`… ${flow} plain items drained the same way (items/s)`, "/s", a("flow.plainRate"))
  const limits = ko.limits.toLocaleString("en-US")
  put(`drain of ${limits} by a runner (workers 20, batch 20), plain type (items/s)`, "/s", a("limits.plain"))
  put(`… a type under a limit that never binds (items/s)`, "/s", a("limits.limited"))
  put(`… 2 per group (items/s)`, "/s", a("limits.grouped"))
  put(`… limited / plain`, "×", a("limits.limitedRatio"))
  put(`… 2 per group / plain`, "×", a("limits.groupedRatio"))
  if (aloneRows.length > 0) {
    lines.push("")
    lines.push("| kairos alone | figure |")
    lines.push("|---|--:|")
    for (const [label, value] of aloneRows) lines.push(`| ${label} | ${value} |`)
  }

  // Which options won, for the "best" rows.
  const details: Array<string> = []
  for (const s of ["kairos", "graphile-worker", "pg-boss", "floor"] as const) {
    const d = m[s]?.["drain.best"]?.detail
    if (d !== undefined) details.push(`- ${s} best drain: ${d}`)
    const dd = m[s]?.["drain.default"]?.detail
    if (dd !== undefined && s !== "floor") details.push(`- ${s} default drain: ${dd}`)
  }
  if (details.length > 0) lines.push("", ...details)
  return lines.join("\n")
}

/**
 * The ratios of each round on their own, with their median: a machine that slows down or speeds up between rounds
 * moves every system of that round together, so a round's ratio is steadier than the ratio of medians taken from
 * different rounds. Empty with fewer than two rounds.
 */
export const roundByRound = (options: {
  readonly rounds: ReadonlyArray<Partial<Record<SystemName, Figures>>>
  readonly alone: ReadonlyArray<Figures>
  readonly sizes: Sizes
  readonly procs: ReadonlyArray<number>
}): string => {
  const { rounds, alone } = options
  if (rounds.length < 2) return ""
  const lines: Array<string> = []
  const put = (label: string, values: ReadonlyArray<number | undefined>, show: (x: number) => string) => {
    const got = values.filter((v): v is number => v !== undefined && Number.isFinite(v))
    if (got.length === 0) return
    const each = values.map((v) => (v === undefined || !Number.isFinite(v) ? "—" : show(v))).join(" / ")
    lines.push(`| ${label} | ${each} | ${show(median(got))} |`)
  }
  for (const row of comparedRows(options.sizes)) {
    if (row.peers === undefined) continue
    put(
      row.label.replace(/ \((items\/s|ms|of \d+)\)/, ""),
      rounds.map((round) => {
        const k = round.kairos?.[row.kairos]?.value
        const best = bestPeer(round, row)
        return k === undefined || best === undefined || best === 0 ? undefined : k / best
      }),
      times
    )
  }
  put(
    "pickup latency p50, kairos − floor (ms)",
    rounds.map((round) => {
      const k = round.kairos?.["pickup.p50"]?.value
      const f = round.floor?.["pickup.p50"]?.value
      return k === undefined || f === undefined ? undefined : k - f
    }),
    (d) => `${d > 0 ? "+" : ""}${fmtNum(d, 2)}`
  )
  for (const p of options.procs.filter((p) => p !== 1)) {
    put(
      `kairos drain with ${p} worker processes / with 1`,
      alone.map((a) => {
        const one = a["scale.1"]?.value
        const many = a[`scale.${p}`]?.value
        return one === undefined || many === undefined || one === 0 ? undefined : many / one
      }),
      times
    )
  }
  if (lines.length === 0) return ""
  return [
    "| ratio, round by round (kairos / best peer unless stated) | each round | median of the rounds |",
    "|---|--:|--:|",
    ...lines
  ].join("\n")
}
