import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Queue } from '../src/index.js';
import { workerStatements } from '../src/db/statements/worker.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';
import { spawnWorker, type WorkerProcess } from './helpers/processes.js';

let db: TestDatabase;
let queue: Queue;
const children: WorkerProcess[] = [];

beforeAll(async () => {
  db = await createTestSchema('serial');
  queue = new Queue({ pool: db.pool, schema: db.schema });
  await db.pool.query(`CREATE TABLE ${db.s}.spans (
    job_id bigint PRIMARY KEY, worker text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz)`);
});
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await queue.close();
  await db.drop();
});

interface Span {
  job_id: string;
  worker: string;
  started_at: Date;
  ended_at: Date | null;
}

async function spans(ids: string[]): Promise<Span[]> {
  const { rows } = await db.pool.query<Span>(
    `SELECT job_id::text, worker, started_at, ended_at FROM ${db.s}.spans WHERE job_id = ANY($1::bigint[]) ORDER BY started_at`,
    [ids],
  );
  return rows;
}

/** Most spans open at any one moment (server clock), from start/end events. */
function maxOverlap(list: Span[]): number {
  const events = list.flatMap((s) => [
    { at: s.started_at.getTime(), d: 1 },
    { at: s.ended_at!.getTime(), d: -1 },
  ]);
  // At equal times an end comes first: touching spans do not overlap.
  events.sort((a, b) => a.at - b.at || a.d - b.d);
  let open = 0;
  let max = 0;
  for (const e of events) max = Math.max(max, (open += e.d));
  return max;
}

describe('global per-queue concurrency across worker processes', () => {
  it('a queue limited to 1 runs one job at a time, in order, on 3 processes that batch and prefetch', async () => {
    await queue.setQueueConcurrency('serial', 1);
    await queue.setQueueConcurrency('three', 3);
    const procs = await Promise.all(
      [1, 2, 3].map((n) =>
        spawnWorker({
          DATABASE_URL: db.url,
          SLUICE_SCHEMA: db.schema,
          WORKER_NAME: `p${n}`,
          QUEUES: 'serial,three',
          CONCURRENCY: '8',
          BATCH_SIZE: '8',
        }),
      ),
    );
    children.push(...procs);
    // Interleaved in one statement: the serial order is the order of ids.
    const ids = await queue.enqueueMany(
      Array.from({ length: 60 }, (_, i) => ({
        task: 'span',
        queue: i % 2 === 0 ? 'serial' : 'three',
        payload: { ms: 5 },
      })),
    );
    const serialIds = ids.filter((_, i) => i % 2 === 0);
    const threeIds = ids.filter((_, i) => i % 2 === 1);
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE id = ANY($1::bigint[]) AND status = 'completed'`,
          [ids],
        );
        return rows[0].n === ids.length;
      },
      'all jobs to complete',
      60_000,
    );

    const serial = await spans(serialIds);
    expect(serial).toHaveLength(30);
    for (let i = 1; i < serial.length; i++) {
      // Each job starts only after the previous one ended...
      expect(serial[i]!.started_at.getTime()).toBeGreaterThanOrEqual(serial[i - 1]!.ended_at!.getTime());
    }
    // ...and they ran in enqueue order.
    expect(serial.map((s) => s.job_id)).toEqual(serialIds);

    const three = await spans(threeIds);
    expect(three).toHaveLength(30);
    expect(maxOverlap(three)).toBeLessThanOrEqual(3);

    for (const p of procs) p.child.kill('SIGTERM');
    expect(await Promise.all(procs.map((p) => p.exited))).toEqual([0, 0, 0]);
  });

  /**
   * claim_limited for one job of `queueName` while another session holds what
   * `lock` locks: nothing, at once (a wait would hit the lock timeout and fail, a
   * jump would return another job); once that session commits, `expected`.
   */
  async function claimPastLock(queueName: string, lock: [string, unknown[]], expected: string, comeBack = false): Promise<void> {
    const q = workerStatements(db.schema);
    const [locker, claimer] = await Promise.all(
      [0, 1].map(async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        return c;
      }),
    );
    try {
      await locker!.query('BEGIN');
      await locker!.query(lock[0], lock[1]);
      await claimer!.query("SET lock_timeout = '2s'");
      // Rows without an id carry wait_until (when to come back), not a job.
      const all = async () =>
        (await claimer!.query(q.claimLimited, [`${queueName}-claimer`, queueName, ['span'], 1, 1, []])).rows as {
          id: string | null;
          wait_until: Date | null;
        }[];
      const claim = async () => (await all()).filter((r) => r.id !== null);
      const held = await all();
      expect(held.filter((r) => r.id !== null)).toEqual([]);
      // Held by another claimer, the queue's row says "come back in a moment" (0022).
      if (comeBack) expect(held.map((r) => r.wait_until instanceof Date)).toEqual([true]);
      await locker!.query('COMMIT');
      expect((await claim()).map((r) => r.id)).toEqual([expected]);
    } finally {
      await Promise.all([locker!.end(), claimer!.end()]);
    }
  }

  it('claim_limited neither waits for nor jumps a locked head job of a limited queue', async () => {
    await queue.setQueueConcurrency('head', 1);
    const [first] = await queue.enqueueMany([
      { task: 'span', queue: 'head' },
      { task: 'span', queue: 'head' },
    ]);
    // Someone holds the head row (a cancel, an admin's open transaction).
    await claimPastLock('head', [`SELECT id FROM ${db.s}.jobs WHERE id = $1 FOR UPDATE`, [first]], first!);
  });

  it('claim_limited returns at once while another session holds the queue row', async () => {
    await queue.setQueueConcurrency('held', 1);
    const [id] = await queue.enqueueMany([{ task: 'span', queue: 'held' }]);
    await claimPastLock('held', [`SELECT * FROM ${db.s}.queues WHERE name = 'held' FOR UPDATE`, []], id!, true);
  });

  it('claim_limited never hands out more than the limit to claimers racing on separate connections', async () => {
    const q = workerStatements(db.schema);
    await queue.setQueueConcurrency('race', 2);
    const clients = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        return c;
      }),
    );
    try {
      for (let round = 0; round < 10; round++) {
        await queue.enqueueMany(Array.from({ length: 10 }, () => ({ task: 'span', queue: 'race' })));
        // Every claimer asks for 5; the limit allows 2 in total.
        const results = await Promise.all(
          clients.map((c, i) => c.query(q.claimLimited, [`racer${i}`, 'race', ['span'], 5, 5, []])),
        );
        // Those that found the queue's row held get a row saying when to come back, not a job.
        const claimed = results.flatMap((r) => (r.rows as { id: string | null }[]).filter((row) => row.id !== null));
        expect(claimed.length).toBe(2);
        // Finish them (and drop the rest) for the next round.
        await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'completed' WHERE queue = 'race'`);
      }
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });
});
