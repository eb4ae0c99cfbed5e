/**
 * How `getStats` (`sluice stats`) answers once the pruner has moved many jobs to
 * jobs_history: fills a scratch schema with N archived jobs (finished over the
 * last 24 h, 10 queues, 2% cancelled, rows as the pruner writes them:
 * to_jsonb of a jobs row, one partition per expiry day) plus 1,000 live jobs,
 * then times the stats statement (median and max of 7, after one warm-up run)
 * and prints its plan.
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/stats.ts [rows=1000000]
 */
import pg from 'pg';
import { getStats } from '../src/admin/stats.js';
import { adminStatements } from '../src/db/statements/admin.js';
import { migrate } from '../src/migrate.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL');
const total = Number(process.argv[2] ?? 1_000_000);
const schema = `bench_stats_${process.pid}`;
const s = `"${schema}"`;
const pool = new pg.Pool({ connectionString: url, max: 2 });
const BATCH = 100_000;

try {
  await migrate({ connectionString: url, schema });
  const fill = performance.now();
  for (let day = 1; day <= 31; day++) {
    await pool.query(`SELECT ${s}.create_history_partition($1, current_date + $2::int)`, [schema, day]);
  }
  for (let from = 1; from <= total; from += BATCH) {
    const to = Math.min(total, from + BATCH - 1);
    // Through the hot table, so the archived jsonb is a real row's, as the pruner's is.
    await pool.query(
      `INSERT INTO ${s}.jobs (queue, task, status, payload, attempts, created_at, run_at, finished_at)
       SELECT 'queue_' || (i % 10), 'task_' || (i % 7), CASE WHEN i % 50 = 0 THEN 'cancelled' ELSE 'completed' END,
         jsonb_build_object('userId', i, 'email', 'user' || i || '@example.com'), 1,
         now() - (i % 86400) * interval '1 second', now() - (i % 86400) * interval '1 second',
         now() - (i % 86400) * interval '1 second'
       FROM generate_series($1::int, $2::int) i`,
      [from, to],
    );
    await pool.query(`INSERT INTO ${s}.jobs_history (id, queue, task, status, finished_at, purge_after, job)
      SELECT j.id, j.queue, j.task, j.status, j.finished_at, now() + interval '1 day' + (j.id % 30) * interval '1 day', to_jsonb(j)
      FROM ${s}.jobs j`);
    await pool.query(`TRUNCATE ${s}.jobs`);
  }
  await pool.query(`INSERT INTO ${s}.jobs (queue, task, run_at) SELECT 'queue_' || (i % 10), 'live', now() + interval '1 hour'
    FROM generate_series(1, 1000) i`);
  await pool.query(`VACUUM ANALYZE ${s}.jobs, ${s}.jobs_history`);
  const { rows: size } = await pool.query<{ size: string }>(
    `SELECT pg_size_pretty(sum(pg_total_relation_size(i.inhrelid))) AS size FROM pg_inherits i
     WHERE i.inhparent = '${s}.jobs_history'::regclass`,
  );
  console.log(
    `filled ${total} archived jobs in ${((performance.now() - fill) / 1000).toFixed(1)} s; jobs_history ${size[0]!.size}`,
  );

  const stats = await getStats(pool, schema);
  const completed = stats.queues.reduce((n, q) => n + q.completed + q.cancelled, 0);
  if (completed !== total) throw new Error(`stats counted ${completed} finished jobs, not ${total}`);
  const runs: number[] = [];
  for (let i = 0; i < 7; i++) {
    const start = performance.now();
    await getStats(pool, schema);
    runs.push(performance.now() - start);
  }
  runs.sort((a, b) => a - b);
  console.log(`getStats with ${total} archived jobs: median ${runs[3]!.toFixed(1)} ms, max ${runs[6]!.toFixed(1)} ms`);
  // The floor on this machine at this moment: a bare count of the archived rows.
  const floor: number[] = [];
  for (let i = 0; i < 7; i++) {
    const start = performance.now();
    await pool.query(`SELECT count(*) FROM ${s}.jobs_history`);
    floor.push(performance.now() - start);
  }
  floor.sort((a, b) => a - b);
  console.log(`for comparison, SELECT count(*) FROM jobs_history: median ${floor[3]!.toFixed(1)} ms`);
  const { rows: plan } = await pool.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, BUFFERS) ${adminStatements(schema).stats.replaceAll('$1', '60000')}`,
  );
  console.log(plan.map((r) => r['QUERY PLAN']).join('\n'));
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
}
