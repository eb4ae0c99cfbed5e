/**
 * How the admin API behaves on a large table: fills a scratch schema with N jobs
 * (mostly completed, 0.1% failed, 1% pending) and times listJobs pages (first
 * and deep, with and without filters), getStats and retryFailed.
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/admin.ts [rows=1000000]
 */
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { getStats, listJobs, retryFailed } from '../src/index.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL');
const total = Number(process.argv[2] ?? 1_000_000);
const schema = `bench_admin_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 2 });

async function timed<T>(label: string, fn: () => Promise<T>): Promise<T> {
  const runs: number[] = [];
  let value!: T;
  for (let i = 0; i < 5; i++) {
    const start = performance.now();
    value = await fn();
    runs.push(performance.now() - start);
  }
  runs.sort((a, b) => a - b);
  console.log(`${label.padEnd(48)} median ${runs[2]!.toFixed(1)} ms  (min ${runs[0]!.toFixed(1)}, max ${runs[4]!.toFixed(1)})`);
  return value;
}

try {
  await migrate({ connectionString: url, schema });
  const fill = performance.now();
  await pool.query(`INSERT INTO "${schema}".jobs (queue, task, status, finished_at, attempts)
    SELECT 'q' || (i % 4), 'task' || (i % 10),
           CASE WHEN i % 1000 = 0 THEN 'failed' WHEN i % 100 = 1 THEN 'pending' ELSE 'completed' END,
           CASE WHEN i % 100 = 1 THEN NULL ELSE now() - (i % 120) * interval '1 second' END, 1
    FROM generate_series(1, $1) i`, [total]);
  await pool.query(`VACUUM ANALYZE "${schema}".jobs`);
  console.log(`filled ${total} rows in ${((performance.now() - fill) / 1000).toFixed(1)} s`);

  const deep = String(Math.floor(total / 2));
  await timed('listJobs first page (50)', () => listJobs(pool, schema));
  await timed('listJobs page at id N/2 (before cursor)', () => listJobs(pool, schema, { before: deep }));
  await timed('listJobs page at id N/2 (after cursor)', () => listJobs(pool, schema, { after: deep }));
  await timed('listJobs status=failed first page', () => listJobs(pool, schema, { status: 'failed' }));
  await timed('listJobs status=failed at id N/2', () => listJobs(pool, schema, { status: 'failed', before: deep }));
  await timed('listJobs status=pending queue=q1', () => listJobs(pool, schema, { status: 'pending', queue: 'q1' }));
  await timed('listJobs task=task3 at id N/2', () => listJobs(pool, schema, { task: 'task3', before: deep }));
  await timed('getStats', () => getStats(pool, schema));
  const start = performance.now();
  const { retried } = await retryFailed(pool, schema);
  console.log(`${'retryFailed'.padEnd(48)} ${retried} jobs in ${(performance.now() - start).toFixed(1)} ms`);
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
