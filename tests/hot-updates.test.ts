/**
 * The writes a worker repeats while a job runs (heartbeat, the start of a job
 * claimed ahead) must be HOT updates: no new index entries, nothing extra for
 * VACUUM. Counted per transaction in pg_stat_xact_user_tables, which is exact.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Queue } from '../src/index.js';
import { PgWorkerStore } from '../src/db/store.js';
import type { Driver } from '../src/db/driver.js';
import { createTestSchema, type TestDatabase } from './helpers/database.js';
import { openTestDriver } from './helpers/driver.js';

let db: TestDatabase;
let driver: Driver;

beforeAll(async () => {
  db = await createTestSchema('hot');
  driver = await openTestDriver(db.url);
});
afterAll(async () => {
  await driver.end();
  await db.drop();
});

it('heartbeats and start marks are HOT updates', async () => {
  const queue = new Queue({ pool: db.pool, schema: db.schema });
  await queue.enqueueMany(Array.from({ length: 10 }, () => ({ task: 'hot' })));
  await queue.close();
  const worker = new PgWorkerStore(driver, db.schema, 'hot-worker', false);
  // Claims all 10, none into a free slot: all are claimed ahead, not started.
  const { claimed } = await worker.cycle({
    completed: [],
    failed: [],
    started: [],
    queues: ['default'],
    tasks: ['hot'],
    limit: 10,
    startNow: 0,
  });
  const ids = claimed.map((j) => j.id);
  expect(ids).toHaveLength(10);

  await driver.transaction(async (tx) => {
    const store = new PgWorkerStore(
      { ...driver, query: (text, values) => tx.query(text, values) } as Driver,
      db.schema,
      'hot-worker',
      false,
    );
    const before = await hotCounts(tx);
    const renewed = await store.heartbeat(ids);
    await store.cycle({ completed: [], failed: [], started: ids, queues: [], tasks: ['hot'], limit: 0, startNow: 0 });
    const after = await hotCounts(tx);
    expect(renewed.done.size).toBe(10);
    // 10 heartbeats + 10 start marks, every one of them HOT.
    expect(after.updates - before.updates).toBe(20);
    expect(after.hot - before.hot).toBe(20);
  });
  const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE started_at IS NOT NULL`);
  expect(rows[0].n).toBe(10);
});

async function hotCounts(tx: {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}): Promise<{ updates: number; hot: number }> {
  const { rows } = await tx.query(
    `SELECT n_tup_upd::int AS updates, n_tup_hot_upd::int AS hot FROM pg_stat_xact_user_tables
     WHERE schemaname = $1 AND relname = 'jobs'`,
    [db.schema],
  );
  return rows[0] ?? { updates: 0, hot: 0 };
}
