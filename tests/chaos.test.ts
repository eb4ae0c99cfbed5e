import { describe, expect, it } from 'vitest';
import { formatReport, runChaos } from '../bench/chaos/run-chaos.js';

// The small chaos run (npm run chaos is the big one): real worker processes on a
// private embedded Postgres that this test restarts; the shared server is never touched.
describe('chaos', () => {
  it('loses no job and never overlaps runs through SIGKILLs, killed connections and a Postgres restart', async () => {
    const report = await runChaos({
      jobs: 2_000,
      workers: 3,
      concurrency: 10,
      faults: { kill: 2, terminate: 2, restart: 1 },
      visibilityTimeoutMs: 3_000,
      timeoutMs: 90_000,
    });
    console.log(formatReport(report));
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report).toMatchObject({ jobs: 2_000, completed: 2_000, lost: 0, faults: { kill: 2, terminate: 2, restart: 1 } });
  }, 120_000);
});
