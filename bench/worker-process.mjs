// A Sluice worker in its own process, driven by the benchmark over IPC, so its
// memory is measured alone and its event loop does not share time with the
// enqueuers. Plain JavaScript on the built package (dist/): what an application
// runs, without a TypeScript loader inflating the RSS.
//
// Options come as JSON in BENCH_WORKER: { url, schema, concurrency, batchSize?,
// prefetch?, completionFlushMs?, pollIntervalMs?, recordStarts? }. Messages:
//   out: {type:'ready'}, {type:'progress', completed, at}, {type:'stopped', ...}
//   in:  {type:'go'} starts the worker, {type:'stop'} stops it and reports.
import { performance } from 'node:perf_hooks';

const { Worker } = await import(new URL('../dist/index.js', import.meta.url).href);
const options = JSON.parse(process.env.BENCH_WORKER ?? '{}');
// Same clock as bench/lib/clock.ts.
const now = () => performance.timeOrigin + performance.now();

let completed = 0;
let reported = 0;
/** Flat pairs: job number, time its handler started. */
const starts = [];
const worker = new Worker({
  connectionString: options.url,
  schema: options.schema,
  concurrency: options.concurrency,
  ...(options.batchSize ? { batchSize: options.batchSize } : {}),
  ...(options.prefetch !== undefined ? { prefetch: options.prefetch } : {}),
  ...(options.completionFlushMs !== undefined ? { completionFlushMs: options.completionFlushMs } : {}),
  ...(options.pollIntervalMs ? { pollIntervalMs: options.pollIntervalMs } : {}),
  tasks: {
    noop: options.recordStarts ? (payload) => void starts.push(payload.i, now()) : () => {},
  },
});
worker.on('error', (err) => process.stderr.write(`worker error: ${err.message}\n`));
worker.on('job:complete', () => completed++);

// Progress goes out at most every 5 ms, so IPC does not cost the worker much.
const progress = setInterval(() => {
  if (completed === reported) return;
  reported = completed;
  process.send({ type: 'progress', completed, at: now() });
}, 5);

process.on('message', (msg) => {
  if (msg.type === 'go') void worker.start();
  if (msg.type === 'stop') {
    void worker.stop().then(() => {
      clearInterval(progress);
      process.send({
        type: 'stopped',
        completed,
        starts,
        stats: worker.stats,
        // Peak resident set size of this process over its whole life, in bytes.
        maxRssBytes: process.resourceUsage().maxRSS * 1024,
      }, () => process.exit(0));
    });
  }
});
process.send({ type: 'ready' });
