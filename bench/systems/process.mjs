// One benchmark process: a worker or an enqueuing client of one queue system,
// driven by the benchmark over IPC. Every system runs through this same file, so
// the loops that enqueue and the way handlers are counted are the same for all;
// only the adapter (BENCH_PROCESS.adapter: bench/systems/sluice.mjs,
// bench/systems/seed-sql.mjs, bench/peers/graphile-worker.mjs, ...) differs.
// Plain JavaScript, started by Node 20 for Sluice and by the Node 22 of
// bench/peers/ for the peers (they need it), without a TypeScript loader that
// would inflate the RSS.
//
// BENCH_PROCESS (JSON): { adapter, role: 'worker' | 'client', url, schema, variant?,
// concurrency?, recordStarts? }.
// Worker messages, out: {type:'ready'}, {type:'progress', completed, at, cpuUs},
//   {type:'stopped', completed, starts, stats, maxRssBytes, cpuUs};
//   in: {type:'go'}, {type:'stop'}.
// Client messages, in: {type:'call', id, op, args}; out: {type:'ready'},
//   {type:'result', id, value} or {type:'error', id, message}.
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const options = JSON.parse(process.env.BENCH_PROCESS ?? '{}');
const adapter = await import(pathToFileURL(options.adapter).href);
// Same clock as bench/lib/clock.ts: times from several processes can be subtracted.
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

if (options.role === 'worker') await runWorker();
else await runClient();

async function runWorker() {
  let completed = 0;
  let reported = 0;
  let cpuAtGo = null;
  /** Flat pairs: job number, time its handler started. */
  const starts = [];
  const cpuSinceGo = () => {
    if (!cpuAtGo) return 0;
    const { user, system } = process.cpuUsage(cpuAtGo);
    return user + system;
  };
  const worker = await adapter.openWorker({
    url: options.url,
    schema: options.schema,
    variant: options.variant,
    concurrency: options.concurrency,
    onStart: options.recordStarts ? (i) => void starts.push(i, now()) : () => {},
    onCompleted: (n = 1) => void (completed += n),
  });
  // Progress goes out at most every 5 ms, so IPC does not cost the worker much.
  const progress = setInterval(() => {
    if (completed === reported) return;
    reported = completed;
    process.send({ type: 'progress', completed, at: now(), cpuUs: cpuSinceGo() });
  }, 5);
  process.on('message', (msg) => {
    if (msg.type === 'go') {
      cpuAtGo = process.cpuUsage();
      void worker.start();
    }
    if (msg.type === 'stop') {
      const cpuUs = cpuSinceGo();
      void worker.stop().then(() => {
        clearInterval(progress);
        process.send({
          type: 'stopped',
          completed,
          starts,
          stats: worker.stats?.() ?? null,
          cpuUs,
          // Peak resident set size of this process over its whole life, in bytes.
          maxRssBytes: process.resourceUsage().maxRSS * 1024,
        }, () => process.exit(0));
      });
    }
  });
  process.send({ type: 'ready' });
}

async function runClient() {
  const config = { url: options.url, schema: options.schema, variant: options.variant };
  let client = null;
  const open = async () => (client ??= await adapter.openClient(config));

  /** Calls `once` from `callers` loops until `deadline`; returns how many calls completed. */
  async function loops(callers, deadline, once) {
    let done = 0;
    await Promise.all(Array.from({ length: callers }, async (_, caller) => {
      for (let n = 0; now() < deadline; n++) {
        await once(caller * 1e7 + n);
        done++;
      }
    }));
    return done;
  }

  const ops = {
    install: () => adapter.install(config),
    /** `count` pending no-op jobs, payload {i} from 0, in batches of `batch`: not timed. */
    async prefill(count, batch) {
      const c = await open();
      for (let from = 0; from < count; from += batch) {
        await c.enqueueMany(Array.from({ length: Math.min(batch, count - from) }, (_, k) => from + k));
      }
    },
    /** Single enqueues from `callers` loops for `durationMs`: { jobs, elapsedMs }. */
    async single(callers, durationMs) {
      const c = await open();
      const started = now();
      const jobs = await loops(callers, started + durationMs, (i) => c.enqueue(i));
      return { jobs, elapsedMs: now() - started };
    },
    /** `total` jobs in batches of `batch`, one after the other: { jobs, elapsedMs }. */
    async bulk(batch, total) {
      const c = await open();
      const batches = Math.max(1, Math.round(total / batch));
      const started = now();
      for (let b = 0; b < batches; b++) {
        await c.enqueueMany(Array.from({ length: batch }, (_, k) => b * batch + k));
      }
      return { jobs: batches * batch, elapsedMs: now() - started };
    },
    /**
     * `rounds` of `callers` concurrent enqueues, payload i from -1 down (outside the
     * timed jobs' 0..n-1): opens the client's connections and readies its
     * statements before anything is timed. Returns the number of jobs enqueued.
     */
    async warm(rounds, callers) {
      const c = await open();
      for (let r = 0; r < rounds; r++) {
        await Promise.all(Array.from({ length: callers }, (_, k) => c.enqueue(-1 - (r * callers + k))));
      }
      return rounds * callers;
    },
    /**
     * One enqueue every `intervalMs` on a fixed schedule (not waiting for the
     * previous one); returns when each enqueue's COMMIT was acknowledged.
     */
    async latency(jobs, intervalMs) {
      const c = await open();
      const committed = [];
      const pending = [];
      const started = now();
      for (let i = 0; i < jobs; i++) {
        await sleep(started + i * intervalMs - now());
        pending.push(c.enqueue(i).then(() => {
          committed[i] = now();
        }));
      }
      await Promise.all(pending);
      return committed;
    },
    async close() {
      await client?.close();
      client = null;
    },
  };

  process.on('message', (msg) => {
    if (msg.type !== 'call') return;
    Promise.resolve()
      .then(() => ops[msg.op](...msg.args))
      .then(
        (value) => process.send({ type: 'result', id: msg.id, value: value ?? null }),
        (err) => process.send({ type: 'error', id: msg.id, message: err?.stack ?? String(err) }),
      );
  });
  process.send({ type: 'ready' });
}
