import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, ConfigError, getJob } from '../src/index.js';
import { prune } from '../src/maintenance/pruner.js';
import { resolvePrunerConfig, type PrunerOptions } from '../src/maintenance/options.js';
import { maintenanceStatements } from '../src/db/statements/maintenance.js';
import { createTestSchema, nextEvent, waitFor, type TestDatabase } from './helpers/database.js';

const DAY = 86_400_000;
let db: TestDatabase;
let queue: Queue;

beforeAll(async () => {
  db = await createTestSchema('prune');
});
afterAll(async () => {
  await queue?.close();
  await db.drop();
});

/** A fresh schema per test, so counts never mix. */
async function freshSchema(): Promise<TestDatabase> {
  const t = await createTestSchema('prune');
  cleanups.push(() => t.drop());
  return t;
}
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c();
});

/** Inserts a job straight into a state, finished `agoMs` ago. Returns its id. */
async function insertJob(t: TestDatabase, status: string, agoMs: number | null, queueName = 'default'): Promise<string> {
  const { rows } = await t.pool.query(
    `INSERT INTO ${t.s}.jobs (queue, task, payload, status, attempts, finished_at)
     VALUES ($1, 'noop', '{"keep":"me"}', $2, 1, CASE WHEN $3::float8 IS NULL THEN NULL ELSE now() - $3::float8 * interval '1 millisecond' END)
     RETURNING id::text AS id`,
    [queueName, status, agoMs],
  );
  return rows[0].id;
}

function run(t: TestDatabase, options: PrunerOptions) {
  return prune(t.pool, maintenanceStatements(t.schema), resolvePrunerConfig(options));
}

async function where(t: TestDatabase, id: string): Promise<'jobs' | 'history' | 'gone'> {
  const hot = await t.pool.query(`SELECT 1 FROM ${t.s}.jobs WHERE id = $1`, [id]);
  if (hot.rowCount) return 'jobs';
  const hist = await t.pool.query(`SELECT 1 FROM ${t.s}.jobs_history WHERE id = $1`, [id]);
  return hist.rowCount ? 'history' : 'gone';
}

async function partitions(t: TestDatabase): Promise<string[]> {
  const { rows } = await t.pool.query(
    `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = $1::regclass ORDER BY 1`,
    [`${t.s}.jobs_history`],
  );
  return rows.map((r) => r.relname);
}

