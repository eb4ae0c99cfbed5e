// Sluice as bench/scale.ts runs it (through bench/systems/process.mjs): the claims,
// results and heartbeats of every worker go through PgBouncer in transaction mode,
// its LISTEN (when on) over a direct connection. BENCH_PROCESS.variant (JSON):
// { listenUrl?: string, pollIntervalMs?: number, flushMs?: number, statsDir: string }; no listenUrl:
// poll only. Tasks: noop, and sleep (payload.ms).
//
// What the benchmark reads goes to statsDir/<pid>.json every 250 ms while it
// changes (bench/scale/worker-files.ts): the fetch-loop counters, the start time of
// every job numbered below DRAIN_BASE (the latency jobs), the first start in each
// block of DRAIN_BLOCK job numbers (a drain), the peak RSS. Files rather than the
// IPC of process.mjs, which reports only when a worker stops (a session keeps its
// workers through several phases) and whose last message can lose the race with
// the child's exit when 50 of them stop at once on a loaded machine.
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

export { install, openClient } from '../systems/sluice.mjs';

const { Worker } = await import(process.env.BENCH_SLUICE_DIST ?? new URL('../../dist/index.js', import.meta.url).href);

const DRAIN_BASE = 1e9;
const DRAIN_BLOCK = 1e8;
// Same clock as bench/lib/clock.ts.
const now = () => performance.timeOrigin + performance.now();

export async function openWorker({ url, schema, variant, concurrency, onCompleted }) {
  const { listenUrl, pollIntervalMs, flushMs, statsDir } = JSON.parse(variant);
  const latencyStarts = [];
  const firstStarts = {};
  const started = (i) => {
    const at = now();
    if (i < DRAIN_BASE) latencyStarts.push([i, at]);
    else firstStarts[Math.floor(i / DRAIN_BLOCK)] ??= at;
  };
  const worker = new Worker({
    connectionString: url,
    schema,
    concurrency,
    ...(listenUrl ? { listenConnectionString: listenUrl } : { listen: false }),
    ...(pollIntervalMs ? { pollIntervalMs } : {}),
    ...(flushMs ? { completionFlushMs: flushMs } : {}),
    // PgBouncer before 1.21 does not carry named statements across server connections.
    preparedStatements: false,
    tasks: {
      noop: (payload) => started(payload.i),
      sleep: (payload) => {
        started(payload.i);
        return new Promise((resolve) => setTimeout(resolve, payload.ms));
      },
    },
  });
  worker.on('error', (err) => process.stderr.write(`sluice worker error: ${err.message}\n`));
  // Counted here and passed on every 100 ms: process.mjs sends a progress message per
  // change (every 5 ms at most), which from 50 processes is real load on 2 cores.
  let done = 0;
  worker.on('job:complete', () => void done++);
  const passOn = setInterval(() => {
    if (done === 0) return;
    onCompleted(done);
    done = 0;
  }, 100);

  const file = join(statsDir, `${process.pid}.json`);
  let written = '';
  const writeFiles = async () => {
    const text = JSON.stringify({
      stats: worker.stats,
      latencyStarts,
      firstStarts,
      maxRssBytes: process.resourceUsage().maxRSS * 1024,
    });
    if (text === written) return;
    written = text;
    // Renamed into place: a reader never sees half a file.
    await writeFile(`${file}.tmp`, text);
    await rename(`${file}.tmp`, file);
  };
  let writing = Promise.resolve();
  const timer = setInterval(() => {
    writing = writing.then(writeFiles).catch(() => {});
  }, 250);
  return {
    start: () => worker.start(),
    async stop() {
      await worker.stop();
      clearInterval(timer);
      clearInterval(passOn);
      onCompleted(done);
      await writing;
      await writeFiles();
    },
    stats: () => worker.stats,
  };
}
