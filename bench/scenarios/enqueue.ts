import type { BenchContext } from '../lib/context.js';
import { ScratchSchema } from '../lib/database.js';
import { ClientProcess } from '../lib/processes.js';
import { shuffled } from '../lib/shuffled.js';
import { rate } from '../lib/stats.js';
import type { System } from '../lib/systems.js';

export interface EnqueueRun {
  callers: number;
  singleJobsPerSec: number;
  bulkBatch: number;
  bulkJobs: number;
  bulkJobsPerSec: number;
}

/** How long one system's turn of single enqueues lasts. */
const SINGLE_TURN_MS = 250;

interface Contender {
  system: System;
  db: ScratchSchema;
  client?: ClientProcess;
  single: { jobs: number; elapsedMs: number };
  bulk: { jobs: number; elapsedMs: number };
}

/**
 * Single and bulk enqueues of every system, taking turns: each system's client
 * process works in a schema of its own, and the systems enqueue one after the
 * other in short turns (single enqueues from `enqueueCallers` loops for 250 ms;
 * one batch of `bulkBatch` jobs), in a new random order each round, until each
 * has had `enqueueDurationMs` of single enqueues and `bulkTotal` bulk jobs. Why:
 * this machine's speed drifts twofold within seconds, so systems measured one
 * block after the other were compared at different speeds (bulk enqueue came out
 * 64-82% of the seed pattern in blocks, 95-100% taking turns).
 */
export async function enqueueInTurns(ctx: BenchContext, systems: System[]): Promise<Map<System, EnqueueRun>> {
  const { sizes } = ctx;
  const contenders: Contender[] = systems.map((system) => ({
    system, db: new ScratchSchema(ctx.url, `enqueue_${system.label}`),
    single: { jobs: 0, elapsedMs: 0 }, bulk: { jobs: 0, elapsedMs: 0 },
  }));
  try {
    for (const c of contenders) {
      c.client = await ClientProcess.start(c.system, { url: ctx.url, schema: c.db.schema });
      await c.client.install();
      // Opens the pool's connections and prepares the statements before anything is timed.
      await c.client.warm(5, sizes.enqueueCallers);
    }
    const singleRounds = Math.max(1, Math.round(sizes.enqueueDurationMs / SINGLE_TURN_MS));
    for (let round = 0; round < singleRounds; round++) {
      for (const c of shuffled(contenders)) add(c.single, await c.client!.single(sizes.enqueueCallers, SINGLE_TURN_MS));
    }
    const bulkRounds = Math.max(1, Math.round(sizes.bulkTotal / sizes.bulkBatch));
    for (let round = 0; round < bulkRounds; round++) {
      for (const c of shuffled(contenders)) add(c.bulk, await c.client!.bulk(sizes.bulkBatch, sizes.bulkBatch));
    }
  } finally {
    for (const c of contenders) {
      await c.client?.close().catch(() => {});
      await c.db.drop();
    }
  }
  const runs = new Map<System, EnqueueRun>();
  for (const c of contenders) {
    const run = {
      callers: sizes.enqueueCallers,
      singleJobsPerSec: rate(c.single.jobs, c.single.elapsedMs),
      bulkBatch: sizes.bulkBatch,
      bulkJobs: c.bulk.jobs,
      bulkJobsPerSec: rate(c.bulk.jobs, c.bulk.elapsedMs),
    };
    ctx.log(`enqueue, ${c.system.label}: single ${run.singleJobsPerSec} jobs/s, bulk ${run.bulkJobsPerSec} jobs/s`);
    runs.set(c.system, run);
  }
  return runs;
}

function add(total: { jobs: number; elapsedMs: number }, turn: { jobs: number; elapsedMs: number }): void {
  total.jobs += turn.jobs;
  total.elapsedMs += turn.elapsedMs;
}
