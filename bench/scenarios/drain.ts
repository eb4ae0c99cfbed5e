import type { BenchContext, Row, ScenarioResult } from '../lib/context.js';
import { BenchSchema } from '../lib/database.js';
import { now } from '../lib/clock.js';
import { rate } from '../lib/stats.js';
import { sumStats, WorkerGroup } from '../lib/workers.js';

const MB = 1024 * 1024;

/**
 * Prefilled no-op jobs drained by one worker process at each concurrency: jobs/s
 * from the worker's go to the last completion written, the worker's peak RSS, and
 * what the table looks like afterwards (size, dead tuples, HOT updates).
 */
export async function drain(ctx: BenchContext): Promise<ScenarioResult> {
  const rows: Row[] = [];
  const runs: unknown[] = [];
  for (const size of ctx.sizes.drainSizes) {
    for (const concurrency of ctx.sizes.drainConcurrency) {
      const db = await BenchSchema.create(ctx.url, 'drain');
      try {
        await db.prefill(size);
        const workers = await WorkerGroup.start(1, { url: ctx.url, schema: db.schema, concurrency });
        const done = workers.whenCompleted(size);
        const started = now();
        workers.go();
        const finished = await done;
        const reports = await workers.stop();
        const jobsPerSec = rate(size, finished - started);
        const left = await db.countStatus('pending');
        // Each job was updated twice: claimed, then completed.
        const table = await db.tableStats(2 * size);
        const rssMb = Math.round((reports[0]!.maxRssBytes / MB) * 10) / 10;
        const stats = sumStats(reports);
        ctx.log(`drain ${size} at concurrency ${concurrency}: ${jobsPerSec} jobs/s, RSS ${rssMb} MB`);
        const label = `${size} jobs, concurrency ${concurrency}`;
        rows.push(
          { scenario: 'drain', metric: label, value: jobsPerSec, unit: 'jobs/s', vsLimitAt: size },
          { scenario: 'drain', metric: `${label}: worker peak RSS`, value: rssMb, unit: 'MB' },
        );
        if (size === Math.max(...ctx.sizes.drainSizes) && concurrency === Math.max(...ctx.sizes.drainConcurrency)) {
          rows.push(
            { scenario: 'drain', metric: `${label}: table+indexes after`, value: Math.round((table.totalBytes / MB) * 10) / 10, unit: 'MB' },
            { scenario: 'drain', metric: `${label}: dead tuples after`, value: table.deadTuples, unit: 'rows' },
            { scenario: 'drain', metric: `${label}: HOT updates`, value: Math.round((table.hotUpdates / Math.max(1, table.updates)) * 1000) / 10, unit: '% of updates' },
          );
        }
        runs.push({ size, concurrency, elapsedMs: finished - started, jobsPerSec, pendingLeft: left, maxRssBytes: reports[0]!.maxRssBytes, workerStats: stats, table });
      } finally {
        await db.drop();
      }
    }
  }
  return { rows, details: { runs } };
}
