/**
 * Sluice benchmarks: `npm run bench` (the full suite beside graphile-worker and
 * pg-boss, 3 repetitions, medians: about half an hour) or `npm run bench -- --quick`
 * (Sluice and the plain-SQL baseline, small sizes, one repetition: a smoke test). Uses DATABASE_URL, or a
 * private embedded Postgres with default durable settings. Prints Sluice's table and,
 * with the peers, the comparison table; writes JSON to bench/results/ (or --out FILE).
 * Options: --quick, --peers / --no-peers (default: peers in the full run only),
 * --reps N, --only enqueue,drain,..., --out FILE, --drain-sizes N[,N]. Every system
 * works in a fresh schema of its own in each scenario, dropped afterwards.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { FULL, QUICK, type BenchContext, type Row } from './lib/context.js';
import { openServer } from './lib/database.js';
import { formatTable, withShares } from './lib/report.js';
import { median } from './lib/stats.js';
import { copyBuild } from './lib/sluice-build.js';
import { comparisonTable, sluiceRows, type SystemRuns } from './lib/summary.js';
import { SEED_SQL, SLUICE, systemsOfRun } from './lib/systems.js';
import { drain } from './scenarios/drain.js';
import { enqueueInTurns } from './scenarios/enqueue.js';
import { latency } from './scenarios/latency.js';
import { sqlLimit } from './scenarios/sql-limit.js';
import { steady } from './scenarios/steady.js';

const SCENARIOS = ['enqueue', 'drain', 'latency', 'steady'] as const;
type Name = (typeof SCENARIOS)[number];

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    peers: { type: 'boolean' },
    'no-peers': { type: 'boolean' },
    reps: { type: 'string' },
    only: { type: 'string' },
    out: { type: 'string' },
    // Override the drain (and SQL-limit) sizes, e.g. --drain-sizes 10000 for a faster rerun.
    'drain-sizes': { type: 'string' },
  },
});
const only = (args.only ? args.only.split(',').map((s) => s.trim()) : [...SCENARIOS]) as Name[];
for (const name of only) {
  if (!SCENARIOS.includes(name)) {
    console.error(`unknown scenario "${name}"; choose from ${SCENARIOS.join(', ')}`);
    process.exit(2);
  }
}

const log = (line: string) => console.error(`[bench] ${line}`);
const sizes = { ...(args.quick ? QUICK : FULL) };
if (args['drain-sizes']) sizes.drainSizes = args['drain-sizes'].split(',').map(Number);
if (args.reps) sizes.reps = Math.max(1, Number(args.reps));
const withPeers = args['no-peers'] ? false : (args.peers ?? !args.quick);
// Before the server starts: a first run installs the peers (npm ci, about 30 s).
const systems = systemsOfRun(withPeers, log);
const build = await copyBuild();
// Read by bench/systems/sluice.mjs in every process the run starts.
process.env.BENCH_SLUICE_DIST = build.entry;
const server = await openServer(log);
const ctx: BenchContext = { url: server.url, sizes, log };
const startedAt = new Date();
const loadBefore = loadavg();
try {
  // The limit is measured first, in the same run, so shares compare like with like.
  const limit = await sqlLimit(ctx);
  const runs: SystemRuns[] = systems.map((system) => ({ system, enqueue: [], drain: [], latency: [], steady: [] }));
  // Systems take turns inside each repetition, so drift on a shared machine hits all of them.
  for (let rep = 1; rep <= sizes.reps; rep++) {
    for (const name of only) {
      log(`running ${name}${sizes.reps > 1 ? `, repetition ${rep} of ${sizes.reps}` : ''}`);
      if (name === 'enqueue') {
        // Every system at once, in turns of a fraction of a second (see enqueueInTurns).
        const turns = await enqueueInTurns(ctx, runs.map((r) => r.system));
        for (const r of runs) r.enqueue.push(turns.get(r.system)!);
        continue;
      }
      for (const r of runs) {
        if (r.system.enqueueOnly) continue;
        if (name === 'drain') r.drain.push(...await drain(ctx, r.system, r.drain));
        if (name === 'latency') r.latency.push(await latency(ctx, r.system));
        if (name === 'steady') r.steady.push(await steady(ctx, r.system));
      }
    }
  }
  const sluice = runs.find((r) => r.system === SLUICE)!;
  const seed = runs.find((r) => r.system === SEED_SQL);
  const rows: Row[] = [...limit.rows, ...sluiceRows(sluice, seed, sizes)];
  const table = withShares(rows, limit.limits);
  const comparison = withPeers ? comparisonTable(runs, sizes) : null;
  // The run whose headline figure is the median, spread into the details beside every repetition.
  const medianRun = <T>(list: T[], value: (run: T) => number) => {
    const m = median(list.map(value));
    return list.find((run) => value(run) === m);
  };
  const report = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    quick: args.quick,
    peers: withPeers,
    machine: {
      cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryBytes: totalmem(), node: process.version,
      loadavgBefore: loadBefore, loadavgAfter: loadavg(),
    },
    server: server.info,
    sizes,
    table,
    comparison,
    scenarios: {
      'sql-limit': limit.details,
      enqueue: { ...medianRun(sluice.enqueue, (r) => r.singleJobsPerSec), reps: sluice.enqueue, seed: seed?.enqueue },
      drain: { runs: sluice.drain },
      latency: { ...medianRun(sluice.latency, (r) => r.latencyMs.p50), reps: sluice.latency },
      steady: { ...medianRun(sluice.steady, (r) => r.processedPerSec), reps: sluice.steady },
    },
    systems: runs.map((r) => ({ label: r.system.label, variant: r.system.variant, enqueue: r.enqueue, drain: r.drain, latency: r.latency, steady: r.steady })),
  };
  console.log(formatTable(table));
  if (comparison) {
    console.log(`\n${comparison}\n`);
    console.log(`Medians of ${sizes.reps} repetition(s). *: the drain did not finish within max(${sizes.drainTimeoutMs / 1000} s, size / ${sizes.drainMinRate} jobs/s); ` +
      'the figure is the rate of the part drained. skip: not run, a drain at that concurrency drained less than half its jobs in time. ' +
      `∞: some jobs had not started ${sizes.latencyGraceMs / 1000} s after the last enqueue. ` +
      `SQL-only limit in this run: ${[...limit.limits].map(([size, v]) => `${v.toLocaleString('en-US')} jobs/s at ${size.toLocaleString('en-US')} jobs`).join(', ')}.`);
  }
  console.log(`load average before ${loadBefore.map((l) => l.toFixed(2)).join(' ')}, after ${loadavg().map((l) => l.toFixed(2)).join(' ')}; ` +
    `Postgres ${server.info.version} (${server.info.source}), fsync=${server.info.settings.fsync}, synchronous_commit=${server.info.settings.synchronous_commit}`);
  const out = args.out ?? join(dirname(fileURLToPath(import.meta.url)), 'results', `${startedAt.toISOString().replace(/[:.]/g, '-')}${args.quick ? '-quick' : ''}.json`);
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
  log(`wrote ${out}`);
} finally {
  await server.stop();
  await build.remove();
}
