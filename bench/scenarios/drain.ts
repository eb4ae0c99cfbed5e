import { randomBytes } from 'node:crypto';
import type { BenchContext } from '../lib/context.js';
import { tableStats, type ScratchSchema, type TableStats } from '../lib/database.js';
import { inFreshSchema } from '../lib/fresh-schema.js';
import { now, sleep } from '../lib/clock.js';
import { BackendCpu, taggedUrl } from '../lib/postgres-cpu.js';
import { sumStats, WorkerGroup } from '../lib/processes.js';
import { rate } from '../lib/stats.js';
import type { System } from '../lib/systems.js';

export interface DrainRun {
  size: number;
  concurrency: number;
  /** Jobs drained per second; with `timedOut`, the rate of the part that was drained. */
  jobsPerSec: number;
  timedOut: boolean;
  /** Jobs whose completion was written by the end (all of them unless `timedOut`). */
  completed: number;
  elapsedMs: number;
  /** CPU of the Postgres backends serving the worker, per drained job (null: Postgres is not local). */
  postgresCpuUsPerJob: number | null;
  /** CPU of the worker process, per drained job. */
  nodeCpuUsPerJob: number;
  maxRssBytes: number;
  pendingLeft: number;
  table: TableStats;
  workerStats: Record<string, number> | null;
}

/**
 * Prefilled no-op jobs drained by one worker process at each concurrency: jobs/s
 * from the worker's go to the last completion written (the worker's own count, then
 * the jobs table confirming it: some systems report a job done before its
 * completion is written), the CPU spent per job by the worker process and by the
 * Postgres backends serving it, the worker's peak RSS, and what the jobs table
 * looks like afterwards. `earlier`: this system's runs of earlier repetitions; a
 * drain that timed out with less than half its jobs drained is not repeated, nor
 * tried at a larger size.
 */
export async function drain(ctx: BenchContext, system: System, earlier: DrainRun[] = []): Promise<DrainRun[]> {
  const runs: DrainRun[] = [];
  const sizes = [...ctx.sizes.drainSizes].sort((a, b) => a - b);
  for (const size of sizes) {
    for (const concurrency of ctx.sizes.drainConcurrency) {
      // A drain that got through less than half its jobs in time will not finish
      // next time either (pg-boss at its defaults); one that nearly made it is retried.
      const hopeless = [...earlier, ...runs].some((r) => r.timedOut && r.completed < r.size / 2 && r.concurrency === concurrency && r.size <= size);
      if (hopeless) {
        ctx.log(`drain ${size} at concurrency ${concurrency}, ${system.label}: skipped (a drain at this concurrency drained less than half its jobs in time)`);
        continue;
      }
      const run = await drainOnce(ctx, system, size, concurrency);
      ctx.log(`drain ${size} at concurrency ${concurrency}, ${system.label}: ${run.jobsPerSec} jobs/s${run.timedOut ? ` (timed out after ${run.completed} jobs)` : ''}, ` +
        `Postgres ${run.postgresCpuUsPerJob?.toFixed(0) ?? '?'} µs/job, Node ${run.nodeCpuUsPerJob.toFixed(0)} µs/job, RSS ${(run.maxRssBytes / 2 ** 20).toFixed(1)} MB`);
      runs.push(run);
    }
  }
  return runs;
}

function drainOnce(ctx: BenchContext, system: System, size: number, concurrency: number): Promise<DrainRun> {
  return inFreshSchema(ctx, system, 'drain', async (db, client) => {
    await client.prefill(size);
    // Nothing but the worker touches the database while it drains.
    await client.close();
    await db.pool.query(`ANALYZE ${system.jobsTable(db.s)}`);
    const tag = `sluice-bench-${randomBytes(4).toString('hex')}`;
    const workers = await WorkerGroup.start(system, 1, { url: taggedUrl(ctx.url, tag), schema: db.schema, concurrency });
    const cpu = await BackendCpu.start(db.pool, tag);
    const started = now();
    const limit = started + Math.max(ctx.sizes.drainTimeoutMs, (size / ctx.sizes.drainMinRate) * 1000);
    workers.go();
    const handled = await Promise.race([workers.whenCompleted(size), sleep(limit - now()).then(() => null)]);
    const written = handled === null ? null : await allWritten(db, system, handled, limit);
    const postgresCpuUs = await cpu.stop();
    const nodeCpuUs = workers.cpuUs;
    const completed = written === null ? size - (await db.count(system.unfinishedSql(db.s))) : size;
    const finished = written ?? now();
    const reports = await workers.stop();
    const table = await tableStats(db.pool, system.jobsTable(db.s));
    return {
      size, concurrency,
      jobsPerSec: rate(completed, finished - started),
      timedOut: written === null,
      completed,
      elapsedMs: finished - started,
      postgresCpuUsPerJob: postgresCpuUs === null ? null : postgresCpuUs / Math.max(1, completed),
      nodeCpuUsPerJob: nodeCpuUs / Math.max(1, completed),
      maxRssBytes: reports[0]!.maxRssBytes,
      pendingLeft: await db.count(system.pendingSql(db.s)),
      table,
      workerStats: sumStats(reports),
    };
  });
}

/**
 * When the jobs table shows every completion written: the time the first query that
 * found none unfinished was sent (not earlier than `handledAt`, when the worker
 * counted the last job), or null if that did not happen by `limit`.
 */
async function allWritten(db: ScratchSchema, system: System, handledAt: number, limit: number): Promise<number | null> {
  const sql = system.unfinishedSql(db.s);
  for (;;) {
    const sent = now();
    if ((await db.count(sql)) === 0) return Math.max(sent, handledAt);
    if (now() > limit) return null;
    await sleep(2);
  }
}
