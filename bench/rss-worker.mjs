// The worker process of bench/rss.ts: one Sluice Worker, through the same adapter
// the drain benchmark uses (bench/systems/sluice.mjs), that drains RSS_JOBS jobs and
// prints one JSON line of memory figures. Plain JavaScript run by plain Node, as in
// the benchmark: a TypeScript loader would inflate the RSS it measures.
//
// RSS_WORKER (JSON): { url, schema, jobs, concurrency }.
import { PerformanceObserver, constants } from 'node:perf_hooks';
import { getHeapSpaceStatistics, getHeapStatistics } from 'node:v8';

const MB = 2 ** 20;
const rss = () => process.memoryUsage.rss() / MB;
const maxRss = () => process.resourceUsage().maxRSS / 1024;
const options = JSON.parse(process.env.RSS_WORKER ?? '{}');

const atLaunch = rss();
const adapter = await import(new URL('./systems/sluice.mjs', import.meta.url).href);
const afterImport = rss();

// Garbage collections during the drain, by kind: what the young generation's
// growth costs shows up as scavenges, old-space growth as mark-compacts.
const gc = { scavenges: 0, markCompacts: 0, other: 0, ms: 0 };
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = entry.detail?.kind;
    if (kind === constants.NODE_PERFORMANCE_GC_MINOR) gc.scavenges++;
    else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) gc.markCompacts++;
    else gc.other++;
    gc.ms += entry.duration;
  }
});
observer.observe({ entryTypes: ['gc'] });

// The heap at its largest, sampled (a sample allocates a little itself), and each
// of V8's spaces at its largest (new_space: the young generation, twice its semi-space).
const peak = { heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 };
const spaces = {};
const sampler = setInterval(() => {
  const m = process.memoryUsage();
  for (const key of Object.keys(peak)) peak[key] = Math.max(peak[key], m[key] / MB);
  for (const s of getHeapSpaceStatistics()) spaces[s.space_name] = Math.max(spaces[s.space_name] ?? 0, s.space_size / MB);
}, 20);

let completed = 0;
let drained;
const done = new Promise((resolve) => (drained = resolve));
const worker = await adapter.openWorker({
  url: options.url,
  schema: options.schema,
  concurrency: options.concurrency,
  onStart: () => {},
  onCompleted: () => {
    if (++completed === options.jobs) drained();
  },
});
const started = performance.now();
await worker.start();
const afterStart = rss();
await done;
const drainMs = performance.now() - started;
const peakDuringDrain = maxRss();
await worker.stop();
clearInterval(sampler);
observer.disconnect();

const heap = getHeapStatistics();
process.stdout.write(
  `${JSON.stringify({
    completed,
    drainMs,
    rss: { atLaunch, afterImport, afterStart, peakDuringDrain, peak: maxRss(), end: rss() },
    heapPeak: peak,
    spacesPeak: spaces,
    heapEnd: { used: heap.used_heap_size / MB, total: heap.total_heap_size / MB },
    gc,
    stats: worker.stats(),
  })}\n`,
);
process.exit(0);
