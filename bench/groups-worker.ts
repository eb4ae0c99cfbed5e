/**
 * One worker process of bench/groups.ts. Env: DATABASE_URL, SLUICE_SCHEMA, QUEUE,
 * CONCURRENCY, WORKER_NAME; RECORD=1 keeps each run's start and end (this
 * machine's clock, shared by every process) and writes them to RECORD_FILE on
 * SIGTERM. Task `work` sleeps payload.ms. Prints "ready" once started.
 */
import { writeFileSync } from 'node:fs';
import { Worker } from '../src/index.js';

const record = process.env.RECORD === '1';
const runs: [string, number, number][] = [];
const worker = new Worker({
  connectionString: process.env.DATABASE_URL!,
  schema: process.env.SLUICE_SCHEMA!,
  workerId: process.env.WORKER_NAME,
  queues: [process.env.QUEUE!],
  concurrency: Number(process.env.CONCURRENCY ?? 20),
  // The drains check completed rows in the jobs table: the pruner must not move them away.
  maintenance: { pruner: false },
  tasks: {
    work: async ({ ms, g }: { ms: number; g?: string }) => {
      const start = Date.now();
      await new Promise((resolve) => setTimeout(resolve, ms));
      if (record) runs.push([g ?? '', start, Date.now()]);
    },
  },
});
worker.on('error', () => {});
process.on('SIGTERM', () => {
  void worker.stop().then(() => {
    if (record) writeFileSync(process.env.RECORD_FILE!, JSON.stringify(runs));
    if (process.env.BENCH_STATS === '1') process.stderr.write(`${process.env.WORKER_NAME}: ${JSON.stringify(worker.stats)}\n`);
    process.exit(0);
  });
});
await worker.start();
process.stdout.write('ready\n');
