/**
 * What every system's measures take and give back.
 */
import type pg from "pg"

export type SystemName = "kairos" | "graphile-worker" | "pg-boss" | "floor"

/** One measured figure. `capped`: the measure hit its time cap, so the figure is a lower bound (rate) or "> cap". */
export interface Figure {
  readonly value: number
  readonly detail?: string | undefined
  readonly capped?: boolean | undefined
}

export type Figures = Record<string, Figure>

/** The sizes of one run. */
export interface Sizes {
  /** Items of a bulk enqueue and of a drain. */
  readonly items: number
  /** Single enqueues per sequential or concurrent measure. */
  readonly singles: number
  /** Pickup latency samples. */
  readonly samples: number
  /** Longest a drain may take before it is cut short (ms). */
  readonly drainCapMs: number
  /** Whether to try every "best options" candidate (false: the first only). */
  readonly allCandidates: boolean
}

export interface Context {
  readonly url: string
  /** The admin pool: schemas and checks only. */
  readonly admin: pg.Pool
  /** This system's schema: created by each measure, dropped after it. */
  readonly schema: string
  readonly sizes: Sizes
  readonly log: (message: string) => void
}

/** A system's side-by-side measures; each creates the schema it needs and drops it at the end. */
export interface System {
  readonly name: SystemName
  readonly bulkEnqueue: (ctx: Context) => Promise<Figures>
  readonly singleEnqueue: (ctx: Context) => Promise<Figures>
  readonly drain: (ctx: Context) => Promise<Figures>
  readonly pickup: (ctx: Context) => Promise<Figures>
}

/** The result of a drain: items handled in the time, and whether the cap cut it short. */
export interface DrainOutcome {
  readonly handled: number
  readonly seconds: number
  /** CPU time of the benchmark process over the drain (the worker runs in it). */
  readonly cpuMs: number
  /** The whole machine's busy CPU time over the drain, Postgres's included (Linux only). */
  readonly machineMs?: number | undefined
  readonly capped: boolean
}

export const rate = (d: DrainOutcome, name?: string): Figure => {
  const perItem = (ms: number) => (ms / Math.max(1, d.handled)).toFixed(3)
  const cpu =
    `client CPU ${perItem(d.cpuMs)} ms/item` +
    (d.machineMs === undefined ? "" : `, machine CPU ${perItem(d.machineMs)} ms/item`)
  const cut = d.capped ? `cut at ${d.seconds.toFixed(0)} s: ${d.handled} handled` : undefined
  return {
    value: d.handled / d.seconds,
    capped: d.capped,
    detail: [name, cut, cpu].filter((x) => x !== undefined).join(", ")
  }
}

export const pickupFigures = (latencies: ReadonlyArray<number>, timedOut: number, detail?: string): Figures => {
  const sorted = [...latencies].sort((a, b) => a - b)
  const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
  return {
    "pickup.p50": { value: pct(50), detail },
    "pickup.p99": { value: pct(99), detail },
    "pickup.max": { value: sorted[sorted.length - 1] ?? Number.NaN },
    "pickup.slow": {
      value: sorted.filter((x) => x > 500).length,
      detail: timedOut > 0 ? `${timedOut} not picked up within the sample timeout` : undefined
    }
  }
}
