import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Outbox, OutboxRelay, Queue, Worker } from '../../src/index.js';
import { createTestSchema, waitFor, type TestDatabase } from '../helpers/database.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { MemoryBroker } from '../helpers/outbox.js';

// Run by `npm run test:pgbouncer` (needs the Debian package pgbouncer), not by `npm test`.
// LISTEN is session state, which a transaction-mode pooler does not keep: whatever
// waits for a notification needs a direct connection for it (listenConnectionString).
// Every poll below is an hour long, so only a notification can wake anything in time.
let db: TestDatabase;
let bouncer: PgBouncer;
const HOUR = 3_600_000;

beforeAll(async () => {
  db = await createTestSchema('pgb_listen');
  bouncer = await startPgBouncer(db.url);
});
afterAll(async () => {
  await bouncer?.stop();
  await db?.drop();
});

/**
 * Where the LISTEN on `channel` is: clients of PgBouncer named as Sluice names its
 * LISTEN connections, and Postgres backends whose last statement was that LISTEN.
 * A notification may still reach a LISTEN through the pooler now and then (when
 * the server connection it ran on is idle), so the tests check the path, not only the outcome.
 */
async function listenPath(channel: string): Promise<{ viaBouncer: number; direct: number }> {
  const admin = new pg.Client({ connectionString: bouncer.adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query('SHOW CLIENTS');
    const viaBouncer = rows.filter((r: { application_name?: string }) => r.application_name === 'sluice-listen').length;
    const { rows: direct } = await db.pool.query(
      `SELECT 1 FROM pg_stat_activity WHERE application_name = 'sluice-listen' AND query = $1`,
      [`LISTEN "${channel}"`],
    );
    return { viaBouncer, direct: direct.length };
  } finally {
    await admin.end();
  }
}

describe('LISTEN on a direct connection behind PgBouncer in transaction mode', () => {
  it('Queue.waitFor: statements through PgBouncer, woken by a notification on listenConnectionString', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const worker = new Worker({
      connectionString: bouncer.url,
      listenConnectionString: db.url,
      preparedStatements: bouncer.tracksPreparedStatements,
      schema: db.schema,
      queues: ['wait'],
      tasks: { gated: () => gate.then(() => ({ done: true })) },
    });
    const queue = new Queue({
      connectionString: bouncer.url,
      listenConnectionString: db.url,
      preparedStatements: bouncer.tracksPreparedStatements,
      schema: db.schema,
    });
    await worker.start();
    try {
      const id = await queue.enqueue('gated', {}, { queue: 'wait' });
      const outcome = queue.waitFor(id, { pollIntervalMs: HOUR, timeoutMs: 30_000 });
      // The job runs, and waitFor has flagged it for a notification (and read it as unfinished): then let it finish.
      await waitFor(
        async () =>
          (await db.pool.query(`SELECT 1 FROM ${db.s}.jobs WHERE id = $1 AND status = 'processing' AND notify_on_finish`, [id]))
            .rows.length === 1,
        'the job running and watched',
      );
      expect(await listenPath(`sluice:${db.schema}:done`)).toEqual({ viaBouncer: 0, direct: 1 });
      release();
      const job = await outcome;
      expect(job).toMatchObject({ id, status: 'completed', result: { done: true } });
    } finally {
      release();
      await worker.stop();
      await queue.close();
    }
  });

  it('OutboxRelay: reads, watermark, lease and clean-up through PgBouncer; woken on listenConnectionString', async () => {
    const d = 'pgb.orders';
    const broker = new MemoryBroker();
    const relay = new OutboxRelay({
      connectionString: bouncer.url,
      listenConnectionString: db.url,
      preparedStatements: bouncer.tracksPreparedStatements,
      schema: db.schema,
      publisher: broker,
      destinations: [d],
      // An idle relay looks again after min(poll, lease / 3): 20 minutes at least here.
      pollIntervalMs: HOUR,
      leaseMs: HOUR,
      cleanupIntervalMs: 50,
    });
    const errors: string[] = [];
    relay.events.on('error', (err) => errors.push(err.message));
    const outbox = new Outbox({ connectionString: bouncer.url, schema: db.schema });
    await relay.start();
    try {
      // Idle first (its first pass found nothing), so only the notification can bring it back.
      await new Promise<void>((resolve) => relay.events.once('caughtUp', () => resolve()));
      // Its LISTEN is opened beside the first pass: wait until it is in place.
      await waitFor(async () => (await listenPath(`sluice:${db.schema}:out`)).direct === 1, 'the relay LISTENing');
      expect(await listenPath(`sluice:${db.schema}:out`)).toEqual({ viaBouncer: 0, direct: 1 });
      await outbox.publishMany(Array.from({ length: 20 }, (_, i) => ({ destination: d, payload: `m${i}`, key: 'k' })));
      await waitFor(() => broker.stored.length === 20, 'the 20 messages, woken by NOTIFY');
      expect(broker.ofKey('k')).toEqual(Array.from({ length: 20 }, (_, i) => `m${i}`));
      await waitFor(
        async () => Number((await db.pool.query(`SELECT count(*) AS n FROM ${db.s}.outbox`)).rows[0].n) === 0,
        'published messages deleted through PgBouncer',
      );
    } finally {
      await relay.stop();
      await outbox.close();
    }
    expect(errors).toEqual([]);
  });
});
