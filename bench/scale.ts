/**
 * Horizontal scale of workers behind PgBouncer: `npm run bench:scale`.
 *
 * Each session starts a PgBouncer of its own (transaction mode, `--pool` server
 * connections for all workers together, default 20) and worker processes whose
 * claims, results and heartbeats go through it (a pool of 2 client connections
 * each, unnamed statements: the Debian PgBouncer is older than 1.21), with a
 * direct LISTEN connection each, or polling only. With the same processes it
 * drains prefilled no-op jobs, then prefilled `--sleep-ms` jobs (each timed from
 * the first handler start to the last completion written), then measures enqueue
 * → handler start with the workers idle (one enqueue every 20 ms). Reported:
 * jobs/s, CPU per job of the workers, of the Postgres backends serving them and of
 * PgBouncer, the machine's busy cores, peak Postgres connections (pg_stat_activity)
 * and PgBouncer clients (SHOW POOLS), claims per job, latency percentiles.
 *
 * Sessions (--sessions, comma-separated; every one by default):
 *   1x100       one process, concurrency 100: the machine's limit at this total concurrency
 *   5x20        5 processes, concurrency 20 each, LISTEN each
 *   10x2        10 processes, concurrency 2 each, LISTEN each (not by default: small
 *               batches without 50 processes' load)
 *   10x2-flush50  the same with completionFlushMs 50 (not by default)
 *   50x2        50 processes, concurrency 2 each, LISTEN each
 *   50x2-poll   50 processes, concurrency 2, no LISTEN, poll every 1 s
 *   50x2-mixed  5 processes that LISTEN + 45 that poll every 1 s, concurrency 2 each
 *
 * Options: --noop N (20000), --sleep N (10000), --sleep-ms MS (5), --latency N (300),
 * --pool N (20), --timeout-s S (90: a drain still running is stopped), --out FILE (default bench/results/scale-<time>.json); --report FILE
 * prints the tables of an earlier run's JSON and runs nothing.
 * Uses DATABASE_URL, or a private embedded Postgres with default settings (fsync
 * on, max_connections 100). Needs the `pgbouncer` binary (apt-get install pgbouncer)
 * and a build (npm run build; the script copies dist/ so a rebuild cannot change it
 * halfway).
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pgbouncerVersion } from '../tests/helpers/pgbouncer.js';
import { openServer, type ServerInfo } from './lib/database.js';
import { copyBuild } from './lib/sluice-build.js';
import { formatDrains, formatLatency } from './scale/report.js';
import { runSession, type ScaleSizes, type SessionResult, type SessionSpec } from './scale/session.js';

const SESSIONS: SessionSpec[] = [
  { name: '1x100', sets: [{ count: 1, concurrency: 100, listen: true }] },
  { name: '5x20', sets: [{ count: 5, concurrency: 20, listen: true }] },
  { name: '10x2', sets: [{ count: 10, concurrency: 2, listen: true }] },
  { name: '10x2-flush50', sets: [{ count: 10, concurrency: 2, listen: true, flushMs: 50 }] },
  { name: '50x2', sets: [{ count: 50, concurrency: 2, listen: true }] },
  { name: '50x2-poll', sets: [{ count: 50, concurrency: 2, listen: false, pollIntervalMs: 1_000 }] },
  {
    name: '50x2-mixed',
    sets: [
      { count: 5, concurrency: 2, listen: true },
      { count: 45, concurrency: 2, listen: false, pollIntervalMs: 1_000 },
    ],
  },
];

/** What a run writes to its JSON file. */
interface SavedRun {
  startedAt: string;
  finishedAt: string;
  machine: { cpus: number; cpuModel: string; memoryBytes: number; node: string; loadavgBefore: number[]; loadavgAfter: number[] };
  server: ServerInfo;
  pgbouncer: string;
  sizes: ScaleSizes;
  sessions: SessionResult[];
}

function printTables(run: SavedRun): void {
  const { machine, server, sizes } = run;
  console.log(formatDrains(run.sessions, machine.cpus));
  console.log();
  console.log(formatLatency(run.sessions, sizes));
  console.log(
    `\n${machine.cpus} cores (${machine.cpuModel}); load average before ${machine.loadavgBefore.map((l) => l.toFixed(2)).join(' ')}, ` +
      `after ${machine.loadavgAfter.map((l) => l.toFixed(2)).join(' ')}; PgBouncer ${run.pgbouncer} transaction mode, ` +
      `default_pool_size ${sizes.poolSize}; Postgres ${server.version} (${server.source}), ` +
      `max_connections ${server.settings.max_connections}, fsync=${server.settings.fsync}`,
  );
}

const { values: args } = parseArgs({
  options: {
    sessions: { type: 'string' },
    noop: { type: 'string', default: '20000' },
    sleep: { type: 'string', default: '10000' },
    'sleep-ms': { type: 'string', default: '5' },
    latency: { type: 'string', default: '300' },
    pool: { type: 'string', default: '20' },
    'timeout-s': { type: 'string', default: '90' },
    out: { type: 'string' },
    report: { type: 'string' },
  },
});

function count(name: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    console.error(`--${name} must be an integer of at least ${min}, got ${value}`);
    process.exit(2);
  }
  return n;
}

const names = args.sessions
  ? args.sessions.split(',').map((s) => s.trim())
  : SESSIONS.map((s) => s.name).filter((n) => !n.startsWith('10x2'));
const unknown = names.filter((n) => !SESSIONS.some((s) => s.name === n));
if (unknown.length > 0) {
  console.error(`unknown session(s) ${unknown.join(', ')}; choose from ${SESSIONS.map((s) => s.name).join(', ')}`);
  process.exit(2);
}
const sizes: ScaleSizes = {
  noopJobs: count('noop', args.noop, 1),
  sleepJobs: count('sleep', args.sleep, 1),
  sleepMs: count('sleep-ms', args['sleep-ms'], 1),
  latencyJobs: count('latency', args.latency, 1),
  latencyIntervalMs: 20,
  poolSize: count('pool', args.pool, 1),
  drainTimeoutMs: count('timeout-s', args['timeout-s'], 1) * 1000,
};

if (args.report) {
  const saved = JSON.parse(await readFile(args.report, 'utf8')) as SavedRun;
  printTables(saved);
  process.exit(0);
}

const log = (line: string) => console.error(`[scale] ${line}`);
const bouncerVersion = pgbouncerVersion();
const build = await copyBuild();
process.env.BENCH_SLUICE_DIST = build.entry;
const server = await openServer(log);
const startedAt = new Date();
const loadBefore = loadavg();
try {
  const results: SessionResult[] = [];
  for (const spec of SESSIONS.filter((s) => names.includes(s.name))) {
    log(`session ${spec.name}`);
    results.push(await runSession({ url: server.url, sizes, log }, spec));
  }
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryBytes: totalmem(),
    node: process.version,
    loadavgBefore: loadBefore,
    loadavgAfter: loadavg(),
  };
  const out =
    args.out ??
    join(dirname(fileURLToPath(import.meta.url)), 'results', `scale-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  await mkdir(dirname(out), { recursive: true });
  const report: SavedRun = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine,
    server: server.info,
    pgbouncer: bouncerVersion.join('.'),
    sizes,
    sessions: results,
  };
  printTables(report);
  await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
  log(`wrote ${out}`);
} finally {
  await server.stop();
  await build.remove();
}
