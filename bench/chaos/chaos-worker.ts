/**
 * One worker process of the chaos run (bench/chaos/run-chaos.ts spawns, kills and
 * restarts these). Env: DATABASE_URL, SLUICE_SCHEMA, WORKER_NAME, CONCURRENCY,
 * VISIBILITY_MS.
 *
 * The `chaos` task records each run in <schema>.runs: a row when it starts and
 * ended_at when it finishes, both with the server clock, so the driver can check
 * that no job ever ran on two workers at once. The recording retries until it
 * succeeds: an outage must not turn into a handler failure (and so into a re-run
 * the driver could not tell apart from a lost job).
 *
 * Prints "ready" once started; exits only on SIGTERM (graceful stop) or when killed.
 */
import pg from 'pg';
import { Worker } from '../../src/index.js';
import { quoteSchema } from '../../src/db/identifiers.js';
import { serveUntilSigterm } from '../../tests/helpers/processes.js';

const url = process.env.DATABASE_URL!;
const schema = process.env.SLUICE_SCHEMA!;
const name = process.env.WORKER_NAME!;
const s = quoteSchema(schema);
const pool = new pg.Pool({ connectionString: url, max: 8, application_name: 'chaos-record' });
pool.on('error', () => {});

async function persist(text: string, values: unknown[]): Promise<void> {
  for (let delay = 20; ; delay = Math.min(delay * 2, 500)) {
    try {
      await pool.query(text, values);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

const worker = new Worker({
  connectionString: url,
  schema,
  workerId: name,
  concurrency: Number(process.env.CONCURRENCY ?? 10),
  visibilityTimeoutMs: Number(process.env.VISIBILITY_MS ?? 10_000),
  pollIntervalMs: 1_000,
  backoff: { baseMs: 10, maxMs: 100 },
  // Finished jobs must stay in the jobs table, where the driver checks them.
  maintenance: { pruner: false },
  tasks: {
    chaos: async (_payload, { job, attempt }) => {
      // Idempotent, keyed on the claim: a retried INSERT whose reply was lost is not a second run.
      await persist(`INSERT INTO ${s}.runs (job_id, attempt, worker) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
        [job.id, attempt, name]);
      await new Promise((r) => setTimeout(r, Math.random() * 4));
      await persist(`UPDATE ${s}.runs SET ended_at = clock_timestamp() WHERE job_id = $1 AND attempt = $2 AND worker = $3`,
        [job.id, attempt, name]);
    },
  },
});
// Connection trouble is expected here; the worker rides it out by itself.
worker.on('error', () => {});
await serveUntilSigterm(worker, () => pool.end());
