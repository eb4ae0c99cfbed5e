// Sluice as bench/scale.ts runs it (through bench/systems/process.mjs): the claims,
// results and heartbeats of every worker go through PgBouncer in transaction mode,
// its LISTEN (when on) over a direct connection. BENCH_PROCESS.variant (JSON):
// { listenUrl?: string, pollIntervalMs?: number, statsDir: string }; no listenUrl:
// poll only. Tasks: noop, and sleep (payload.ms), both recording their start.
// The fetch-loop counters go to statsDir/<pid>.json every 250 ms while they change
// (bench/scale/worker-stats.ts reads them between phases).
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export { install, openClient } from '../systems/sluice.mjs';

const { Worker } = await import(process.env.BENCH_SLUICE_DIST ?? new URL('../../dist/index.js', import.meta.url).href);

export async function openWorker({ url, schema, variant, concurrency, onStart, onCompleted }) {
  const { listenUrl, pollIntervalMs, statsDir } = JSON.parse(variant);
  const worker = new Worker({
    connectionString: url,
    schema,
    concurrency,
    ...(listenUrl ? { listenConnectionString: listenUrl } : { listen: false }),
    ...(pollIntervalMs ? { pollIntervalMs } : {}),
    // PgBouncer before 1.21 does not carry named statements across server connections.
    preparedStatements: false,
    tasks: {
      noop: (payload) => onStart(payload.i),
      sleep: (payload) => {
        onStart(payload.i);
        return new Promise((resolve) => setTimeout(resolve, payload.ms));
      },
    },
  });
  worker.on('error', (err) => process.stderr.write(`sluice worker error: ${err.message}\n`));
  worker.on('job:complete', () => onCompleted());
  const file = join(statsDir, `${process.pid}.json`);
  let written = '';
  const writeStats = async () => {
    const text = JSON.stringify(worker.stats);
    if (text === written) return;
    written = text;
    // Renamed into place: a reader never sees half a file.
    await writeFile(`${file}.tmp`, text);
    await rename(`${file}.tmp`, file);
  };
  let writing = Promise.resolve();
  const timer = setInterval(() => {
    writing = writing.then(writeStats).catch(() => {});
  }, 250);
  return {
    start: () => worker.start(),
    async stop() {
      await worker.stop();
      clearInterval(timer);
      await writing;
    },
    stats: () => worker.stats,
  };
}
