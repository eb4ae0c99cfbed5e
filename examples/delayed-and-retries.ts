/**
 * Delayed jobs and retries: a reminder that runs two seconds from now, a call to a
 * flaky service that fails twice and then succeeds (retried with backoff), and a
 * job that gives up at once with PermanentFailure.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/delayed-and-retries.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_delayed_retries),
 * recreated on each run. Exits 0 when each job ended as described.
 */
import pg from 'pg';
import { migrate, PermanentFailure, Queue, Worker } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_delayed_retries';
const pool = new pg.Pool({ connectionString });
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
await migrate({ connectionString, schema });
const queue = new Queue({ pool, schema });

let calls = 0;
async function callFlakyService(): Promise<string> {
  calls += 1;
  if (calls < 3) throw new Error(`service unavailable (call ${calls})`);
  return 'synced';
}

const worker = new Worker({
  pool,
  schema,
  tasks: {
    remind: async ({ note }: { note: string }) => console.log(`reminder: ${note}`),
    sync_account: {
      maxAttempts: 5, // the first run and up to 4 retries
      backoff: { shape: 'exponential', baseMs: 200, maxMs: 5_000 }, // 100–200 ms, then 200–400 ms, …
      handler: async () => ({ outcome: await callFlakyService() }), // throwing fails the attempt
    },
    charge_card: async ({ cardId }: { cardId: string }) => {
      throw new PermanentFailure(`card ${cardId} was declined`); // no retry can help
    },
  },
});
worker.on('error', (err) => console.error(err.message));
worker.on('job:retry', (job, { error, nextAttempt }) =>
  console.log(`${job.task}: ${String(error)}; attempt ${nextAttempt} soon`),
);
await worker.start();

const enqueuedAt = Date.now();
const reminder = await queue.enqueue('remind', { note: 'call Ada back' }, { delayMs: 2_000 }); // or { runAt: date }
const sync = await queue.enqueue('sync_account', { accountId: 7 });
const charge = await queue.enqueue('charge_card', { cardId: 'c_42' }, { maxAttempts: 3 });

const wait = { timeoutMs: 15_000 };
const [remindJob, syncJob, chargeJob] = await Promise.all([
  queue.waitFor(reminder, wait),
  queue.waitFor(sync, wait),
  queue.waitFor(charge, wait),
]);
const waitedMs = Date.now() - enqueuedAt;
await worker.stop();
await queue.close();
await pool.end();

console.log(`remind: ${remindJob.status} after ${waitedMs} ms (delayed 2000 ms)`);
console.log(`sync_account: ${syncJob.status} on attempt ${syncJob.attempts}, result ${JSON.stringify(syncJob.result)}`);
console.log(`charge_card: ${chargeJob.status} after ${chargeJob.attempts} attempt: ${chargeJob.last_error?.split('\n')[0]}`);
const ok =
  remindJob.status === 'completed' &&
  waitedMs >= 1_900 &&
  syncJob.status === 'completed' &&
  syncJob.attempts === 3 &&
  chargeJob.status === 'failed' &&
  chargeJob.attempts === 1;
console.log(ok ? 'ok' : 'FAILED');
process.exitCode = ok ? 0 : 1;
