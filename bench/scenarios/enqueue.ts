import { Queue } from '../../src/index.js';
import { enqueueStatements } from '../../src/db/statements/enqueue.js';
import type { BenchContext, ScenarioResult } from '../lib/context.js';
import { BenchSchema } from '../lib/database.js';
import { now } from '../lib/clock.js';
import { median, rate } from '../lib/stats.js';

/** Calls `once` from `callers` loops for `durationMs`; returns jobs/s. */
async function loops(callers: number, durationMs: number, once: (caller: number, n: number) => Promise<unknown>): Promise<number> {
  let done = 0;
  const started = now();
  const deadline = started + durationMs;
  await Promise.all(Array.from({ length: callers }, async (_, caller) => {
    for (let n = 0; now() < deadline; n++) {
      await once(caller, n);
      done++;
    }
  }));
  return rate(done, now() - started);
}

/**
 * Single enqueues from concurrent callers, next to the same INSERT into a copy of
 * the table without the NOTIFY trigger (the "bare INSERT" an enqueue should cost);
 * then bulk enqueueMany in batches.
 */
export async function enqueue(ctx: BenchContext): Promise<ScenarioResult> {
  const { sizes } = ctx;
  const db = await BenchSchema.create(ctx.url, 'enqueue');
  const queue = new Queue({ pool: db.pool, schema: db.schema });
  try {
    // Same columns, defaults, constraints and indexes; no trigger.
    await db.pool.query(`CREATE TABLE ${db.s}.bare_jobs (LIKE ${db.s}.jobs INCLUDING ALL)`);
    const bareInsert = enqueueStatements(db.schema).enqueue.replace(`${db.s}.jobs`, () => `${db.s}.bare_jobs`); // a function: no $ patterns
    const bareValues = ['default', 'noop', '{"i":0}', null, 0, 5, 0, null];

    const bare: number[] = [];
    const sluice: number[] = [];
    for (let round = 0; round < sizes.enqueueRounds; round++) {
      bare.push(await loops(sizes.enqueueCallers, sizes.enqueueDurationMs, () => db.pool.query(bareInsert, bareValues)));
      sluice.push(await loops(sizes.enqueueCallers, sizes.enqueueDurationMs, (c, n) => queue.enqueue('noop', { i: c * 1e7 + n })));
    }
    const single = median(sluice);
    const bareRate = median(bare);
    ctx.log(`single enqueue: ${single} jobs/s (bare INSERT ${bareRate} jobs/s)`);

    await db.pool.query(`TRUNCATE ${db.s}.jobs`);
    const batches = Math.max(1, Math.round(sizes.bulkTotal / sizes.bulkBatch));
    const started = now();
    for (let b = 0; b < batches; b++) {
      await queue.enqueueMany(Array.from({ length: sizes.bulkBatch }, (_, i) => ({ task: 'noop', payload: { i: b * sizes.bulkBatch + i } })));
    }
    const bulk = rate(batches * sizes.bulkBatch, now() - started);
    ctx.log(`bulk enqueue: ${bulk} jobs/s`);

    const callers = `${sizes.enqueueCallers} callers`;
    return {
      rows: [
        { scenario: 'enqueue', metric: `single, ${callers}`, value: single, unit: 'jobs/s' },
        { scenario: 'enqueue', metric: `bare INSERT (no trigger), ${callers}`, value: bareRate, unit: 'jobs/s' },
        { scenario: 'enqueue', metric: 'single as a share of bare INSERT', value: Math.round((single / bareRate) * 1000) / 10, unit: '%' },
        { scenario: 'enqueue', metric: `bulk, batches of ${sizes.bulkBatch}`, value: bulk, unit: 'jobs/s' },
      ],
      details: {
        callers: sizes.enqueueCallers, durationMs: sizes.enqueueDurationMs,
        singleJobsPerSec: single, bareInsertJobsPerSec: bareRate, singleRounds: sluice, bareRounds: bare,
        bulkBatch: sizes.bulkBatch, bulkJobs: batches * sizes.bulkBatch, bulkJobsPerSec: bulk,
      },
    };
  } finally {
    await db.drop();
  }
}
