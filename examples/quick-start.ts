/**
 * Quick start: a signup commits the user and the job that welcomes them in one
 * transaction, so the job exists exactly when the user does. A signup that rolls
 * back (here: the email is taken) leaves no job behind. A worker sends the email.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/quick-start.ts
 *
 * Works in a schema of its own (SLUICE_SCHEMA, default example_quick_start),
 * recreated on each run. Exits 0 when the one committed signup was welcomed once.
 */
// #region imports
import pg from 'pg';
import { migrate, Queue, Worker } from 'sluice';

const connectionString = process.env.DATABASE_URL;
const schema = process.env.SLUICE_SCHEMA ?? 'example_quick_start'; // where Sluice's tables go (default 'sluice')
// The application's tables sit next to Sluice's in this example, so `users` needs no schema prefix.
const pool = new pg.Pool({ connectionString, options: `-c search_path=${schema}` });
// pg reports a lost connection as an 'error' event, on the pool while a client is idle and on the
// client while it is checked out: unheard, it ends the process. 'connect' fires before the first hand-over.
pool.on('error', (err) => console.error(`pg: ${err.message}`));
pool.on('connect', (client) => client.on('error', (err) => console.error(`pg: ${err.message}`)));
// #endregion
await pool.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`); // each run starts afresh

// #region setup
await migrate({ connectionString, schema }); // creates or updates Sluice's tables; safe from many hosts at once
await pool.query('CREATE TABLE IF NOT EXISTS users (id serial PRIMARY KEY, email text UNIQUE NOT NULL)');
const queue = new Queue({ pool, schema });
// #endregion

// #region enqueue
async function signUp(email: string): Promise<string> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query('INSERT INTO users (email) VALUES ($1) RETURNING id', [email]);
    const jobId = await queue.enqueue('send_welcome', { userId: rows[0].id }, { tx: client });
    await client.query('COMMIT'); // the user and the job exist from here on, together
    client.release();
    return jobId;
  } catch (err) {
    // Neither the user nor the job. A connection whose ROLLBACK fails is dropped, not
    // pooled: a statement pg's query_timeout gave up on may still run there, in a
    // transaction the next request on it would commit.
    await client.query('ROLLBACK').then(
      () => client.release(),
      () => client.release(true),
    );
    throw err;
  }
}
// #endregion

// #region worker
const sent: string[] = [];
async function sendWelcomeEmail(to: string, { signal }: { signal: AbortSignal }): Promise<void> {
  signal.throwIfAborted(); // fires on timeout, cancellation, or a stop past the grace period
  sent.push(to); // stands in for your mailer
}

const worker = new Worker({
  // Connections of its own, sized for it; on them a killed worker's claim cannot run
  // late (see "A lock on the jobs table" under Guarantees). `pool` works too, but not the
  // one its handlers use below unless its max is concurrency + 3 or more (a warning says so).
  connectionString,
  schema,
  concurrency: 20,
  tasks: {
    send_welcome: async ({ userId }: { userId: number }, { signal }) => {
      const { rows } = await pool.query('SELECT email FROM users WHERE id = $1', [userId]);
      await sendWelcomeEmail(rows[0].email, { signal });
    },
  },
});
worker.on('error', (err) => console.error(err.message)); // connection trouble it rides out
await worker.start();
// { exiting: true }: the process ends right after, so even a handler that ignores its
// abort signal ends with it, and its job can go back to pending at once.
process.once('SIGTERM', () => void worker.stop({ exiting: true }).then(() => process.exit(0)));
// #endregion

const jobId = await signUp('ada@example.com');
const again = await signUp('ada@example.com').catch((err: Error) => err); // unique violation: rolled back
const job = await queue.waitFor(jobId, { timeoutMs: 10_000 });
const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${pg.escapeIdentifier(schema)}.jobs`);

await worker.stop();
await queue.close();
await pool.end();

console.log(`signed up ada@example.com: job ${jobId} ${job.status}, welcome sent to ${sent.join(', ')}`);
console.log(`second signup with the same email: ${again instanceof Error ? `rolled back (${again.message})` : 'committed?!'}`);
console.log(`jobs in the schema: ${rows[0]!.n}`);
const ok = job.status === 'completed' && sent.length === 1 && again instanceof Error && rows[0]!.n === 1;
console.log(ok ? 'ok' : 'FAILED');
process.exitCode = ok ? 0 : 1;
