/**
 * A kairos worker process for the benchmark's scale-out and memory measures: `PgKairos.layer` on an existing
 * schema (no migration), a no-op handler for task type `noop`, driven by its parent over IPC.
 *
 *   parent → child: {"cmd":"start"} | {"cmd":"stats"} | {"cmd":"memory"} | {"cmd":"stop"}
 *   child → parent: {"event":"ready"} | {"event":"started"} | {"event":"stopped"}
 *                   | {"event":"stats" or "memory","rss":…,"heapUsed":…,"cpuMs":…,"ok":…,"failed":…}
 *   ("memory" forces two full GCs first; "stats" does not; both carry `claims`: the count and total milliseconds of
 *   the queue's claims so far, by `via` — tick or write — from kairos's `kairos_claim_duration_ms` histogram)
 *
 *   KAIROS_URL=… KAIROS_SCHEMA=… KAIROS_WORKERS=500 KAIROS_BATCH=500 KAIROS_POOL=10 [KAIROS_VACUUM_DEAD_ROWS=0] \
 *     node --expose-gc --import tsx bench/kairos-worker.ts
 */
import { Effect, ManagedRuntime, Metric, MetricState } from "effect"
import { PgKairos, Runner } from "../src/index.js"

const env = (name: string): string | undefined => {
  const v = process.env[name]
  return v === undefined || v === "" ? undefined : v
}
const num = (name: string): number | undefined => (env(name) === undefined ? undefined : Number(env(name)))

const send = (message: Record<string, unknown>) => process.send?.(message)

/** The queue's claims so far, by via (tick, write): how many and their total milliseconds. */
const claims = Effect.map(Metric.snapshot, (pairs) => {
  const out: Record<string, { count: number; sum: number }> = {}
  for (const pair of pairs) {
    if (pair.metricKey.name !== "kairos_claim_duration_ms" || !MetricState.isHistogramState(pair.metricState)) continue
    const tags = Object.fromEntries(pair.metricKey.tags.map((t) => [t.key, t.value]))
    if (tags["kind"] !== "queue") continue
    out[tags["via"] ?? "?"] = { count: pair.metricState.count, sum: pair.metricState.sum }
  }
  return out
})

const main = async () => {
  const workers = num("KAIROS_WORKERS")
  const batchSize = num("KAIROS_BATCH")
  const maxConnections = num("KAIROS_POOL")
  const vacuumDeadRows = num("KAIROS_VACUUM_DEAD_ROWS")
  const rt = ManagedRuntime.make(
    PgKairos.layer({
      url: env("KAIROS_URL")!,
      schema: env("KAIROS_SCHEMA")!,
      migrate: false,
      ...(workers !== undefined ? { workers } : {}),
      ...(batchSize !== undefined ? { batchSize } : {}),
      ...(maxConnections !== undefined ? { maxConnections } : {}),
      ...(vacuumDeadRows !== undefined ? { vacuumDeadRows } : {})
    })
  )
  const runner = await rt.runPromise(Runner.Runner)
  await rt.runPromise(runner.register("noop", async () => undefined))
  const gc = (globalThis as { gc?: () => void }).gc
  process.on("message", (message: { cmd?: string }) => {
    switch (message.cmd) {
      case "start":
        rt.runPromise(runner.start).then(() => send({ event: "started" }))
        break
      case "stats":
      case "memory":
        rt.runPromise(Effect.zip(runner.stats, claims)).then(([stats, claimed]) => {
          // A forced GC only where memory is measured: it shrinks the young generation, so the next thousands of
          // items run with more scavenges than a worker in its steady state (CPU per item of the 5,000-item drain
          // that follows it was ~1.8× that of one without).
          if (message.cmd === "memory") {
            gc?.()
            gc?.()
          }
          const mem = process.memoryUsage()
          const cpu = process.cpuUsage()
          send({
            event: message.cmd,
            rss: mem.rss,
            heapUsed: mem.heapUsed,
            heapTotal: mem.heapTotal,
            external: mem.external,
            arrayBuffers: mem.arrayBuffers,
            cpuMs: (cpu.user + cpu.system) / 1000,
            ok: stats.ok,
            failed: stats.failed,
            claims: claimed
          })
        })
        break
      case "stop":
        rt.runPromise(Effect.andThen(runner.stop, Effect.void))
          .then(() => rt.dispose())
          .then(() => {
            send({ event: "stopped" })
            process.disconnect?.()
            process.exit(0)
          })
        break
    }
  })
  process.on("disconnect", () => process.exit(0))
  send({ event: "ready" })
}

main().catch((e) => {
  console.error("kairos-worker failed:", e)
  process.exit(1)
})
