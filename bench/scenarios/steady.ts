import type { BenchContext } from '../lib/context.js';
import { inFreshSchema } from '../lib/fresh-schema.js';
import { now, sleep } from '../lib/clock.js';
import { sumStats, WorkerGroup } from '../lib/processes.js';
import { rate } from '../lib/stats.js';
import type { System } from '../lib/systems.js';

export interface SteadyRun {
  elapsedMs: number;
  enqueued: number;
  processed: number;
  enqueuedPerSec: number;
  processedPerSec: number;
  /** Pending jobs, sampled every second. */
  backlogSamples: number[];
  backlogAtEnd: number;
  workerStats: Record<string, number> | null;
}

/**
 * Enqueue and process at once: `steadyLoops` loops of single enqueues (a client
 * process) while the workers drain, for `steadyDurationMs`. Processed and enqueued
 * jobs/s over the window, and the backlog (pending jobs) each second, so a growing
 * backlog shows.
 */
export async function steady(ctx: BenchContext, system: System): Promise<SteadyRun> {
  const { sizes } = ctx;
  return inFreshSchema(ctx, system, 'steady', async (db, client) => {
    const workers = await WorkerGroup.start(system, sizes.steadyWorkers, {
      url: ctx.url, schema: db.schema, concurrency: sizes.steadyConcurrency,
    });
    workers.go();
    await sleep(500);
    const started = now();
    const deadline = started + sizes.steadyDurationMs;
    const backlog: number[] = [];
    const sampler = (async () => {
      while (now() < deadline) {
        await sleep(Math.min(1_000, deadline - now()));
        backlog.push(await db.count(system.pendingSql(db.s)));
      }
    })();
    const [enqueue] = await Promise.all([client.single(sizes.steadyLoops, sizes.steadyDurationMs), sampler]);
    const elapsedMs = now() - started;
    const processed = workers.totalCompleted;
    const reports = await workers.stop();
    const run: SteadyRun = {
      elapsedMs, enqueued: enqueue.jobs, processed,
      enqueuedPerSec: rate(enqueue.jobs, elapsedMs), processedPerSec: rate(processed, elapsedMs),
      backlogSamples: backlog, backlogAtEnd: backlog[backlog.length - 1] ?? 0, workerStats: sumStats(reports),
    };
    ctx.log(`steady, ${system.label}: ${run.processedPerSec} processed/s, ${run.enqueuedPerSec} enqueued/s, backlog at end ${run.backlogAtEnd}`);
    return run;
  });
}
