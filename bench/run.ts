/**
 * Sluice benchmarks: `npm run bench` (full, a few minutes) or `npm run bench -- --quick`
 * (small sizes, seconds: a smoke test). Uses DATABASE_URL, or a private embedded
 * Postgres with default durable settings. Prints a table and writes JSON to
 * bench/results/ (or --out FILE). Options: --quick, --only enqueue,drain,...,
 * --out FILE, --drain-sizes N[,N]. Every scenario works in its own schema and drops it afterwards.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { FULL, QUICK, type BenchContext, type Row, type ScenarioResult } from './lib/context.js';
import { openServer } from './lib/database.js';
import { formatTable, withShares } from './lib/report.js';
import { drain } from './scenarios/drain.js';
import { enqueue } from './scenarios/enqueue.js';
import { latency } from './scenarios/latency.js';
import { sqlLimit } from './scenarios/sql-limit.js';
import { steady } from './scenarios/steady.js';

const SCENARIOS = { enqueue, drain, latency, steady } satisfies Record<string, (ctx: BenchContext) => Promise<ScenarioResult>>;
type Name = keyof typeof SCENARIOS;

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string' },
    // Override the drain (and SQL-limit) sizes, e.g. --drain-sizes 10000 for a faster rerun.
    'drain-sizes': { type: 'string' },
  },
});
const only = args.only ? args.only.split(',').map((s) => s.trim()) : Object.keys(SCENARIOS);
for (const name of only) {
  if (!(name in SCENARIOS)) {
    console.error(`unknown scenario "${name}"; choose from ${Object.keys(SCENARIOS).join(', ')}`);
    process.exit(2);
  }
}

const log = (line: string) => console.error(`[bench] ${line}`);
const server = await openServer(log);
const sizes = { ...(args.quick ? QUICK : FULL) };
if (args['drain-sizes']) sizes.drainSizes = args['drain-sizes'].split(',').map(Number);
const ctx: BenchContext = { url: server.url, sizes, log };
const startedAt = new Date();
const loadBefore = loadavg();
try {
  // The limit is measured first, in the same run, so shares compare like with like.
  const limit = await sqlLimit(ctx);
  const results: Record<string, ScenarioResult> = { 'sql-limit': limit };
  for (const name of only as Name[]) {
    log(`running ${name}`);
    results[name] = await SCENARIOS[name](ctx);
  }
  const rows: Row[] = Object.values(results).flatMap((r) => r.rows);
  const table = withShares(rows, limit.limits);
  const report = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    quick: args.quick,
    machine: {
      cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryBytes: totalmem(), node: process.version,
      loadavgBefore: loadBefore, loadavgAfter: loadavg(),
    },
    server: server.info,
    sizes,
    table,
    scenarios: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.details])),
  };
  console.log(formatTable(table));
  console.log(`load average before ${loadBefore.map((l) => l.toFixed(2)).join(' ')}, after ${loadavg().map((l) => l.toFixed(2)).join(' ')}; ` +
    `Postgres ${server.info.version} (${server.info.source}), fsync=${server.info.settings.fsync}, synchronous_commit=${server.info.settings.synchronous_commit}`);
  const out = args.out ?? join(dirname(fileURLToPath(import.meta.url)), 'results', `${startedAt.toISOString().replace(/[:.]/g, '-')}${args.quick ? '-quick' : ''}.json`);
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(report, null, 2)}\n`);
  log(`wrote ${out}`);
} finally {
  await server.stop();
}
