/**
 * What one job writes to the WAL, record by record: a Worker drains prefilled no-op
 * jobs, and pg_waldump reads back the records of that stretch that touch the
 * schema's relations.
 *
 *   DATABASE_URL=postgres://... npm run bench:wal -- [--jobs 20000] [--concurrency 10] [--completed-jobs keep|delete] [--fillfactor 80]
 *
 * Counts, not timings: the same code and settings give the same records whatever
 * else the machine is doing, so a change to the cycle's SQL or the table can be
 * judged on this shared 2-core machine where jobs/s drift by half. Other
 * databases' records in the same stretch are left out by relation.
 *
 * Needs the server's WAL directory and its pg_waldump on this machine (a local
 * server read as root or as the postgres user): `--waldump` (default: the
 * pg_waldump beside the server's major version under /usr/lib/postgresql) and
 * `--wal-dir` (default: the server's data_directory + /pg_wal). Uses dist/ (run
 * `npm run build` first).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Worker } from '../dist/index.js';
import { migratedSchema } from './lib/database.js';

const { values: args } = parseArgs({
  options: {
    jobs: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '10' },
    'completed-jobs': { type: 'string', default: 'keep' },
    fillfactor: { type: 'string' },
    waldump: { type: 'string' },
    'wal-dir': { type: 'string' },
  },
});
const jobs = Number(args.jobs);
const completedJobs = args['completed-jobs'] === 'delete' ? 'delete' : 'keep';
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const scratch = await migratedSchema(url, 'wal');
const pool = new pg.Pool({ connectionString: url, max: 2 });
const s = scratch.s;
try {
  const { rows: server } = await pool.query<{ dir: string; major: string }>(
    `SELECT current_setting('data_directory') AS dir, current_setting('server_version_num')::int / 10000 AS major`,
  );
  const walDir = args['wal-dir'] ?? join(server[0]!.dir, 'pg_wal');
  const waldump = args.waldump ?? `/usr/lib/postgresql/${server[0]!.major}/bin/pg_waldump`;
  if (!existsSync(waldump) || !existsSync(walDir)) {
    throw new Error(`need pg_waldump (${waldump}) and the WAL directory (${walDir}) on this machine: see --waldump, --wal-dir`);
  }
  if (args.fillfactor) await pool.query(`ALTER TABLE ${s}.jobs SET (fillfactor = ${Number(args.fillfactor)})`);
  await pool.query(
    `INSERT INTO ${s}.jobs (queue, task, payload) SELECT 'default', 'noop', '{}' FROM generate_series(1, $1::int)`,
    [jobs],
  );
  await pool.query(`VACUUM ANALYZE ${s}.jobs`);
  const { rows: relations } = await pool.query<{ node: string; name: string }>(
    `SELECT pg_relation_filenode(oid)::text AS node, relname AS name FROM pg_class
     WHERE relnamespace = $1::regnamespace AND pg_relation_filenode(oid) IS NOT NULL`,
    [scratch.schema],
  );
  const names = new Map(relations.map((r) => [r.node, r.name]));
  const lsn = async () => (await pool.query<{ l: string }>('SELECT pg_current_wal_insert_lsn()::text AS l')).rows[0]!.l;

  const worker = new Worker({
    connectionString: url,
    schema: scratch.schema,
    concurrency: Number(args.concurrency),
    completedJobs,
    maintenance: { pruner: false },
    tasks: { noop: () => {} },
  });
  worker.on('error', () => {});
  const start = await lsn();
  await worker.start();
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${s}.jobs WHERE status IN ('pending', 'processing')`,
    );
    if (rows[0]!.n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await worker.stop();
  const end = await lsn();

  const dump = execFileSync(waldump, ['-p', walDir, '-s', start, '-e', end], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const counts = new Map<string, { records: number; bytes: number }>();
  let records = 0;
  let bytes = 0;
  let fullPages = 0;
  for (const line of dump.split('\n')) {
    const m = /rmgr: (\w+)\s.*len \(rec\/tot\):\s*\d+\/\s*(\d+).*desc: (\w+)/.exec(line);
    if (!m) continue;
    const touched = [...new Set([...line.matchAll(/rel \d+\/\d+\/(\d+)/g)].map((r) => names.get(r[1]!)))];
    if (touched.length === 0 || touched.every((t) => t === undefined)) continue;
    const key = `${m[1]}/${m[3]} on ${touched.filter(Boolean).join(', ')}`;
    const c = counts.get(key) ?? { records: 0, bytes: 0 };
    c.records++;
    c.bytes += Number(m[2]);
    counts.set(key, c);
    records++;
    bytes += Number(m[2]);
    if (line.includes('FPW')) fullPages++;
  }
  const per = (n: number) => (n / jobs).toFixed(2);
  console.log(
    `${jobs} jobs, concurrency ${args.concurrency}, completedJobs ${completedJobs}` +
      `${args.fillfactor ? `, fillfactor ${args.fillfactor}` : ''}: per job ${per(records)} WAL records, ` +
      `${per(bytes)} bytes (${per(fullPages)} with a full-page image)`,
  );
  for (const [key, c] of [...counts].sort((a, b) => b[1].records - a[1].records)) {
    if (c.records / jobs >= 0.01) console.log(`  ${per(c.records).padStart(6)}  ${key}`);
  }
} finally {
  await pool.end();
  await scratch.drop();
}
