/**
 * The order test files start in: the longest first, so that the run does not end on one long file started late while
 * the other workers sit idle. A file's length is the figure below (seconds, measured on a 2-core machine with
 * embedded Postgres) for the heavy files, else vitest's own record of its last run (its cache of
 * results), else unknown (short). The list comes first: the cache holds whatever the last run saw, a file that was
 * skipped there (no PgBouncer, no browser) as 0 s, and a run of a few files at a time as much longer than in a full
 * run. Files of equal length keep vitest's own order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node"

/** Files that take ten seconds or more on their own: keep it to the heavy ones, the rest start after them. */
const knownSeconds: Readonly<Record<string, number>> = {
  "test/faults/sigkill-storm.test.ts": 64,
  "test/integration/many-processes.test.ts": 56,
  "test/dashboard/browser.test.ts": 54,
  "test/cli/worker.test.ts": 60,
  "test/package.test.ts": 55,
  "test/cli/cli.test.ts": 53,
  "test/examples.test.ts": 49,
  "test/faults/transactional-storm.test.ts": 46,
  "test/adapters/pgFlows.test.ts": 43,
  "test/integration/leastPrivilege.test.ts": 37,
  "test/integration/jobs.multiprocess.test.ts": 33,
  "test/faults/failover.test.ts": 33,
  "test/integration/queue.multiprocess.test.ts": 29,
  "test/faults/limits-connections.test.ts": 28,
  "test/cli/admin.test.ts": 28,
  "test/integration/limits.multiprocess.test.ts": 21,
  "test/faults/db-restart.test.ts": 21,
  "test/faults/clock-skew.test.ts": 19,
  "test/faults/flow-kill.test.ts": 16,
  "test/faults/frozen-network.test.ts": 16,
  "test/integration/transactional.pg.test.ts": 14,
  "test/adapters/PgListener.test.ts": 13,
  "test/support/EmbeddedPostgres.test.ts": 11,
  "test/cli/flows.test.ts": 11,
  "test/integration/pgbouncer.test.ts": 23
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
