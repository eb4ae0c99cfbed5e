import { describe, expect, it } from 'vitest';
import { FAULT_KINDS, formatReport, runChaos, type FaultKind } from '../bench/chaos/run-chaos.js';

// The small chaos run (npm run chaos is the big one): real worker processes, each
// behind TCP proxies of its own, on a private embedded Postgres that this test
// restarts; the shared server is never touched. Every fault kind at least once.
describe('chaos', () => {
  it('loses no job and never overlaps runs through every kind of fault', async () => {
    const jobs = 1_200;
    const faults: Record<FaultKind, number> = {
      kill: 2,
      terminate: 1,
      restart: 1,
      rowLock: 1,
      queueLock: 1,
      listenCut: 1,
      cutOff: 1,
    };
    const report = await runChaos({
      jobs,
      workers: 3,
      concurrency: 10,
      faults,
      visibilityTimeoutMs: 2_000,
      spreadMs: 16_000,
      timeoutMs: 60_000,
    });
    console.log(formatReport(report));
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report).toMatchObject({ jobs, completed: jobs, lost: 0, overlaps: 0, faults });
    expect(Object.keys(report.faults)).toEqual([...FAULT_KINDS]);
  }, 120_000);
});
