import type { BenchContext } from '../lib/context.js';
import { inFreshSchema } from '../lib/fresh-schema.js';
import { rate } from '../lib/stats.js';
import type { System } from '../lib/systems.js';

export interface EnqueueRun {
  callers: number;
  singleJobsPerSec: number;
  bulkBatch: number;
  bulkJobs: number;
  bulkJobsPerSec: number;
}

/**
 * Single enqueues from `enqueueCallers` concurrent loops for `enqueueDurationMs`;
 * then, in a fresh schema, `bulkTotal` jobs enqueued in batches of `bulkBatch`, one
 * batch after the other. Each from a client process on the system's own API.
 */
export async function enqueue(ctx: BenchContext, system: System): Promise<EnqueueRun> {
  const { sizes } = ctx;
  const single = await inFreshSchema(ctx, system, 'enqueue', (_db, client) => client.single(sizes.enqueueCallers, sizes.enqueueDurationMs));
  const bulk = await inFreshSchema(ctx, system, 'bulk', (_db, client) => client.bulk(sizes.bulkBatch, sizes.bulkTotal));
  const run = {
    callers: sizes.enqueueCallers,
    singleJobsPerSec: rate(single.jobs, single.elapsedMs),
    bulkBatch: sizes.bulkBatch,
    bulkJobs: bulk.jobs,
    bulkJobsPerSec: rate(bulk.jobs, bulk.elapsedMs),
  };
  ctx.log(`enqueue, ${system.label}: single ${run.singleJobsPerSec} jobs/s, bulk ${run.bulkJobsPerSec} jobs/s`);
  return run;
}
