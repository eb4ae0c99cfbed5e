/**
 * Does the hot table stay small? Runs N jobs (default 1,000,000) through workers
 * while a producer keeps a steady backlog, and every 100,000 completed jobs prints
 * the size of the jobs table and its live/dead tuples (from pg_stat), the history
 * table, and how many autovacuums ran.
 *
 *   npm run bench:bloat -- [jobs=1000000] [--no-prune] [--delay-ms=60000]
 *
 * Without DATABASE_URL it starts a private embedded Postgres with default settings
 * (autovacuum on, naptime 1 min; fsync off, which bloat does not depend on), so a
 * shared server's configuration (autovacuum off, other sessions' snapshots) does not
 * decide the result. With DATABASE_URL it uses that server and prints its settings.
 *
 * --no-prune keeps finished jobs in the jobs table (pruner off) for comparison.
 * Works in its own schema (bench_bloat_<pid>), dropped at the end.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate, Queue, Worker } from '../src/index.js';
import { startEmbeddedPostgres } from '../src/dev/embedded-postgres.js';

const embedded = process.env.DATABASE_URL
  ? undefined
  : await startEmbeddedPostgres({
    dataDir: await mkdtemp(join(tmpdir(), 'sluice-bloat-pg-')),
    persistent: false,
    settings: { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' },
  });
const url = process.env.DATABASE_URL ?? embedded!.url;
const args = process.argv.slice(2);
const total = Number(args.find((a) => /^\d+$/.test(a)) ?? 1_000_000);
const prune = !args.includes('--no-prune');
const delayMs = Number(args.find((a) => a.startsWith('--delay-ms='))?.split('=')[1] ?? 60_000);
const every = Math.min(100_000, Math.max(1, Math.floor(total / 10)));
const WORKERS = 2;
const BACKLOG = 20_000;
const ENQUEUE_BATCH = 5_000;

const schema = `bench_bloat_${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 3 });
pool.on('error', () => {}); // an idle connection dropped while the embedded server stops
const s = `"${schema}"`;

interface Sample {
  table_bytes: number;
  total_bytes: number;
  live: number;
  dead: number;
  autovacuums: number;
  history_bytes: number;
}

async function sample(): Promise<Sample> {
  // Flush this session's pending statistics is not needed: the workers' are what counts,
  // and pg_stat lags them by at most a second or so.
  const { rows } = await pool.query<Sample>(`SELECT pg_relation_size('${s}.jobs')::float8 AS table_bytes,
      pg_total_relation_size('${s}.jobs')::float8 AS total_bytes,
      st.n_live_tup::float8 AS live, st.n_dead_tup::float8 AS dead, st.autovacuum_count::int AS autovacuums,
      (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i
        WHERE i.inhparent = '${s}.jobs_history'::regclass)::float8 AS history_bytes
    FROM pg_stat_user_tables st WHERE st.relid = '${s}.jobs'::regclass`);
  return rows[0]!;
}

const mb = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MB`;

try {
  await migrate({ connectionString: url, schema });
  const settings = await pool.query(`SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) AS s FROM pg_settings
    WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_cost_limit', 'autovacuum_vacuum_cost_delay', 'server_version')`);
  console.log(`${embedded ? 'embedded Postgres' : 'DATABASE_URL'}: ${settings.rows[0].s}`);
  const queue = new Queue({ pool, schema });
  let completed = 0;
  let enqueued = 0;
  let nextReport = every;
  const started = performance.now();
  let lastReport = { at: started, completed: 0 };
  let reporting = Promise.resolve();
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));

  const workers = Array.from({ length: WORKERS }, (_, i) => new Worker({
    connectionString: url,
    schema,
    workerId: `bloat-${i}`,
    concurrency: 100,
    batchSize: 100,
    tasks: { noop: async () => {} },
    maintenance: { pruner: prune ? { delayMs } : false },
  }));
  for (const w of workers) {
    w.on('error', (err) => console.error(`worker error: ${err.message}`));
    w.on('job:complete', () => {
      completed++;
      if (completed >= nextReport) {
        nextReport += every;
        const at = performance.now();
        const rate = ((completed - lastReport.completed) / ((at - lastReport.at) / 1000)).toFixed(0);
        lastReport = { at, completed };
        const count = completed;
        reporting = reporting.then(async () => {
          const x = await sample();
          console.log(`${String(count).padStart(9)} jobs  ${String(rate).padStart(6)} jobs/s  jobs table ${mb(x.table_bytes).padStart(9)}`
            + ` (with indexes ${mb(x.total_bytes).padStart(9)})  live ${String(x.live).padStart(8)}  dead ${String(x.dead).padStart(8)}`
            + `  autovacuums ${String(x.autovacuums).padStart(3)}  history ${mb(x.history_bytes)}`);
        });
      }
      if (completed >= total) done();
    });
  }

  console.log(`bloat bench: ${total} jobs, ${WORKERS} workers x 100, backlog ~${BACKLOG}, pruner ${prune ? `on (delay ${delayMs} ms)` : 'off'}`);
  console.log(`${'completed'.padStart(9)}  rate       size of the hot table, its tuples, autovacuum runs, history size`);
  // Keep about BACKLOG jobs pending: enqueue more whenever the workers caught up.
  const producer = (async () => {
    while (enqueued < total) {
      if (enqueued - completed > BACKLOG) {
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      const n = Math.min(ENQUEUE_BATCH, total - enqueued);
      await queue.enqueueMany(Array.from({ length: n }, () => ({ task: 'noop', payload: {} })));
      enqueued += n;
    }
  })();
  await Promise.all(workers.map((w) => w.start()));
  await producer;
  await finished;
  await reporting;
  const seconds = (performance.now() - started) / 1000;
  console.log(`${total} jobs in ${seconds.toFixed(0)} s (${(total / seconds).toFixed(0)} jobs/s)`);
  await Promise.all(workers.map((w) => w.stop()));
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
  await embedded?.stop();
}
