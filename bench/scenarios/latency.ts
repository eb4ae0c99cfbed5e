import type { BenchContext } from '../lib/context.js';
import { inFreshSchema } from '../lib/fresh-schema.js';
import { sleep } from '../lib/clock.js';
import { sumStats, WorkerGroup } from '../lib/processes.js';
import { distribution, type Distribution } from '../lib/stats.js';
import type { System } from '../lib/systems.js';

export interface LatencyRun {
  jobs: number;
  /** Jobs whose handler started within the grace period after the last enqueue. */
  jobsSeen: number;
  /** Commit → handler start, ms; a job never seen counts as Infinity (null in JSON). */
  latencyMs: Distribution;
  workerStats: Record<string, number> | null;
}

/**
 * Idle workers; one enqueue every `latencyIntervalMs` (on a fixed schedule, not
 * waiting for the previous one) from a client process. Latency of a job = its
 * handler's start in a worker process minus the moment its enqueue's COMMIT was
 * acknowledged to the client (one machine clock). With Sluice, also counts claims
 * per job: with several idle workers, every notification can make each of them
 * ask, and all but one ask in vain.
 */
/** Untimed rounds of concurrent enqueues before the timed ones. */
const WARM_ROUNDS = 3;

export async function latency(ctx: BenchContext, system: System): Promise<LatencyRun> {
  const { sizes } = ctx;
  return inFreshSchema(ctx, system, 'latency', async (db, client) => {
    const workers = await WorkerGroup.start(system, sizes.latencyWorkers, {
      url: ctx.url, schema: db.schema, concurrency: sizes.latencyConcurrency, recordStarts: true,
    });
    workers.go();
    // Let the workers LISTEN and find the (empty) queue before timing anything.
    await sleep(500);
    // Every system's enqueuing client opens its connections and readies its
    // statements first, and its workers run those jobs: a cold connection's first
    // statements (100+ ms each while a fresh backend loads its caches) would
    // otherwise make the p99 a measure of start-up, not of pick-up.
    const warmed = await client.warm(WARM_ROUNDS, sizes.enqueueCallers);
    await Promise.race([workers.whenCompleted(warmed), sleep(sizes.latencyGraceMs)]);
    const committed = await client.latency(sizes.latencyJobs, sizes.latencyIntervalMs);
    await Promise.race([workers.whenCompleted(warmed + sizes.latencyJobs), sleep(sizes.latencyGraceMs)]);
    const reports = await workers.stop();
    const started = new Map<number, number>();
    for (const report of reports) for (const [i, at] of report.starts) if (i >= 0) started.set(i, at); // warm-up jobs: i < 0
    const latencies = committed.map((at, i) => (started.has(i) ? started.get(i)! - at : Infinity));
    const run = { jobs: sizes.latencyJobs, jobsSeen: started.size, latencyMs: distribution(latencies), workerStats: sumStats(reports) };
    ctx.log(`latency, ${system.label}: p50 ${run.latencyMs.p50.toFixed(2)} ms, p99 ${run.latencyMs.p99.toFixed(2)} ms` +
      (run.jobsSeen < run.jobs ? `, ${run.jobs - run.jobsSeen} jobs not started ${sizes.latencyGraceMs} ms after the last enqueue` : ''));
    return run;
  });
}
