import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { DuplicateJobError, ValidationError, type JobRow } from '../src/index.js';
import { workerStatements } from '../src/db/statements/worker.js';
import { waitFor } from './helpers/database.js';
import { deferred, useWorkers } from './helpers/workers.js';

const fx = useWorkers('unique');

async function keyed(key: string): Promise<JobRow[]> {
  const { rows } = await fx.db.pool.query(
    `SELECT id::text AS id, status, payload, key_scope FROM ${fx.db.s}.jobs WHERE job_key = $1 ORDER BY id`,
    [key],
  );
  return rows;
}

/** Claims with the worker's statement (no results to write). */
async function claim(queueName: string, task: string): Promise<JobRow[]> {
  const { rows } = await fx.db.pool.query(workerStatements(fx.db.schema).cycle, [
    'W',
    [],
    [],
    [],
    [],
    [],
    [],
    [],
    [queueName],
    [task],
    10,
    [],
    'unused',
    [],
    10,
    [],
    [],
    [],
    [],
  ]);
  return rows.filter((r) => r.id !== null);
}

/**
 * Runs `fn` on `n` separate connections at once, each inside its own transaction,
 * so the enqueues really race (each waits on the others' uncommitted index entries).
 */
async function race<T>(n: number, fn: (client: pg.Client, i: number) => Promise<T>): Promise<PromiseSettledResult<T>[]> {
  const clients = await Promise.all(
    Array.from({ length: n }, async () => {
      const c = new pg.Client(fx.db.url);
      await c.connect();
      return c;
    }),
  );
  try {
    await Promise.all(clients.map((c) => c.query('BEGIN')));
    return await Promise.all(
      clients.map(async (c, i) => {
        try {
          const value = await fn(c, i);
          await c.query('COMMIT');
          return { status: 'fulfilled', value } as const;
        } catch (reason) {
          await c.query('ROLLBACK');
          return { status: 'rejected', reason } as const;
        }
      }),
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

describe('unique jobs', () => {
  it('keep: a second enqueue with the key returns the pending job and changes nothing', async () => {
    const a = await fx.queue.enqueue('sync', { v: 1 }, { jobKey: 'keep-1' });
    const b = await fx.queue.enqueue('sync', { v: 2 }, { jobKey: 'keep-1', jobKeyMode: 'keep' });
    expect(b).toBe(a);
    expect(await keyed('keep-1')).toEqual([{ id: a, status: 'pending', payload: { v: 1 }, key_scope: 'pending' }]);
  });

  it('replace: the pending job takes the new payload and run_at', async () => {
    const a = await fx.queue.enqueue('sync', { v: 1 }, { jobKey: 'replace-1', delayMs: 3_600_000 });
    const runAt = new Date(Date.now() + 60_000);
    const b = await fx.queue.enqueue('sync', { v: 2 }, { jobKey: 'replace-1', jobKeyMode: 'replace', runAt });
    expect(b).toBe(a);
    const job = await fx.queue.getJob(a);
    expect(job).toMatchObject({ payload: { v: 2 }, status: 'pending', job_key: 'replace-1' });
    expect(job!.run_at.getTime()).toBe(runAt.getTime());
    expect(await keyed('replace-1')).toHaveLength(1);
  });

  it('error: throws DuplicateJobError naming the holder, inserts nothing', async () => {
    const a = await fx.queue.enqueue('sync', {}, { jobKey: 'error-1' });
    const err = await fx.queue.enqueue('sync', {}, { jobKey: 'error-1', jobKeyMode: 'error' }).catch((e) => e);
    expect(err).toBeInstanceOf(DuplicateJobError);
    expect(err).toMatchObject({ code: 'DUPLICATE_JOB', existingId: a, jobKey: 'error-1' });
    expect(await keyed('error-1')).toHaveLength(1);
  });

  it('concurrent enqueues of one key from 12 transactions make exactly one job (keep, replace, error)', async () => {
    for (const mode of ['keep', 'replace', 'error'] as const) {
      const key = `race-${mode}`;
      const results = await race(12, (c, i) => fx.queue.enqueue('sync', { i }, { jobKey: key, jobKeyMode: mode, tx: c }));
      const rows = await keyed(key);
      expect(rows).toHaveLength(1);
      const ok = results.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<string>).value);
      if (mode === 'error') {
        expect(ok).toEqual([rows[0]!.id]);
        const failed = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
        expect(failed).toHaveLength(11);
        for (const f of failed) expect(f.reason).toBeInstanceOf(DuplicateJobError);
      } else {
        expect(ok).toHaveLength(12);
        expect(new Set(ok)).toEqual(new Set([rows[0]!.id]));
      }
    }
  });

  it('many keys enqueued concurrently in different orders: one job per key', async () => {
    const keys = Array.from({ length: 40 }, (_, i) => `many-${i}`);
    const results = await race(8, async (c, i) => {
      const order = i % 2 === 0 ? keys : [...keys].reverse();
      const ids = await fx.queue.enqueueMany(
        order.map((k) => ({ task: 'sync', payload: { by: i }, jobKey: k })),
        { tx: c },
      );
      return { order, ids };
    });
    // Opposite orders would deadlock if keys were taken in batch order.
    expect(results.map((r) => r.status)).toEqual(Array(8).fill('fulfilled'));
    const byKey = new Map<string, string>();
    for (const r of results as PromiseFulfilledResult<{ order: string[]; ids: string[] }>[]) {
      r.value.order.forEach((k, i) => {
        // Every batch got, in its own order, the one job of each key.
        expect(byKey.get(k) ?? r.value.ids[i]).toBe(r.value.ids[i]);
        byKey.set(k, r.value.ids[i]!);
      });
    }
    const { rows } = await fx.db.pool.query(
      `SELECT job_key, count(*)::int AS n FROM ${fx.db.s}.jobs WHERE job_key LIKE 'many-%' GROUP BY job_key`,
    );
    expect(rows).toHaveLength(40);
    expect(rows.every((r) => r.n === 1)).toBe(true);
  });

  it('the key is released when the job starts, unless it is held while processing', async () => {
    const first = await fx.queue.enqueue('scoped', {}, { queue: 'scope', jobKey: 'scope-pending' });
    const held = await fx.queue.enqueue('scoped', {}, { queue: 'scope', jobKey: 'scope-active', jobKeyWhileProcessing: true });
    expect((await claim('scope', 'scoped')).map((r) => r.id).sort()).toEqual([first, held].sort());
    // Pending-only key: the running job no longer blocks a new one.
    const second = await fx.queue.enqueue('scoped', {}, { queue: 'scope', jobKey: 'scope-pending' });
    expect(second).not.toBe(first);
    // Held while processing: the running job is still the one.
    expect(await fx.queue.enqueue('scoped', {}, { queue: 'scope', jobKey: 'scope-active', jobKeyWhileProcessing: true })).toBe(
      held,
    );
    expect(await fx.queue.enqueue('scoped', {}, { queue: 'scope', jobKey: 'scope-active' })).toBe(held);
    // 'replace' cannot change a running job: it is kept.
    expect(await fx.queue.enqueue('scoped', { new: 1 }, { queue: 'scope', jobKey: 'scope-active', jobKeyMode: 'replace' })).toBe(
      held,
    );
    expect((await fx.queue.getJob(held))!.payload).toEqual({});
  });

  it('a retried job whose key was taken meanwhile goes back to pending without a conflict', async () => {
    let runs = 0;
    const gate = deferred();
    const original = await fx.queue.enqueue('flaky', {}, { queue: 'retry-key', jobKey: 'retry-key', maxAttempts: 2 });
    await fx.start({
      queues: ['retry-key'],
      backoff: { baseMs: 50, maxMs: 50 },
      tasks: {
        flaky: async () => {
          runs++;
          await gate.promise;
          throw new Error('fails');
        },
      },
    });
    await waitFor(() => runs === 1, 'the first run');
    // The key was released at the claim: a second job takes it while the first runs.
    const second = await fx.queue.enqueue('other_task', {}, { queue: 'retry-key', jobKey: 'retry-key' });
    expect(second).not.toBe(original);
    gate.resolve();
    // The first job fails and returns to pending: had the key come back with it,
    // this update (the worker's cycle statement) would violate the unique index.
    await waitFor(async () => (await fx.queue.getJob(original))!.status === 'failed', 'the job to fail twice');
    expect(runs).toBe(2);
    expect((await fx.queue.getJob(second))!.status).toBe('pending');
  });

  it('works from SQL: enqueue_job(_job_key => ...) and the old call forms', async () => {
    const q = `SELECT ${fx.db.s}.enqueue_job('sql', '{"task":"from_sql"}', _job_key => 'sql-key')::text AS id`;
    const a = (await fx.db.pool.query(q)).rows[0].id;
    const b = (await fx.db.pool.query(q)).rows[0].id;
    expect(b).toBe(a);
    const replaced = await fx.db.pool.query(
      `SELECT ${fx.db.s}.enqueue_job('sql', '{"task":"from_sql","v":2}', _job_key => 'sql-key', _job_key_mode => 'replace')::text AS id`,
    );
    expect(replaced.rows[0].id).toBe(a);
    expect((await fx.queue.getJob(a))!.payload).toEqual({ task: 'from_sql', v: 2 });
    await expect(
      fx.db.pool.query(
        `SELECT ${fx.db.s}.enqueue_job('sql', '{"task":"from_sql"}', _job_key => 'sql-key', _job_key_mode => 'error')`,
      ),
    ).rejects.toMatchObject({ code: '23505', constraint: 'jobs_job_key_idx' });
    await expect(
      fx.db.pool.query(`SELECT ${fx.db.s}.enqueue_job('sql', '{"task":"x"}', _job_key => 'k', _job_key_mode => 'merge')`),
    ).rejects.toMatchObject({ code: '22023' });
    // Calls written for migration 0001 still resolve to the one function.
    const old = await fx.db.pool.query(
      `SELECT ${fx.db.s}.enqueue_job('sql', '{"task":"x"}') AS a, ${fx.db.s}.enqueue_job('sql', '{}', now(), 3, 'y', 2) AS b`,
    );
    expect(old.rows[0].a).not.toBe(old.rows[0].b);
  });

  it('enqueueMany: keyed specs return the holder in place; a key twice in a batch is refused', async () => {
    const holder = await fx.queue.enqueue('sync', {}, { jobKey: 'batch-held' });
    const ids = await fx.queue.enqueueMany([
      { task: 'sync', payload: { n: 1 } },
      { task: 'sync', jobKey: 'batch-held' },
      { task: 'sync', jobKey: 'batch-new' },
    ]);
    expect(ids).toHaveLength(3);
    expect(ids[1]).toBe(holder);
    expect(new Set(ids).size).toBe(3);
    await expect(
      fx.queue.enqueueMany([
        { task: 'sync', jobKey: 'twice' },
        { task: 'sync', jobKey: 'twice' },
      ]),
    ).rejects.toBeInstanceOf(ValidationError);
    expect(await keyed('twice')).toEqual([]);
  });

  it('rejects bad key options with ValidationError', async () => {
    await expect(fx.queue.enqueue('x', {}, { jobKey: '' })).rejects.toBeInstanceOf(ValidationError);
    await expect(fx.queue.enqueue('x', {}, { jobKey: 'k'.repeat(513) })).rejects.toBeInstanceOf(ValidationError);
    await expect(fx.queue.enqueue('x', {}, { jobKeyMode: 'keep' })).rejects.toBeInstanceOf(ValidationError);
    await expect(fx.queue.enqueue('x', {}, { jobKey: 'k', jobKeyMode: 'merge' as never })).rejects.toBeInstanceOf(
      ValidationError,
    );
  });
});
