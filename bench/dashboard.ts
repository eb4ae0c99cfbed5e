/**
 * How the dashboard's HTTP API answers on a large table: fills a scratch schema
 * with N jobs (created over the last 24 h; mostly completed, 0.1% failed, 1%
 * pending), starts the dashboard, and times each request the page makes.
 *
 *   DATABASE_URL=postgres://... node --import tsx bench/dashboard.ts [rows=1000000]
 */
import pg from 'pg';
import { migrate } from '../src/migrate.js';
import { startDashboard } from '../src/dashboard/index.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('set DATABASE_URL');
const total = Number(process.argv[2] ?? 1_000_000);
const schema = `bench_dashboard_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 2 });
const token = 'bench-token-0123456789';

try {
  await migrate({ connectionString: url, schema });
  const fill = performance.now();
  await pool.query(`INSERT INTO "${schema}".jobs (queue, task, status, created_at, finished_at, attempts)
    SELECT 'q' || (i % 4), 'task' || (i % 10),
           CASE WHEN i % 1000 = 0 THEN 'failed' WHEN i % 100 = 1 THEN 'pending' ELSE 'completed' END,
           now() - ($1 - i) * (interval '24 hours' / $1),
           CASE WHEN i % 100 = 1 THEN NULL ELSE now() - ($1 - i) * (interval '24 hours' / $1) END, 1
    FROM generate_series(1, $1) i`, [total]);
  await pool.query(`VACUUM ANALYZE "${schema}".jobs`);
  console.log(`filled ${total} rows in ${((performance.now() - fill) / 1000).toFixed(1)} s`);

  const dashboard = await startDashboard({ connectionString: url, schema, token, port: 0 });
  const { rows } = await pool.query<{ mid: string }>(`SELECT (max(id) / 2)::text AS mid FROM "${schema}".jobs`);
  const hoursAgo = (h: number) => new Date(Date.now() - h * 3_600_000).toISOString();
  const requests: [string, string][] = [
    ['overview (counts + throughput chart)', 'api/overview'],
    ['jobs, first page of 50', 'api/jobs'],
    ['jobs, page of 50 in the middle (keyset)', `api/jobs?before=${rows[0]!.mid}`],
    ['jobs, failed only (0.1% of rows)', 'api/jobs?status=failed'],
    ['jobs, queue + task filter', 'api/jobs?queue=q1&task=task3'],
    ['jobs, created in the last hour', `api/jobs?from=${hoursAgo(1)}`],
    ['jobs, created 20-21 h ago (far back)', `api/jobs?from=${hoursAgo(21)}&until=${hoursAgo(20)}`],
    ['job detail with history', `api/jobs/${rows[0]!.mid}`],
    ['health (runDoctor, first run uncached)', 'api/health'],
  ];
  console.log(`| request | median ms | max ms |\n|---|---|---|`);
  for (const [label, path] of requests) {
    const runs: number[] = [];
    for (let i = 0; i < 5; i++) {
      const start = performance.now();
      const res = await fetch(new URL(path, dashboard.url), { headers: { authorization: `Bearer ${token}` } });
      await res.arrayBuffer();
      if (!res.ok) throw new Error(`${path}: ${res.status}`);
      runs.push(performance.now() - start);
    }
    runs.sort((a, b) => a - b);
    console.log(`| ${label} | ${runs[2]!.toFixed(1)} | ${runs[4]!.toFixed(1)} |`);
  }
  await dashboard.close();
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
