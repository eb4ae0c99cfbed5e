import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker } from '../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from './helpers/database.js';

// Sessions that sit in an open transaction must not stall workers: claims use
// SKIP LOCKED and never wait on a row another session holds, and an old snapshot
// only keeps dead row versions around (bloat), it blocks nobody.
let db: TestDatabase;
let queue: Queue;
const sessions: pg.Client[] = [];

beforeAll(async () => {
  db = await createTestSchema('longtx');
  queue = new Queue({ pool: db.pool, schema: db.schema });
});
afterAll(async () => {
  for (const c of sessions) await c.end().catch(() => {});
  await queue.close();
  await db.drop();
});

async function session(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: db.url, application_name: 'sluice-test-longtx' });
  client.on('error', () => {});
  await client.connect();
  sessions.push(client);
  return client;
}

describe('long transactions', () => {
  it('idle-in-transaction sessions holding a snapshot, a row lock and an uncommitted job do not hang a worker', async () => {
    const ids = await queue.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ task: 't', payload: { i } })));
    const [held] = ids;

    const snapshot = await session();
    await snapshot.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await snapshot.query(`SELECT count(*) FROM ${db.s}.jobs`);
    const locker = await session();
    await locker.query('BEGIN');
    await locker.query(`SELECT id FROM ${db.s}.jobs WHERE id = $1 FOR UPDATE`, [held]);
    const enqueuer = await session();
    await enqueuer.query('BEGIN');
    const uncommitted = await queue.enqueue('t', { late: true }, { tx: enqueuer });
    // All three are now 'idle in transaction'.
    const idle = await db.pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE application_name = 'sluice-test-longtx' AND state = 'idle in transaction'`);
    expect(idle.rows[0].n).toBe(3);

    const ran = new Set<string>();
    const worker = new Worker({
      connectionString: db.url,
      schema: db.schema,
      pollIntervalMs: 200,
      tasks: { t: async (_p, { job }) => void ran.add(job.id) },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      // Everything but the locked row runs while the sessions stay open.
      await waitFor(() => ran.size === 49, '49 jobs to run past the open transactions');
      expect(ran.has(held!)).toBe(false);
      expect(ran.has(uncommitted)).toBe(false);
      expect((await queue.getJob(held!))?.status).toBe('pending');

      await locker.query('COMMIT');
      await enqueuer.query('COMMIT');
      await waitFor(() => ran.has(held!) && ran.has(uncommitted), 'the released and the committed job');
      // The snapshot is still open and still sees the table as it was.
      const seen = await snapshot.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE status = 'pending'`);
      expect(seen.rows[0].n).toBe(50);
    } finally {
      await worker.stop();
      await snapshot.query('COMMIT');
    }
  });

  it('an old snapshot keeps dead row versions of finished jobs from being vacuumed (bloat)', async () => {
    const snapshot = await session();
    await snapshot.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await snapshot.query('SELECT 1'); // takes the snapshot: its xmin now holds back cleanup
    const ids = await queue.enqueueMany(Array.from({ length: 200 }, () => ({ task: 'bloat' })));
    // Claim and finish the jobs: every row gets rewritten twice, leaving dead versions.
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'processing' WHERE id = ANY($1::bigint[])`, [ids]);
    await db.pool.query(`UPDATE ${db.s}.jobs SET status = 'completed' WHERE id = ANY($1::bigint[])`, [ids]);

    const vacuum = new pg.Client({ connectionString: db.url });
    const notices: string[] = [];
    vacuum.on('notice', (n) => notices.push(n.message ?? ''));
    await vacuum.connect();
    try {
      await vacuum.query(`VACUUM (VERBOSE) ${db.s}.jobs`);
    } finally {
      await vacuum.end();
      await snapshot.query('COMMIT');
    }
    const stuck = notices.join('\n').match(/(\d+) are dead but not yet removable/);
    expect(stuck, notices.join('\n')).not.toBeNull();
    expect(Number(stuck![1])).toBeGreaterThanOrEqual(400);
  });
});
