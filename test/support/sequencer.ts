/**
 * The order test files start in: the longest first, so that the run does not end on one long file started late while
 * the other workers sit idle. A file's length is the figure below (seconds, measured on a 2-core machine with
 * embedded Postgres) for the heavy files, else vitest's own record of its last run (its cache of
 * results), else unknown (short). The list comes first: the cache holds whatever the last run saw, a file that was
 * skipped there (no PgBouncer, no browser) as 0 s, and a run of a few files at a time as much longer than in a full
 * run. Files of equal length keep vitest's own order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * Files that take ten seconds or more on their own, and the few just under that which, unlisted, started last and
 * ended the run alone: keep it to those, the rest start after them.
 */
const knownSeconds: Readonly<Record<string, number>> = {
  "test/faults/frozen-network.test.ts": 84,
  "test/faults/sigkill-storm.test.ts": 68,
  "test/faults/transactional-storm.test.ts": 56,
  "test/cli/worker.test.ts": 49,
  "test/package.test.ts": 48,
  // Not by its length (~45 s): it starts once the storms are over. Its drain (100,000 items through PgBouncer) loads the
  // database and both cores; beside the storms' first minute, CI twice saw storm workers' clocks disagree by a second.
  "test/integration/many-processes.test.ts": 28,
  "test/faults/failover.test.ts": 39,
  "test/integration/queue.multiprocess.test.ts": 38,
  "test/examples.test.ts": 36,
  "test/integration/jobs.multiprocess.test.ts": 35,
  "test/faults/limits-connections.test.ts": 34,
  "test/integration/pgbouncer.test.ts": 30,
  "test/cli/cli.test.ts": 29,
  "test/dashboard/browser.test.ts": 45,
  "test/integration/limits.multiprocess.test.ts": 23,
  "test/adapters/pgFlows.test.ts": 22,
  "test/faults/db-restart.test.ts": 20,
  "test/faults/clock-skew.test.ts": 19,
  "test/faults/pooled-outage.test.ts": 18,
  "test/integration/transactional.pg.test.ts": 18,
  "test/faults/flow-kill.test.ts": 18,
  "test/faults/concurrent-start.test.ts": 15,
  "test/cli/admin.test.ts": 15,
  "test/faults/graceful-shutdown.test.ts": 13,
  "test/integration/leastPrivilege.test.ts": 12,
  "test/support/EmbeddedPostgres.test.ts": 11,
  "test/adapters/pgQueue.test.ts": 11,
  "test/faults/hostile-handlers.test.ts": 8,
  "test/integration/vacuum.pg.test.ts": 8,
  "test/adapters/queueDifferential.test.ts": 8
}

export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const ordered = await super.sort(files)
    const root = this.ctx.config.root
    const seconds = (spec: TestSpecification): number => {
      const file = spec.moduleId.startsWith(root + "/") ? spec.moduleId.slice(root.length + 1) : spec.moduleId
      const listed = knownSeconds[file]
      if (listed !== undefined) return listed
      return (this.ctx.cache.getFileTestResults(`${spec.project.name}:${file}`)?.duration ?? 0) / 1000
    }
    // Array.prototype.sort is stable: equal lengths keep vitest's order.
    return ordered
      .map((spec) => ({ spec, seconds: seconds(spec) }))
      .sort((a, b) => b.seconds - a.seconds)
      .map(({ spec }) => spec)
  }
}
