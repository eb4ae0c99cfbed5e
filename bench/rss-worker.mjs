// The worker process of bench/rss.ts: one Sluice Worker, through the same adapter
// the drain benchmark uses (bench/systems/sluice.mjs), that drains RSS_JOBS jobs and
// prints one JSON line of memory figures. Plain JavaScript run by plain Node, as in
// the benchmark: a TypeScript loader would inflate the RSS it measures.
//
// RSS_WORKER (JSON): { url, schema, jobs, concurrency }.
import { Session } from 'node:inspector/promises';
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
// --alloc N: where the drain allocates, garbage included (V8's sampling heap
// profiler, keeping what the collectors freed): the N largest sites, to stderr.
// The profiler costs time and memory of its own: not for the RSS figures.
const alloc = options.allocTop > 0 ? new Session() : null;
if (alloc) {
  alloc.connect();
  await alloc.post('HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
}
const started = performance.now();
await worker.start();
const afterStart = rss();
await done;
const drainMs = performance.now() - started;
const peakDuringDrain = maxRss();
if (alloc) printAllocations((await alloc.post('HeapProfiler.stopSampling')).profile, options.allocTop);
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

/** Sums a sampling heap profile by allocating function and prints the largest. */
function printAllocations(profile, top) {
  const bySite = new Map();
  let total = 0;
  const walk = (node) => {
    const self = node.selfSize;
    if (self > 0) {
      const { functionName, url, lineNumber } = node.callFrame;
      const site = `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/dist\//, 'dist/')}:${lineNumber + 1}`;
      bySite.set(site, (bySite.get(site) ?? 0) + self);
      total += self;
    }
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  const jobs = options.jobs;
  process.stderr.write(`[alloc] ${(total / MB).toFixed(1)} MB sampled, ${(total / jobs).toFixed(0)} bytes per job\n`);
  for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    process.stderr.write(`[alloc] ${(bytes / jobs).toFixed(0).padStart(6)} B/job  ${site}\n`);
  }
}