describe('pruner', () => {
  it('archive mode moves finished jobs past the delay, in batches, by queue and status retention', async () => {
    const t = await freshSchema();
    const ids = {
      pending: await insertJob(t, 'pending', null),
      processing: await insertJob(t, 'processing', null),
      fresh: await insertJob(t, 'completed', 100),
      done1: await insertJob(t, 'completed', 10_000),
      done2: await insertJob(t, 'completed', 20_000),
      cancelled: await insertJob(t, 'cancelled', 30_000),
      failedOld: await insertJob(t, 'failed', 3 * DAY),
      failedExpired: await insertJob(t, 'failed', 31 * DAY),
      completedOld: await insertJob(t, 'completed', 3 * DAY),
      noisy: await insertJob(t, 'completed', 10_000, 'noisy'),
    };
    const result = await run(t, {
      delayMs: 5_000,
      batchSize: 2,
      retention: { completed: DAY, failed: 30 * DAY },
      queues: { noisy: { completed: 0 } },
    });
    // 6 rows left the hot table (3 batches of 2, then an empty one ends the run).
    expect(result).toMatchObject({ removed: 6, archived: 3 });
    expect(await where(t, ids.pending)).toBe('jobs');
    expect(await where(t, ids.processing)).toBe('jobs');
    expect(await where(t, ids.fresh)).toBe('jobs');
    expect(await where(t, ids.done1)).toBe('history');
    expect(await where(t, ids.done2)).toBe('history');
    expect(await where(t, ids.cancelled)).toBe('history');
    // Failed jobs are dead letters: they stay in the hot table for their 30 days' retention.
    expect(await where(t, ids.failedOld)).toBe('jobs');
    expect(await where(t, ids.failedExpired)).toBe('gone');
    // Past a 1-day retention: deleted.
    expect(await where(t, ids.completedOld)).toBe('gone');
    expect(await where(t, ids.noisy)).toBe('gone');

    // Each archived row sits in the partition of the day it expires.
    const { rows } = await t.pool.query(
      `SELECT id::text, tableoid::regclass::text AS part, purge_after - finished_at AS keep
       FROM ${t.s}.jobs_history ORDER BY id`,
    );
    const cancelled = rows.find((r) => r.id === ids.cancelled)!;
    expect(cancelled.keep).toMatchObject({ days: 7 });
    expect(cancelled.part).toMatch(/jobs_history_\d{8}$/);

    // getJob still finds archived jobs, whole.
    queue = new Queue({ pool: t.pool, schema: t.schema });
    const archived = await queue.getJob(ids.done1);
    expect(archived).toMatchObject({ id: ids.done1, status: 'completed', payload: { keep: 'me' }, attempts: 1 });
    expect(archived!.finished_at).toBeInstanceOf(Date);
    expect(await queue.getJob(ids.completedOld)).toBeUndefined();
    // So does the admin API (CLI, dashboard).
    expect(await getJob(t.pool, t.schema, ids.failedOld)).toMatchObject({ id: ids.failedOld, status: 'failed' });
  });

  it('drops history partitions whose day has passed, whole, and keeps the others', async () => {
    const t = await freshSchema();
    const twoDaysAgo = new Date(Date.now() - 2 * DAY).toISOString().slice(0, 10);
    await t.pool.query(`SELECT ${t.s}.create_history_partition($1, $2::date)`, [t.schema, twoDaysAgo]);
    await t.pool.query(
      `INSERT INTO ${t.s}.jobs_history (id, queue, task, status, finished_at, purge_after, job)
       SELECT g, 'default', 'noop', 'completed', $1::date, $1::date + interval '1 hour', '{}'
       FROM generate_series(1, 1000) g`,
      [twoDaysAgo],
    );
    const expiredName = `jobs_history_${twoDaysAgo.replaceAll('-', '')}`;
    expect(await partitions(t)).toContain(expiredName);

    const result = await run(t, {});
    expect(result.droppedPartitions).toEqual([expiredName]);
    const left = await partitions(t);
    expect(left).not.toContain(expiredName);
    // Partitions for the coming days (today and tomorrow + each retention) exist.
    expect(left.length).toBeGreaterThanOrEqual(3);
    const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM ${t.s}.jobs_history`);
    expect(rows[0].n).toBe(0);
  });

  it('delete mode deletes jobs past their retention and archives nothing', async () => {
    const t = await freshSchema();
    const recent = await insertJob(t, 'completed', 10_000);
    const old = await insertJob(t, 'completed', 2 * 3_600_000);
    const failed = await insertJob(t, 'failed', 2 * 3_600_000);
    const result = await run(t, { mode: 'delete', delayMs: 0, retention: { completed: 3_600_000, failed: DAY } });
    expect(result).toEqual({ removed: 1, archived: 0, droppedPartitions: [], groupBuckets: 0 });
    expect(await where(t, old)).toBe('gone');
    expect(await where(t, recent)).toBe('jobs');
    expect(await where(t, failed)).toBe('jobs');
    expect(await partitions(t)).toEqual([]);
  });

  it('two pruners on separate connections move every row exactly once', async () => {
    const t = await freshSchema();
    await t.pool.query(
      `INSERT INTO ${t.s}.jobs (task, status, attempts, finished_at)
       SELECT 'noop', 'completed', 1, now() - interval '1 minute' FROM generate_series(1, 3000)`,
    );
    const options = { delayMs: 1_000, batchSize: 100 };
    const [a, b] = await Promise.all([run(t, options), run(t, options)]);
    // Each run stops after 20 batches; run again until the table is empty.
    let removed = a.removed + b.removed;
    while (removed < 3000) {
      const more = await run(t, options);
      if (more.removed === 0) break;
      removed += more.removed;
    }
    expect(removed).toBe(3000);
    const { rows } = await t.pool.query(
      `SELECT (SELECT count(*)::int FROM ${t.s}.jobs) AS hot,
              (SELECT count(*)::int FROM ${t.s}.jobs_history) AS history,
              (SELECT count(DISTINCT id)::int FROM ${t.s}.jobs_history) AS distinct_ids`,
    );
    expect(rows[0]).toEqual({ hot: 0, history: 3000, distinct_ids: 3000 });
    expect(a.removed).toBeGreaterThan(0);
    expect(b.removed).toBeGreaterThan(0);
  });

  it('a worker leader prunes what it completed; getJob follows the job into history', async () => {
    const t = await freshSchema();
    const q = new Queue({ pool: t.pool, schema: t.schema });
    const worker = new Worker({
      connectionString: t.url,
      schema: t.schema,
      tasks: { noop: async () => {} },
      maintenance: { pruner: { delayMs: 0, intervalMs: 50 } },
    });
    worker.on('error', () => {});
    const elected = nextEvent(worker, 'leader:elected');
    await worker.start();
    await elected;
    expect(worker.isLeader).toBe(true);
    try {
      const ids = await q.enqueueMany(Array.from({ length: 50 }, () => ({ task: 'noop' })));
      await waitFor(async () => {
        const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM ${t.s}.jobs_history`);
        return rows[0].n === 50;
      }, 'all 50 jobs to reach the history');
      const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM ${t.s}.jobs`);
      expect(rows[0].n).toBe(0);
      expect(await q.getJob(ids[0]!)).toMatchObject({ status: 'completed', attempts: 1, task: 'noop' });
    } finally {
      await worker.stop();
    }
  });

  it('rejects bad pruner options with a ConfigError', () => {
    expect(() => resolvePrunerConfig({ mode: 'shred' as 'delete' })).toThrow(ConfigError);
    expect(() => resolvePrunerConfig({ retention: { done: 1 } as never })).toThrow(/unknown option "done"/);
    expect(() => resolvePrunerConfig({ retention: { failed: -1 } })).toThrow(ConfigError);
    expect(() => resolvePrunerConfig({ queues: { '': { failed: 1 } } })).toThrow(ConfigError);
    expect(() => new Worker({ connectionString: db.url, tasks: { a: () => {} }, maintenance: { leaseMs: 1 } })).toThrow(
      /maintenance.leaseMs/,
    );
  });
});
