/**
 * What unique keys, stored results and outcome notifications cost: enqueue with and
 * without a key, a worker draining jobs with and without results and waiters, and
 * the latency of queue.waitFor (enqueue → outcome in the caller).
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/keys-results.ts [jobs=5000]
 */
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { Queue, Worker } from '../src/index.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL');
const jobs = Number(process.argv[2] ?? 5_000);
const schema = `bench_keys_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 4 });
await migrate({ connectionString: url, schema });
const queue = new Queue({ pool, schema });

function rate(label: string, n: number, ms: number): void {
  console.log(`${label.padEnd(56)} ${Math.round((n / ms) * 1000).toString().padStart(7)} jobs/s  (${n} in ${ms.toFixed(0)} ms)`);
}

async function timed(label: string, n: number, fn: () => Promise<unknown>): Promise<void> {
  const start = performance.now();
  await fn();
  rate(label, n, performance.now() - start);
}

const seq = Math.min(jobs, 2_000);
await timed('enqueue, one by one, no key', seq, async () => { for (let i = 0; i < seq; i++) await queue.enqueue('t', { i }, { queue: 'e' }); });
await timed('enqueue, one by one, new key each', seq, async () => { for (let i = 0; i < seq; i++) await queue.enqueue('t', { i }, { queue: 'e', jobKey: `k${i}` }); });
await timed('enqueue, one by one, key already held (keep)', seq, async () => { for (let i = 0; i < seq; i++) await queue.enqueue('t', { i }, { queue: 'e', jobKey: 'same' }); });
await timed('enqueueMany, no key', jobs, () => queue.enqueueMany(Array.from({ length: jobs }, (_, i) => ({ task: 't', queue: 'm', payload: { i } }))));
await timed('enqueueMany, new key each', jobs, () => queue.enqueueMany(Array.from({ length: jobs }, (_, i) => ({ task: 't', queue: 'm', payload: { i }, jobKey: `m${i}` }))));

/** One worker (concurrency 50) drains `jobs` jobs; `waitAll` also waits on each through queue.waitFor. */
async function drain(label: string, result: unknown, waitAll: boolean): Promise<void> {
  const q = `drain-${label.replace(/\W+/g, '-')}`;
  const ids = await queue.enqueueMany(Array.from({ length: jobs }, (_, i) => ({ task: 'work', queue: q, payload: { i } })));
  const worker = new Worker({ connectionString: url!, schema, queues: [q], concurrency: 50, tasks: { work: async () => result } });
  worker.on('error', () => {});
  let done = 0;
  const finished = new Promise<void>((resolve) => worker.on('job:complete', () => { if (++done === jobs) resolve(); }));
  const waits = waitAll ? Promise.all(ids.map((id) => queue.waitFor(id, { timeoutMs: 600_000 }))) : Promise.resolve();
  const start = performance.now();
  await worker.start();
  await finished;
  await waits;
  rate(`drain (1 worker, concurrency 50): ${label}`, jobs, performance.now() - start);
  await worker.stop();
}
await drain('handler returns nothing', undefined, false);
await drain('handler returns a small object', { ok: true, n: 42 }, false);
await drain('every job awaited with waitFor', { ok: true }, true);

// waitFor latency: an idle worker, one job at a time.
const worker = new Worker({ connectionString: url, schema, queues: ['lat'], tasks: { echo: async (p: unknown) => p } });
worker.on('error', () => {});
await worker.start();
const samples: number[] = [];
for (let i = 0; i < 200; i++) {
  const start = performance.now();
  const id = await queue.enqueue('echo', { i }, { queue: 'lat' });
  await queue.waitFor(id, { timeoutMs: 10_000, pollIntervalMs: 60_000 });
  samples.push(performance.now() - start);
}
samples.sort((a, b) => a - b);
const pct = (p: number) => samples[Math.floor((samples.length - 1) * p)]!.toFixed(1);
console.log(`${'enqueue → waitFor resolved (idle worker, 200 runs)'.padEnd(56)} p50 ${pct(0.5)} ms  p95 ${pct(0.95)} ms  p99 ${pct(0.99)} ms`);
await worker.stop();
await queue.close();
await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
await pool.end();
