import { Queue } from '../../src/index.js';
import type { BenchContext, ScenarioResult } from '../lib/context.js';
import { BenchSchema } from '../lib/database.js';
import { now, sleep } from '../lib/clock.js';
import { rate } from '../lib/stats.js';
import { sumStats, WorkerGroup } from '../lib/workers.js';

/**
 * Enqueue and process at once: `steadyLoops` loops of single enqueues while the
 * workers drain, for `steadyDurationMs`. Reports processed jobs/s over the window
 * and the backlog (pending jobs) sampled every second, so a growing backlog shows.
 */
export async function steady(ctx: BenchContext): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const db = await BenchSchema.create(ctx.url, 'steady');
  const queue = new Queue({ pool: db.pool, schema: db.schema });
  try {
    const workers = await WorkerGroup.start(sizes.steadyWorkers, {
      url: ctx.url, schema: db.schema, concurrency: sizes.steadyConcurrency,
    });
    workers.go();
    await sleep(500);
    let enqueued = 0;
    const started = now();
    const deadline = started + sizes.steadyDurationMs;
    const loops = Array.from({ length: sizes.steadyLoops }, async (_, loop) => {
      for (let n = 0; now() < deadline; n++) {
        await queue.enqueue('noop', { i: loop * 1e7 + n });
        enqueued++;
      }
    });
    const backlog: number[] = [];
    const sampler = (async () => {
      while (now() < deadline) {
        await sleep(Math.min(1_000, deadline - now()));
        backlog.push(await db.countStatus('pending'));
      }
    })();
    await Promise.all([...loops, sampler]);
    const elapsedMs = now() - started;
    const processed = workers.totalCompleted;
    const backlogAtEnd = backlog[backlog.length - 1] ?? 0;
    const reports = await workers.stop();
    const processedPerSec = rate(processed, elapsedMs);
    ctx.log(`steady: ${processedPerSec} processed/s, ${rate(enqueued, elapsedMs)} enqueued/s, backlog at end ${backlogAtEnd}`);
    return {
      rows: [
        { scenario: 'steady state', metric: `processed, ${sizes.steadyLoops} enqueue loops, ${sizes.steadyWorkers}×${sizes.steadyConcurrency} workers`, value: processedPerSec, unit: 'jobs/s', vsLimitAt: Math.max(...sizes.drainSizes) },
        { scenario: 'steady state', metric: 'enqueued', value: rate(enqueued, elapsedMs), unit: 'jobs/s' },
        { scenario: 'steady state', metric: 'backlog at end', value: backlogAtEnd, unit: 'jobs' },
        { scenario: 'steady state', metric: 'claim statements per processed job', value: Math.round((sumStats(reports).claims / Math.max(1, processed)) * 100) / 100, unit: 'claims' },
      ],
      details: {
        loops: sizes.steadyLoops, workers: sizes.steadyWorkers, concurrency: sizes.steadyConcurrency, elapsedMs,
        enqueued, processed, processedPerSec, backlogSamples: backlog, workerStats: sumStats(reports),
      },
    };
  } finally {
    await db.drop();
  }
}
