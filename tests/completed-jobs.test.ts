/**
 * completedJobs: 'delete': the cycle deletes a completed job's row instead of
 * marking it completed. Failed jobs, retries, jobs someone waits for and jobs
 * no longer this worker's are left as they were.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, JobNotFoundError, Worker } from '../src/index.js';
import { PgWorkerStore } from '../src/db/store.js';
import { waitFor } from './helpers/database.js';
import { openTestDriver } from './helpers/driver.js';
import { useWorkers } from './helpers/workers.js';

const fx = useWorkers('completed');

async function statusCounts(queue: string): Promise<Record<string, number>> {
  const { rows } = await fx.db.pool.query<{ status: string; n: number }>(
    `SELECT status, count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = $1 GROUP BY status`,
    [queue],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

describe("completedJobs: 'delete'", () => {
  it('deletes completed jobs, keeps failed ones, and deletes a retried job once it succeeds', async () => {
    const completions: [string, unknown][] = [];
    let flaky = 0;
    const worker = await fx.start({
      queues: ['del'],
      completedJobs: 'delete',
      concurrency: 5,
      tasks: {
        ok: async ({ n }: { n: number }) => ({ n }),
        broken: { handler: async () => Promise.reject(new Error('always')), maxAttempts: 1 },
        flaky: {
          handler: async () => {
            if (flaky++ === 0) throw new Error('once');
          },
          backoff: { baseMs: 10, shape: 'fixed' },
        },
      },
    });
    worker.on('job:complete', (job, info) => completions.push([job.id, info.result]));
    const ok = await fx.queue.enqueueMany(Array.from({ length: 40 }, (_, n) => ({ task: 'ok', queue: 'del', payload: { n } })));
    const broken = await fx.queue.enqueue('broken', {}, { queue: 'del' });
    const retried = await fx.queue.enqueue('flaky', {}, { queue: 'del' });
    await waitFor(() => completions.length === 41, '41 completions');
    // The events still carry each result; the rows are gone.
    expect(completions).toContainEqual([ok[7], { n: 7 }]);
    await waitFor(async () => (await statusCounts('del')).failed === 1, 'the failed job written');
    expect(await statusCounts('del')).toEqual({ failed: 1 });
    expect(await fx.queue.getJob(ok[0]!)).toBeUndefined();
    expect(await fx.queue.getJob(retried)).toBeUndefined();
    expect(flaky).toBe(2);
    expect(await fx.queue.getJob(broken)).toMatchObject({ status: 'failed', attempts: 1 });
  });

  it('keeps a job that waitFor() is watching, with its result, as a keeping worker would', async () => {
    // No worker for the queue yet: the wait flags the job before anyone runs it.
    const id = await fx.queue.enqueue('double', { n: 21 }, { queue: 'watched' });
    const other = await fx.queue.enqueue('double', { n: 1 }, { queue: 'watched' });
    const waiting = fx.queue.waitFor(id, { timeoutMs: 20_000 });
    await waitFor(async () => {
      const { rows } = await fx.db.pool.query(`SELECT notify_on_finish FROM ${fx.db.s}.jobs WHERE id = $1`, [id]);
      return rows[0].notify_on_finish === true;
    }, 'the wait flagged the job');
    await fx.start({
      queues: ['watched'],
      completedJobs: 'delete',
      tasks: { double: async ({ n }: { n: number }) => n * 2 },
    });
    expect(await waiting).toMatchObject({ status: 'completed', result: 42 });
    await waitFor(async () => (await fx.queue.getJob(other)) === undefined, 'the unwatched job deleted');
    expect((await fx.queue.getJob(id))!.status).toBe('completed');
  });

  it('keeps a job enqueued waitable, however it was enqueued, so a waitFor() after its completion finds it (outside review 219)', async () => {
    const done = new Set<string>();
    const worker = await fx.start({
      queues: ['waitable'],
      completedJobs: 'delete',
      tasks: { double: async ({ n }: { n: number }) => n * 2 },
    });
    worker.on('job:complete', (job) => done.add(job.id));
    const q = { queue: 'waitable' };
    const client = await fx.db.pool.connect();
    let inTx: string;
    try {
      await client.query('BEGIN');
      inTx = await fx.queue.enqueue('double', { n: 4 }, { ...q, waitable: true, tx: client });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const waitable = [
      await fx.queue.enqueue('double', { n: 1 }, { ...q, waitable: true }),
      // Several at once take the deferred wake-up's statement.
      ...(await Promise.all([2, 3].map((n) => fx.queue.enqueue('double', { n }, { ...q, waitable: true })))),
      inTx,
      // A uniform batch (one set of options) and a mixed one go through different statements.
      ...(await fx.queue.enqueueMany([5, 6].map((n) => ({ task: 'double', payload: { n }, ...q, waitable: true })))),
      ...(await fx.queue.enqueueMany([
        { task: 'double', payload: { n: 7 }, ...q, waitable: true, priority: 1 },
        { task: 'double', payload: { n: 8 }, ...q, waitable: true },
      ])),
      ...(await fx.queue.enqueueAfterCommit(async (jobs) => jobs.enqueue('double', { n: 9 }, { ...q, waitable: true }))).jobIds,
    ];
    const plain = await fx.queue.enqueueMany([
      { task: 'double', payload: { n: 10 }, ...q },
      { task: 'double', payload: { n: 11 }, ...q, priority: 1, waitable: false },
    ]);
    const all = [...waitable, ...plain];
    await waitFor(() => all.every((id) => done.has(id)), 'every job completed');
    // Completed before anyone waited: the waitable ones are kept, with their results.
    const results = await Promise.all(waitable.map(async (id) => (await fx.queue.waitFor(id, { timeoutMs: 10_000 })).result));
    expect(results).toEqual([2, 4, 6, 8, 10, 12, 14, 16, 18]);
    for (const id of plain) {
      const gone = await fx.queue.waitFor(id, { timeoutMs: 10_000 }).catch((err: unknown) => err);
      expect(gone).toBeInstanceOf(JobNotFoundError);
      // Said as what it may be, not only as an unknown id.
      expect((gone as Error).message).toMatch(/completedJobs 'delete' deletes a completed job not flagged.*waitable: true/);
    }
  });

  it('refuses waitable with a jobKey, beside keyed jobs in a batch, or not a boolean, before anything is sent', async () => {
    const q = { queue: 'waitable-refused' };
    await expect(fx.queue.enqueue('double', {}, { ...q, waitable: true, jobKey: 'k' })).rejects.toThrow(
      /waitable cannot be combined with jobKey .*run their workers with completedJobs 'keep'/,
    );
    // A keyed batch goes through enqueue_job(), which inserted the waitable job unflagged (outside review 220).
    const beside = /a waitable job cannot be in one batch with keyed jobs/;
    await expect(
      fx.queue.enqueueMany([
        { task: 'double', payload: { n: 1 }, ...q, waitable: true },
        { task: 'double', payload: { n: 2 }, ...q, jobKey: 'k1' },
      ]),
    ).rejects.toThrow(beside);
    for (const order of [
      [{ waitable: true }, { jobKey: 'k2' }],
      [{ jobKey: 'k3' }, { waitable: true }],
    ]) {
      await expect(
        fx.queue.enqueueAfterCommit(async (jobs) => {
          for (const options of order) await jobs.enqueue('double', { n: 3 }, { ...q, ...options });
        }),
      ).rejects.toThrow(beside);
    }
    const { rows } = await fx.db.pool.query(`SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = $1`, [q.queue]);
    expect(rows[0].n).toBe(0);
    await expect(fx.queue.enqueueMany([{ task: 'double', waitable: 'yes' as unknown as boolean }])).rejects.toThrow(
      /job 0: waitable must be a boolean, got "yes"/,
    );
  });

  it('completes or deletes every job exactly once while waitFor() calls race the completions', async () => {
    // As the outside review found it: jobs that start at their claim, and a waitFor()
    // of each a few ms after its handler returned, while its completion is written.
    const runs = new Map<string, number>();
    const lost: string[] = [];
    const waits: Promise<string>[] = [];
    const watch = (id: string) =>
      new Promise((resolve) => setTimeout(resolve, Math.random() * 12)).then(() =>
        fx.queue.waitFor(id, { timeoutMs: 20_000 }).then(
          (row) => row.status,
          (err: Error & { code?: string }) => err.code ?? err.message,
        ),
      );
    const worker = await fx.start({
      queues: ['raced'],
      completedJobs: 'delete',
      concurrency: 50,
      visibilityTimeoutMs: 2_000,
      tasks: {
        t: async (_p: unknown, { job }: { job: { id: string } }) => {
          runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
          await new Promise((resolve) => setTimeout(resolve, 2));
          setImmediate(() => waits.push(watch(job.id)));
        },
      },
    });
    worker.on('job:lock-lost', (job) => lost.push(job.id));
    const ids: string[] = [];
    for (let round = 0; round < 40; round++) {
      ids.push(
        ...(await fx.queue.enqueueMany(Array.from({ length: 20 }, () => ({ task: 't', queue: 'raced', maxAttempts: 1 })))),
      );
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
    await waitFor(() => waits.length >= ids.length, 'all 800 ran');
    const outcomes = await Promise.all(waits);
    // Each waiter saw the job completed (kept for it) or already deleted; none failed.
    expect(outcomes.filter((o) => o !== 'completed' && o !== 'JOB_NOT_FOUND')).toEqual([]);
    expect(lost).toEqual([]);
    expect([...runs.values()].filter((n) => n !== 1)).toEqual([]);
    expect(runs.size).toBe(ids.length);
    await waitFor(async () => (await statusCounts('raced')).processing === undefined, 'every completion written');
    expect((await statusCounts('raced')).failed).toBeUndefined();
  });

  it('does not delete a job that is no longer this worker’s (rescued and claimed elsewhere)', async () => {
    const [id] = await fx.queue.enqueueMany([{ task: 'held', queue: 'stale' }]);
    const driver = await openTestDriver(fx.db.url);
    try {
      const stale = new PgWorkerStore(driver, fx.db.schema, 'stale-worker', false, 'delete');
      const claim = { failed: [], started: [], tasks: ['held'], startNow: 1 };
      const { claimed } = await stale.cycle({ ...claim, completed: [], queues: ['stale'], limit: 1 });
      expect(claimed.map((j) => j.id)).toEqual([id]);
      // Rescued and claimed again by another worker meanwhile.
      await fx.db.pool.query(`UPDATE ${fx.db.s}.jobs SET locked_by = 'new-owner' WHERE id = $1`, [id]);
      const late = await stale.cycle({ ...claim, completed: [{ id: id!, attempt: 1, result: null }], queues: [], limit: 0 });
      expect(late.completed.size).toBe(0);
      expect(await fx.queue.getJob(id!)).toMatchObject({ status: 'processing', locked_by: 'new-owner' });
      // Its own completion of the same attempt deletes it.
      await fx.db.pool.query(`UPDATE ${fx.db.s}.jobs SET locked_by = 'stale-worker' WHERE id = $1`, [id]);
      const own = await stale.cycle({ ...claim, completed: [{ id: id!, attempt: 1, result: null }], queues: [], limit: 0 });
      expect([...own.completed]).toEqual([id]);
      expect(await fx.queue.getJob(id!)).toBeUndefined();
    } finally {
      await driver.end();
    }
  });

  it('rejects anything but keep or delete', () => {
    const make = (completedJobs: unknown) =>
      new Worker({ connectionString: fx.db.url, tasks: { t: async () => {} }, completedJobs: completedJobs as 'keep' });
    expect(() => make('drop')).toThrow(ConfigError);
    expect(() => make('drop')).toThrow(/completedJobs must be 'keep' or 'delete', got "drop"/);
    expect(() => make(true)).toThrow(ConfigError);
    expect(() => make(null)).toThrow(/completedJobs must be 'keep' or 'delete', got null/);
    expect(make('delete').config.completedJobs).toBe('delete');
    expect(make(undefined).config.completedJobs).toBe('keep');
  });
});
