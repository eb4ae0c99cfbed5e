import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, type WorkerOptions } from '../src/index.js';
import { buildQueries } from '../src/db/queries.js';
import { channelFor, quoteIdent } from '../src/db/identifiers.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

let db: TestDatabase;
let queue: Queue;

beforeAll(async () => {
  db = await createTestSchema('throughput');
  queue = new Queue({ connectionString: db.url, schema: db.schema });
});
afterAll(async () => {
  await queue.close();
  await db.drop();
});

async function startWorker(options: Omit<WorkerOptions, 'connectionString' | 'schema'>): Promise<Worker> {
  const worker = new Worker({ connectionString: db.url, schema: db.schema, ...options });
  worker.on('error', () => {});
  await worker.start();
  return worker;
}

describe('deferred wake-ups (migration 0004)', () => {
  it('a deferred INSERT sends no NOTIFY itself, and the setting ends with its statement', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const channel = channelFor(db.schema);
    const seen: string[] = [];
    listener.on('notification', (msg) => seen.push(msg.payload ?? ''));
    await listener.query(`LISTEN ${quoteIdent(channel)}`);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const q = buildQueries(db.schema);
      const values = (queueName: string) => [queueName, 'noop', '{}', null, 0, 5, 0];
      await client.query(q.enqueueDeferred, values('deferred'));
      // Same connection, next statement: the trigger must notify again.
      await client.query(q.enqueue, values('plain'));
      await client.query('SELECT pg_notify($1, $2)', [channel, 'marker']);
      // Notifications arrive in commit order: once the marker is here, so is anything before it.
      await waitFor(() => seen.includes('marker'), 'the marker notification');
      expect(seen.map((p) => (p === 'marker' ? p : (JSON.parse(p) as { q: string }).q))).toEqual(['plain', 'marker']);
    } finally {
      await client.end();
      await listener.end();
    }
  });

  it('concurrent enqueues wake an idle worker whose poll would take an hour', async () => {
    const done = new Set<number>();
    const worker = await startWorker({
      queues: ['burst'],
      pollIntervalMs: 3_600_000,
      tasks: { record: (p: { i: number }) => void done.add(p.i) },
    });
    try {
      // Started together, so all but the first defer their wake-up past COMMIT.
      for (let round = 0; round < 3; round++) {
        await Promise.all(Array.from({ length: 20 }, (_, i) => queue.enqueue('record', { i: round * 20 + i }, { queue: 'burst' })));
        await waitFor(() => done.size === (round + 1) * 20, `round ${round} to run`);
      }
      const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'burst' AND status = 'completed'`);
      expect(rows[0].n).toBe(60);
    } finally {
      await worker.stop();
    }
  });
});

describe('prefetch', () => {
  it('holds at most concurrency + prefetch jobs once jobs are known to be fast, and returns unstarted ones on stop', async () => {
    let gate!: () => void;
    const opened = new Promise<void>((resolve) => (gate = resolve));
    const worker = await startWorker({
      queues: ['prefetch'],
      concurrency: 1,
      prefetch: 4,
      shutdownTimeoutMs: 100,
      pollIntervalMs: 3_600_000,
      tasks: {
        fast: () => {},
        blocked: (_p, { signal }) => new Promise<void>((resolve, reject) => {
          void opened.then(resolve);
          signal.addEventListener('abort', () => reject(signal.reason));
        }),
      },
    });
    const held = async () => (await db.pool.query(
      `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'prefetch' AND status = 'processing'`)).rows[0].n as number;
    try {
      // One fast job first: until a job has finished, the worker does not prefetch.
      const first = await queue.enqueue('fast', {}, { queue: 'prefetch' });
      await waitFor(async () => (await queue.getJob(first))?.status === 'completed', 'the fast job');
      const ids = await queue.enqueueMany(Array.from({ length: 10 }, () => ({ task: 'blocked', queue: 'prefetch' })));
      await waitFor(async () => (await held()) >= 5, 'the worker to hold 1 running + 4 prefetched jobs');
      expect(await held()).toBe(5);
      await worker.stop();
      const { rows } = await db.pool.query(
        `SELECT status, attempts, locked_by FROM ${db.s}.jobs WHERE id = ANY($1::bigint[])`, [ids]);
      // The running one was aborted by stop and returned; the four waiting ones never started.
      expect(rows).toHaveLength(10);
      for (const row of rows) expect(row).toEqual({ status: 'pending', attempts: 0, locked_by: null });
    } finally {
      gate();
      await worker.stop();
    }
  });
});
