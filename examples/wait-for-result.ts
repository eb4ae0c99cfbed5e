/**
 * Waiting for a result: a handler reports progress and returns a value, which is
 * stored with the job; the code that enqueued it waits for the outcome (no polling
 * loop of your own: one NOTIFY when the job finishes). A job that fails for good
 * is an outcome too.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/wait-for-result.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_wait_for_result),
 * recreated on each run. Exits 0 when both outcomes arrived as described.
 */
import pg from 'pg';
import { migrate, PermanentFailure, Queue, Worker } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_wait_for_result';
const pool = new pg.Pool({ connectionString });
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
await migrate({ connectionString, schema });
const queue = new Queue({ pool, schema });

const worker = new Worker({
  pool,
  schema,
  tasks: {
    word_count: async ({ text }: { text: string }, { progress }) => {
      progress({ step: 'counting' }); // any JSON, or a number; stored in the job's `progress`
      if (text.trim() === '') throw new PermanentFailure('nothing to count');
      return { words: text.trim().split(/\s+/).length }; // stored as the job's `result`
    },
  },
});
worker.on('error', (err) => console.error(err.message));
await worker.start();

const id = await queue.enqueue('word_count', { text: 'the quick brown fox' });
const job = await queue.waitFor<{ text: string }>(id, { timeoutMs: 30_000 }); // throws WaitTimeoutError after 30 s
if (job.status === 'completed')
  console.log('result:', job.result); // { words: 4 }
else console.log(job.status, job.errors); // 'failed' (no attempts left) or 'cancelled'

const empty = await queue.waitFor(await queue.enqueue('word_count', { text: ' ' }), { timeoutMs: 30_000 });
console.log(`empty text: ${empty.status}: ${empty.errors?.[0]?.message}`);
await worker.stop();
await queue.close();
await pool.end();

const ok =
  job.status === 'completed' &&
  (job.result as { words: number }).words === 4 &&
  empty.status === 'failed' &&
  /nothing to count/.test(empty.errors?.[0]?.message ?? '');
console.log(ok ? 'ok' : 'FAILED');
process.exitCode = ok ? 0 : 1;
