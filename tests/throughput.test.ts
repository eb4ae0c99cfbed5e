import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { enqueueStatements } from '../src/db/statements/enqueue.js';
import { channelFor, quoteIdent } from '../src/db/identifiers.js';
import { waitFor } from './helpers/database.js';
import { useWorkers } from './helpers/workers.js';

const fx = useWorkers('throughput');

describe('deferred wake-ups (migration 0004)', () => {
  it('a deferred INSERT sends no NOTIFY itself, and the setting ends with its statement', async () => {
    const listener = new pg.Client({ connectionString: fx.db.url });
    await listener.connect();
    const channel = channelFor(fx.db.schema);
    const seen: string[] = [];
    listener.on('notification', (msg) => seen.push(msg.payload ?? ''));
    await listener.query(`LISTEN ${quoteIdent(channel)}`);
    const client = new pg.Client({ connectionString: fx.db.url });
    await client.connect();
    try {
      const q = enqueueStatements(fx.db.schema);
      const values = (queueName: string) => [queueName, 'noop', '{}', null, 0, 5, 0, null, null];
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
    let runs = 0;
    const worker = await fx.start({
      queues: ['burst'],
      pollIntervalMs: 3_600_000,
      tasks: {
        record: (p: { i: number }) => {
          runs++;
          done.add(p.i);
        },
      },
    });
    try {
      // Started together, so all but the first defer their wake-up past COMMIT.
      for (let round = 0; round < 3; round++) {
        await Promise.all(
          Array.from({ length: 20 }, (_, i) => fx.queue.enqueue('record', { i: round * 20 + i }, { queue: 'burst' })),
        );
        await waitFor(() => done.size === (round + 1) * 20, `round ${round} to run`);
      }
      const completed = async () =>
        (await fx.db.pool.query(`SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = 'burst' AND status = 'completed'`))
          .rows[0].n as number;
      await waitFor(async () => (await completed()) === 60, 'every result written');
      expect(runs).toBe(60);
    } finally {
      await worker.stop();
    }
  });
});

describe('prefetch', () => {
  it('holds at most concurrency + prefetch jobs once jobs are known to be fast, and returns unstarted ones on stop', async () => {
    let gate!: () => void;
    const opened = new Promise<void>((resolve) => (gate = resolve));
    const claims: number[] = [];
    const worker = await fx.start(
      {
        queues: ['prefetch'],
        concurrency: 1,
        prefetch: 4,
        shutdownTimeoutMs: 100,
        pollIntervalMs: 3_600_000,
        tasks: {
          fast: () => {},
          blocked: (_p, { signal }) =>
            new Promise<void>((resolve, reject) => {
              void opened.then(resolve);
              signal.addEventListener('abort', () => reject(signal.reason));
            }),
        },
      },
      (w) => w.on('jobs:claimed', (jobs) => void claims.push(jobs.length)),
    );
    const held = async () =>
      (
        await fx.db.pool.query(
          `SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = 'prefetch' AND status = 'processing'`,
        )
      ).rows[0].n as number;
    try {
      // One fast job first: until a job has finished, the worker does not prefetch.
      const first = await fx.queue.enqueue('fast', {}, { queue: 'prefetch' });
      await waitFor(async () => (await fx.queue.getJob(first))?.status === 'completed', 'the fast job');
      const ids = await fx.queue.enqueueMany(Array.from({ length: 10 }, () => ({ task: 'blocked', queue: 'prefetch' })));
      // Seen in the claims, not by polling the rows: on a loaded machine the four
      // waiting ones went back ('overdue', after 0.5 s) before a poll saw all five.
      await waitFor(() => claims.includes(5), 'a claim of 1 to run + 4 to prefetch');
      expect(Math.max(...claims)).toBe(5);
      expect(await held()).toBeLessThanOrEqual(5);
      await worker.stop();
      const { rows } = await fx.db.pool.query(
        `SELECT status, attempts, locked_by FROM ${fx.db.s}.jobs WHERE id = ANY($1::bigint[])`,
        [ids],
      );
      // The running one was aborted by stop and returned; the four waiting ones never started.
      expect(rows).toHaveLength(10);
      for (const row of rows) expect(row).toEqual({ status: 'pending', attempts: 0, locked_by: null });
    } finally {
      gate();
      await worker.stop();
    }
  });
});
