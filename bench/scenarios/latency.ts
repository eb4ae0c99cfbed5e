import { Queue } from '../../src/index.js';
import type { BenchContext, ScenarioResult } from '../lib/context.js';
import { BenchSchema } from '../lib/database.js';
import { now, sleep } from '../lib/clock.js';
import { distribution } from '../lib/stats.js';
import { sumStats, WorkerGroup } from '../lib/workers.js';

const round2 = (n: number) => Math.round(n * 100) / 100;

/**
 * Idle workers; one enqueue every `latencyIntervalMs` (on a fixed schedule, not
 * waiting for the previous one). Latency of a job = its handler's start in the
 * worker process minus the moment its enqueue's COMMIT was acknowledged to the
 * caller. Also counts claims per job: with several idle workers, every
 * notification can make each of them ask, and all but one ask in vain.
 */
export async function latency(ctx: BenchContext): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const db = await BenchSchema.create(ctx.url, 'latency');
  const queue = new Queue({ pool: db.pool, schema: db.schema });
  try {
    const workers = await WorkerGroup.start(sizes.latencyWorkers, {
      url: ctx.url, schema: db.schema, concurrency: sizes.latencyConcurrency, recordStarts: true,
    });
    workers.go();
    // Let the workers LISTEN and find the (empty) queue before timing anything.
    await sleep(500);
    const committed: number[] = [];
    const pending: Promise<void>[] = [];
    const started = now();
    for (let i = 0; i < sizes.latencyJobs; i++) {
      await sleep(started + i * sizes.latencyIntervalMs - now());
      pending.push(queue.enqueue('noop', { i }).then(() => {
        committed[i] = now();
      }));
    }
    await Promise.all(pending);
    await workers.whenCompleted(sizes.latencyJobs);
    const reports = await workers.stop();
    const latencies: number[] = [];
    for (const report of reports) {
      for (const [i, start] of report.starts) latencies.push(start - committed[i]!);
    }
    const d = distribution(latencies);
    const stats = sumStats(reports);
    const claimsPerJob = stats.claims / sizes.latencyJobs;
    ctx.log(`latency: p50 ${d.p50.toFixed(2)} ms, p99 ${d.p99.toFixed(2)} ms, ${claimsPerJob.toFixed(2)} claims/job`);
    const label = `${sizes.latencyWorkers} idle workers, 1 job / ${sizes.latencyIntervalMs} ms`;
    return {
      rows: [
        ...(['p50', 'p95', 'p99', 'max'] as const).map((p) => ({
          scenario: 'latency', metric: `commit → handler start ${p}, ${label}`, value: round2(d[p]), unit: 'ms',
        })),
        { scenario: 'latency', metric: 'claim statements per job', value: round2(claimsPerJob), unit: 'claims' },
        { scenario: 'latency', metric: 'empty claims per job', value: round2(stats.emptyClaims / sizes.latencyJobs), unit: 'claims' },
      ],
      details: {
        workers: sizes.latencyWorkers, concurrency: sizes.latencyConcurrency, jobs: sizes.latencyJobs,
        intervalMs: sizes.latencyIntervalMs, latencyMs: d, workerStats: stats, jobsSeen: latencies.length,
      },
    };
  } finally {
    await db.drop();
  }
}
