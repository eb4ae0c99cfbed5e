/**
 * One worker process of the chaos run (bench/chaos/run-chaos.ts spawns, kills and
 * restarts these). Env: DATABASE_URL and LISTEN_URL (each through this worker's
 * own TCP proxy, which the driver can cut; LISTEN_URL logs in as a role of the
 * worker's slot, so the driver can see whether its LISTEN session is up),
 * RECORD_URL (straight to Postgres), SLUICE_SCHEMA, WORKER_NAME, CONCURRENCY,
 * VISIBILITY_MS.
 *
 * The `chaos` task records each run in <schema>.runs, by the server clock, so
 * the driver can check that no job ever ran on two workers at once: a row when it
 * is invoked (invoked_at; started_at is when the row was written), and ended_at
 * when its work stopped. The work happens only after the row's INSERT returned and
 * ends no later than ended_at, so [started_at, ended_at] always covers it. The
 * handler honours its signal: aborted (its lock could not be renewed, or was
 * lost), it stops at once and records why; aborted before the INSERT returned, it
 * does no work at all (worked = false).
 *
 * Recording goes straight to Postgres, not through the proxy: it stands for the
 * handler's side effects, which a partition between the worker and the queue does
 * not stop (that is the case the lock-renewal abort exists for). It retries until
 * it succeeds: an outage must not turn into a handler failure (and so into a
 * re-run the driver could not tell apart from a lost job).
 *
 * Prints "ready" once started, and "event <name>" lines the driver counts
 * (listen-silent, no-answer, lock-lost, rescued <n>); exits only on SIGTERM
 * (graceful stop) or when killed.
 */
import pg from 'pg';
import { Worker } from '../../src/index.js';
import { quoteSchema } from '../../src/db/identifiers.js';
import { serveUntilSigterm } from '../../tests/helpers/processes.js';
import { abortCauseOf, type ChaosPayload } from './chaos-jobs.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`chaos-worker: ${name} is not set`);
  return value;
};
const schema = env('SLUICE_SCHEMA');
const name = env('WORKER_NAME');
const concurrency = Number(env('CONCURRENCY'));
const visibilityTimeoutMs = Number(env('VISIBILITY_MS'));
const s = quoteSchema(schema);
const record = new pg.Pool({ connectionString: env('RECORD_URL'), max: concurrency + 2, application_name: 'chaos-record' });
record.on('error', () => {});

/** Runs the statement until it succeeds; `values` is read again on every try. */
async function persist(text: string, values: () => unknown[]): Promise<void> {
  for (let delay = 20; ; delay = Math.min(delay * 2, 500)) {
    try {
      await record.query(text, values());
      return;
    } catch {
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/**
 * How long ago `t` (performance.now()) was, taken when the statement is handed to
 * the pool: a time written as `clock_timestamp() - that` is the moment on the server
 * clock, or a little later (the statement's trip), never earlier. So the moment a
 * run's work stopped is recorded as such even when Postgres was unreachable (a
 * restart) until long after.
 */
const sinceMs = (t: number) => performance.now() - t;

/** Waits `ms`, or less when the signal fires: true when it did. */
function work(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (aborted: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(aborted);
    };
    const onAbort = () => done(true);
    const timer = setTimeout(() => done(false), ms);
    signal.addEventListener('abort', onAbort);
  });
}

let runs = 0;
const worker = new Worker({
  connectionString: env('DATABASE_URL'),
  listenConnectionString: env('LISTEN_URL'),
  schema,
  workerId: name,
  queues: ['default', 'limited'],
  concurrency,
  // Small settings, so that cut-offs and locked rows resolve within seconds.
  // lockRenewalTimeoutMs stays at its default, 0.75 × the visibility timeout.
  // statementTimeoutMs also limits connecting, which takes over a second on a
  // loaded 2-core machine right after a restart: below that, every attempt fails.
  visibilityTimeoutMs,
  heartbeatIntervalMs: Math.floor(visibilityTimeoutMs / 8),
  rescueIntervalMs: Math.floor(visibilityTimeoutMs / 4),
  statementTimeoutMs: visibilityTimeoutMs,
  listenCheckIntervalMs: Math.floor(visibilityTimeoutMs / 5),
  pollIntervalMs: 1_000,
  backoff: { baseMs: 10, maxMs: 100 },
  // Finished jobs must stay in the jobs table, where the driver checks them.
  maintenance: { pruner: false },
  tasks: {
    chaos: async (payload, { job, attempt, signal }) => {
      const invokedAt = performance.now();
      const { ms } = payload as ChaosPayload;
      const run = `${name}/${++runs}`;
      const cause = () => abortCauseOf(signal.reason);
      // Idempotent, keyed on the run: a retried INSERT whose reply was lost is not a second run.
      await persist(
        `INSERT INTO ${s}.runs (run_id, job_id, attempt, worker, invoked_at)
        VALUES ($1, $2, $3, $4, clock_timestamp() - $5::float8 * interval '1 millisecond') ON CONFLICT DO NOTHING`,
        () => [run, job.id, attempt, name, sinceMs(invokedAt)],
      );
      if (signal.aborted) {
        // Aborted while its start was being written (Postgres restarting): the work never began.
        await persist(`UPDATE ${s}.runs SET ended_at = started_at, worked = false, aborted = $2 WHERE run_id = $1`, () => [
          run,
          cause(),
        ]);
        throw signal.reason;
      }
      const stopped = await work(ms, signal);
      const stoppedAt = performance.now();
      // Read on every try: the signal may fire while the end is being written.
      await persist(
        `UPDATE ${s}.runs SET ended_at = clock_timestamp() - $3::float8 * interval '1 millisecond', aborted = $2
        WHERE run_id = $1`,
        () => [run, signal.aborted ? cause() : null, sinceMs(stoppedAt)],
      );
      // Aborted after the UPDATE was sent: the run ended as an abort all the same.
      if (!stopped && signal.aborted) {
        await persist(`UPDATE ${s}.runs SET aborted = $2 WHERE run_id = $1 AND aborted IS NULL`, () => [run, cause()]);
      }
      if (signal.aborted) throw signal.reason;
    },
  },
});

const say = (line: string) => process.stdout.write(`event ${line}\n`);
// Connection trouble is expected here; the worker rides it out by itself. The
// silent-connection reports are counted by the driver as evidence of detection.
worker.on('error', (err) => {
  if (/listen connection silent/i.test(err.message)) say('listen-silent');
  else if (/no answer from postgres/i.test(err.message)) say('no-answer');
});
worker.on('job:lock-lost', () => say('lock-lost'));
worker.on('jobs:rescued', (jobs) => say(`rescued ${jobs.length}`));
await serveUntilSigterm(worker, () => record.end());
