/**
 * A worker that shuts down gracefully: on SIGTERM (what a deploy, `docker stop` or
 * Kubernetes sends) it stops claiming, lets running jobs finish within a grace
 * period, and hands back the ones that did not (pending again, attempt not spent)
 * for the next worker. Here the worker sends itself SIGTERM while four jobs run:
 * three short ones finish, a long one is handed back.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/graceful-shutdown.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_graceful_shutdown),
 * recreated on each run. Exits 0 when the short jobs completed and the long one is
 * pending again with its attempt given back.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { migrate, Queue, Worker } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_graceful_shutdown';
const pool = new pg.Pool({ connectionString });
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
await migrate({ connectionString, schema });
const queue = new Queue({ pool, schema });

const worker = new Worker({
  connectionString,
  schema,
  shutdownTimeoutMs: 2_000, // how long stop() lets running jobs finish
  tasks: {
    resize_image: async () => sleep(500),
    // A long job takes the signal: it fires when the grace period is over.
    export_all: async (_payload, { signal }) => sleep(60_000, undefined, { signal }),
  },
});
worker.on('error', (err) => console.error(err.message));

// once: a second SIGTERM or Ctrl-C ends the process at once (the default action).
const stopped = new Promise<void>((resolve) => {
  const stop = (signal: NodeJS.Signals) => {
    console.log(`${signal}: finishing running jobs (at most 2 s), claiming no more`);
    void worker.stop().then(resolve); // resolves once every job has finished or been handed back
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});
await worker.start();

let started = 0;
worker.on('job:start', () => {
  if (++started === 4) process.kill(process.pid, 'SIGTERM'); // as a deploy would
});
const ids = await queue.enqueueMany([
  { task: 'resize_image' },
  { task: 'resize_image' },
  { task: 'resize_image' },
  { task: 'export_all' },
]);
await stopped;

const { rows } = await pool.query<{ task: string; status: string; attempts: number }>(
  `SELECT task, status, attempts FROM ${pg.escapeIdentifier(schema)}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
  [ids],
);
await queue.close();
await pool.end();

for (const r of rows) console.log(`${r.task}: ${r.status}, attempts spent: ${r.attempts}`);
const ok =
  rows.filter((r) => r.task === 'resize_image' && r.status === 'completed').length === 3 &&
  rows.some((r) => r.task === 'export_all' && r.status === 'pending' && r.attempts === 0);
console.log(ok ? 'ok' : 'FAILED');
process.exitCode = ok ? 0 : 1;
