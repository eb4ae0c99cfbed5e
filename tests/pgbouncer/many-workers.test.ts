import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from '../../src/index.js';
import { ConnectionMonitor } from '../../bench/scale/monitor.js';
import { createTestSchema, statusCounts, waitFor, type TestDatabase } from '../helpers/database.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { spawnWorker, type WorkerProcess } from '../helpers/processes.js';

// Run by `npm run test:pgbouncer` (needs the Debian package pgbouncer), not by `npm test`.
const WORKERS = 8;
/** PgBouncer's server connections, shared by every worker and the Queue: fewer than the workers. */
const POOL_SIZE = 4;
const JOBS = 1_000;
/** Eight `node --import tsx` processes take most of a minute to start on a loaded 2-core machine. */
const START_AND_RUN_MS = 180_000;
const SCRIPT = fileURLToPath(new URL('./fixtures/bouncer-worker.ts', import.meta.url));

let db: TestDatabase;
let bouncer: PgBouncer;
let queue: Queue;
let monitor: ConnectionMonitor;
const workers: WorkerProcess[] = [];
// Every connection of this file's workers and Queue carries one of these names (a
// URL's application_name wins over the driver's own), so other test files' sessions
// on the same server are not counted.
const tag = `sluice-t-${randomBytes(4).toString('hex')}`;
const tags = { pool: tag, listen: `${tag}-listen` };
const tagged = (url: string, name: string) => {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
};

beforeAll(async () => {
  db = await createTestSchema('pgbouncer_many');
  await db.pool.query(`CREATE TABLE ${db.s}.runs (job_id bigint NOT NULL, worker text NOT NULL)`);
  bouncer = await startPgBouncer(db.url, POOL_SIZE);
  monitor = await ConnectionMonitor.start(db.url, bouncer.adminUrl, tags, 20);
  queue = new Queue({
    connectionString: tagged(bouncer.url, tags.pool),
    schema: db.schema,
    preparedStatements: bouncer.tracksPreparedStatements,
  });
});
afterAll(async () => {
  await Promise.all(
    workers.splice(0).map(async (w) => {
      w.child.kill('SIGTERM');
      await w.exited;
    }),
  );
  await monitor?.stop();
  await queue?.close();
  await bouncer?.stop();
  await db?.drop();
});

describe(`${WORKERS} worker processes behind PgBouncer in transaction mode`, () => {
  it(
    'run every job exactly once over a fixed server pool plus one direct LISTEN connection each',
    async () => {
      const started = await Promise.all(
        Array.from({ length: WORKERS }, (_, n) =>
          spawnWorker(
            {
              POOLER_URL: tagged(bouncer.url, tags.pool),
              LISTEN_URL: tagged(db.url, tags.listen),
              PREPARED_STATEMENTS: String(bouncer.tracksPreparedStatements),
              SLUICE_SCHEMA: db.schema,
              WORKER_NAME: `w${n}`,
              CONCURRENCY: '5',
            },
            SCRIPT,
          ),
        ),
      );
      workers.push(...started);
      monitor.reset();

      // The workers poll once an hour: these jobs reach them through NOTIFY on the direct connections.
      const ids: string[] = [];
      for (let from = 0; from < JOBS; from += 250) {
        ids.push(
          ...(await queue.enqueueMany(Array.from({ length: 250 }, (_, k) => ({ task: 'record', payload: { i: from + k } })))),
        );
      }
      await waitFor(async () => (await statusCounts(db)).completed === JOBS, `all ${JOBS} jobs completed`, 90_000).catch(
        (err: Error) => {
          // What the workers said is the first thing to read when this fails.
          throw new Error(`${err.message}\n${workers.map((w) => w.output().slice(-2_000)).join('\n')}`);
        },
      );

      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS jobs, count(DISTINCT worker)::int AS workers
       FROM ${db.s}.runs WHERE job_id = ANY($1::bigint[])`,
        [ids],
      );
      expect(rows[0].runs).toBe(JOBS);
      expect(rows[0].jobs).toBe(JOBS);
      // Several processes shared the work, not one that happened to claim it all.
      expect(rows[0].workers).toBeGreaterThan(1);
      expect(await statusCounts(db)).toEqual({ completed: JOBS });

      const peaks = monitor.reset();
      expect(peaks.samples).toBeGreaterThan(0);
      // Each worker holds exactly one direct connection, for LISTEN...
      expect(peaks.listen).toBe(WORKERS);
      // ...and everything else of every worker (and of the Queue) shares PgBouncer's pool.
      expect(peaks.serverPool).toBeGreaterThan(0);
      expect(peaks.serverPool).toBeLessThanOrEqual(POOL_SIZE);
      expect(peaks.workers).toBeLessThanOrEqual(POOL_SIZE + WORKERS);
      // At PgBouncer: at most the worker's pool of 2 plus the handler's 1 per process, plus the Queue's.
      expect(peaks.bouncerClients).toBeGreaterThan(WORKERS);
      expect(peaks.bouncerClients).toBeLessThanOrEqual(WORKERS * 3 + 10);
    },
    START_AND_RUN_MS,
  );
});
