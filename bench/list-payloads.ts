/**
 * listJobs over large payloads, with and without maxPayloadChars (outside reviews
 * 162 and 164): 100 jobs of ~1 MB payloads archived by the pruner and 200 pending,
 * then pages of 50 (both tables, one queue of each) and of 1,000, 3 runs each.
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/list-payloads.ts
 */
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { buildMaintenanceQueries, listJobs, prune, Queue, resolvePrunerConfig, type ListJobsOptions } from '../src/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `bench_list_payloads_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 2 });
const queue = new Queue({ pool, schema });
// Words, not one repeated letter: TOAST compresses this about as much as real text.
const words = Array.from({ length: 20_000 }, (_, i) => `w${i}`).join(' ');
const big = () => ({ blob: words.repeat(5).slice(0, 1_000_000) });

try {
  await migrate({ connectionString: url, schema });
  for (let i = 0; i < 4; i++) {
    await queue.enqueueMany(Array.from({ length: 25 }, () => ({ task: 't', queue: 'archived', payload: big() })));
  }
  await pool.query(
    `UPDATE "${schema}".jobs SET status = 'completed', attempts = 1, finished_at = now() - interval '5 minutes'
     WHERE queue = 'archived'`,
  );
  await prune(pool, buildMaintenanceQueries(schema), resolvePrunerConfig({ delayMs: 0 }));
  for (let i = 0; i < 8; i++) {
    await queue.enqueueMany(Array.from({ length: 25 }, () => ({ task: 't', queue: 'pending', payload: big() })));
  }
  const cases: [string, ListJobsOptions][] = [
    ['50, both tables, maxPayloadChars 4096', { limit: 50, maxPayloadChars: 4096 }],
    ['50, both tables, whole payloads', { limit: 50 }],
    ['50 pending, maxPayloadChars 4096', { limit: 50, queue: 'pending', maxPayloadChars: 4096 }],
    ['50 pending, whole payloads', { limit: 50, queue: 'pending' }],
    ['50 archived, maxPayloadChars 4096', { limit: 50, queue: 'archived', maxPayloadChars: 4096 }],
    ['50 archived, whole payloads', { limit: 50, queue: 'archived' }],
    ['1,000, maxPayloadChars 4096', { limit: 1000, maxPayloadChars: 4096 }],
  ];
  for (const [label, options] of cases) {
    const runs: number[] = [];
    for (let r = 0; r < 3; r++) {
      const started = performance.now();
      await listJobs(pool, schema, options);
      runs.push(Math.round(performance.now() - started));
    }
    console.log(`${label.padEnd(40)} ${runs.join(' / ')} ms`);
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
