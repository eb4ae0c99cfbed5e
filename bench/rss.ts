/**
 * Worker peak RSS in a drain, cheaply: `npm run bench:rss` (options: --jobs 100000,
 * --concurrency 10, --runs 3, --json, --alloc N). Each run prefills a fresh schema with no-op
 * jobs, then one Sluice Worker in a plain Node process of its own
 * (bench/rss-worker.mjs, through the drain benchmark's adapter) drains them and
 * reports its RSS after import, after start and at its peak (resourceUsage().maxRSS),
 * the heap at its largest, and the garbage collections it took. --node-args="..."
 * passes flags to the worker's Node for a closer look (--trace-gc, --heap-prof). Prints each run and
 * the medians. Uses the built dist/ (run `npm run build` first) and DATABASE_URL
 * (default postgres://postgres@127.0.0.1:5432/test).
 */
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ScratchSchema } from './lib/database.js';
import { median } from './lib/stats.js';
import { migrate } from '../src/migrate.js';
import { Queue } from '../src/queue.js';

const { values: args } = parseArgs({
  options: {
    jobs: { type: 'string', default: '100000' },
    concurrency: { type: 'string', default: '10' },
    runs: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
    // Where the drain allocates: the N largest allocation sites per job, garbage included (skews the RSS).
    alloc: { type: 'string', default: '0' },
    // Flags for the worker's Node only, to look closer (--node-args=--trace-gc, --node-args="--heap-prof ..."): not what users run.
    'node-args': { type: 'string', default: '' },
  },
});
const jobs = Number(args.jobs);
const concurrency = Number(args.concurrency);
const runs = Math.max(1, Number(args.runs));
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const CHILD = fileURLToPath(new URL('./rss-worker.mjs', import.meta.url));
const PREFILL_BATCH = 5_000;

interface RunReport {
  completed: number;
  drainMs: number;
  rss: { atLaunch: number; afterImport: number; afterStart: number; peakDuringDrain: number; peak: number; end: number };
  heapPeak: { heapTotal: number; heapUsed: number; external: number; arrayBuffers: number };
  heapEnd: { used: number; total: number };
  spacesPeak: Record<string, number>;
  gc: { scavenges: number; markCompacts: number; other: number; ms: number };
  stats: Record<string, number>;
}

async function prefill(schema: string): Promise<void> {
  await migrate({ connectionString: url, schema });
  const queue = new Queue({ connectionString: url, schema });
  try {
    for (let from = 0; from < jobs; from += PREFILL_BATCH) {
      const n = Math.min(PREFILL_BATCH, jobs - from);
      await queue.enqueueMany(Array.from({ length: n }, (_, k) => ({ task: 'noop', payload: { i: from + k } })));
    }
  } finally {
    await queue.close();
  }
}

function drainInChild(schema: string): Promise<RunReport> {
  return new Promise((resolve, reject) => {
    const nodeArgs = args['node-args'].split(' ').filter(Boolean);
    const child = spawn(process.execPath, [...nodeArgs, CHILD], {
      env: { ...process.env, RSS_WORKER: JSON.stringify({ url, schema, jobs, concurrency, allocTop: Number(args.alloc) }) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`rss worker exited with ${code}`));
      // The report is the last line (--trace-gc writes to stdout too).
      resolve(JSON.parse(out.trim().split('\n').pop()!) as RunReport);
    });
  });
}

const mb = (n: number) => n.toFixed(1);
const reports: RunReport[] = [];
console.error(
  `[rss] ${jobs} jobs, concurrency ${concurrency}, ${runs} runs; load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
for (let i = 0; i < runs; i++) {
  const db = new ScratchSchema(url, 'rss');
  try {
    await prefill(db.schema);
    await db.pool.query(`ANALYZE ${db.s}.jobs`);
    const r = await drainInChild(db.schema);
    reports.push(r);
    console.error(
      `[rss] run ${i + 1}: peak ${mb(r.rss.peak)} MB (import ${mb(r.rss.afterImport)}, start ${mb(r.rss.afterStart)}), ` +
        `heap peak ${mb(r.heapPeak.heapTotal)} total / ${mb(r.heapPeak.heapUsed)} used, external ${mb(r.heapPeak.external)}, ` +
        `${r.gc.scavenges} scavenges + ${r.gc.markCompacts} mark-compacts (${r.gc.ms.toFixed(0)} ms), ` +
        `${Math.round(r.completed / (r.drainMs / 1000))} jobs/s; largest spaces: ` +
        Object.entries(r.spacesPeak)
          .map(([name, size]) => `${name} ${mb(size)}`)
          .join(', '),
    );
  } finally {
    await db.drop();
  }
}

const med = (pick: (r: RunReport) => number) => median(reports.map(pick));
const summary = {
  jobs,
  concurrency,
  runs,
  load: loadavg(),
  medians: {
    rssAtLaunch: med((r) => r.rss.atLaunch),
    rssAfterImport: med((r) => r.rss.afterImport),
    rssAfterStart: med((r) => r.rss.afterStart),
    rssPeak: med((r) => r.rss.peak),
    heapTotalPeak: med((r) => r.heapPeak.heapTotal),
    heapUsedPeak: med((r) => r.heapPeak.heapUsed),
    externalPeak: med((r) => r.heapPeak.external),
    scavenges: med((r) => r.gc.scavenges),
    markCompacts: med((r) => r.gc.markCompacts),
    gcMs: med((r) => r.gc.ms),
    jobsPerSec: med((r) => r.completed / (r.drainMs / 1000)),
  },
  peaks: reports.map((r) => r.rss.peak),
};
if (args.json) console.log(JSON.stringify(summary, null, 2));
else {
  const m = summary.medians;
  console.log(
    `medians of ${runs}: peak RSS ${mb(m.rssPeak)} MB (runs: ${summary.peaks.map(mb).join(', ')}); ` +
      `RSS at launch ${mb(m.rssAtLaunch)}, after import ${mb(m.rssAfterImport)}, after start ${mb(m.rssAfterStart)}; ` +
      `heap peak ${mb(m.heapTotalPeak)} MB total / ${mb(m.heapUsedPeak)} used; ${m.scavenges} scavenges, ` +
      `${m.markCompacts} mark-compacts, ${m.gcMs.toFixed(0)} ms GC; ${Math.round(m.jobsPerSec)} jobs/s`,
  );
}
