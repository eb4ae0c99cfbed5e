import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { JobNotFoundError, ValidationError, WaitTimeoutError, type JobRow } from '../src/index.js';
import { doneChannelFor } from '../src/db/identifiers.js';
import { rescueExpired } from '../src/maintenance/rescuer.js';
import { workerStatements } from '../src/db/statements/worker.js';
import { nextEvent, waitFor } from './helpers/database.js';
import { deferred, useWorkers } from './helpers/workers.js';

const fx = useWorkers('results');

/** Waits until `count` jobs of `queue` have finished (completed or failed). */
async function allFinished(queue: string, count: number): Promise<void> {
  await waitFor(async () => {
    const { rows } = await fx.db.pool.query(
      `SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = $1 AND status IN ('completed', 'failed')`,
      [queue],
    );
    return rows[0].n === count;
  }, `all ${count} of ${queue} finished`);
}
const startWorker = fx.start;

describe('results, waitFor and error history', () => {
  it('stores the returned result; waitFor is woken by NOTIFY, across two workers', async () => {
    // Polls an hour apart: only the outcome notification can wake the waiters in time.
    const opts = {
      queues: ['results'],
      pollIntervalMs: 3_600_000,
      tasks: { double: async ({ n }: { n: number }) => ({ doubled: n * 2 }) },
    };
    const [a, b] = [await startWorker(opts), await startWorker(opts)];
    const completions: unknown[] = [];
    const durations: number[] = [];
    for (const w of [a, b]) {
      w.on('job:complete', (job, info) => {
        completions.push([job.id, info.result]);
        durations.push(info.durationMs);
      });
    }
    const ids = await fx.queue.enqueueMany(
      Array.from({ length: 10 }, (_, n) => ({ task: 'double', queue: 'results', payload: { n } })),
    );
    const jobs = await Promise.all(ids.map((id) => fx.queue.waitFor(id, { timeoutMs: 20_000, pollIntervalMs: 3_600_000 })));
    expect(jobs.map((j) => [j.status, j.result])).toEqual(ids.map((_, n) => ['completed', { doubled: n * 2 }]));
    await waitFor(() => completions.length === 10, 'ten completion events');
    durations.forEach((ms) => expect(ms).toBeGreaterThanOrEqual(0));
    expect(completions).toContainEqual([ids[3], { doubled: 6 }]);
  });

  it('waitFor returns a finished job at once, and throws typed errors for timeouts and unknown ids', async () => {
    const id = await fx.queue.enqueue('never_run', {}, { queue: 'nobody' });
    const err = await fx.queue.waitFor(id, { timeoutMs: 200 }).catch((e) => e);
    expect(err).toBeInstanceOf(WaitTimeoutError);
    expect(err).toMatchObject({ code: 'WAIT_TIMEOUT', jobId: id });
    expect((await fx.queue.getJob(id))!.status).toBe('pending');
    await expect(fx.queue.waitFor('987654321', { timeoutMs: 1_000 })).rejects.toBeInstanceOf(JobNotFoundError);
    await expect(fx.queue.waitFor('not-an-id')).rejects.toBeInstanceOf(ValidationError);
    await fx.db.pool.query(`UPDATE ${fx.db.s}.jobs SET status = 'completed' WHERE id = $1`, [id]);
    expect((await fx.queue.waitFor(id, { timeoutMs: 1_000 })).status).toBe('completed');
  });

  it('many waitFor calls at once on one Queue make Node warn of no listener leak', async () => {
    // Outside review 109: a MaxListenersExceededWarning at 10-11 calls waiting at once.
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const ids = await fx.queue.enqueueMany(Array.from({ length: 15 }, () => ({ task: 'never_run', queue: 'nobody' })));
      const waits = ids.map((id) => fx.queue.waitFor(id, { timeoutMs: 300 }).catch((e: unknown) => e));
      expect(await Promise.all(waits)).toEqual(ids.map(() => expect.any(WaitTimeoutError)));
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
  });

  it('waitFor wakes the workers of a job that a claim skipped while it was locked', async () => {
    const locked = await fx.queue.enqueue('echo', { n: 1 }, { queue: 'skipped', priority: 5 });
    const sentinel = await fx.queue.enqueue('echo', { n: 2 }, { queue: 'skipped' });
    const holder = await fx.db.pool.connect();
    try {
      // Hold the row lock (as a concurrent waitFor or admin action would for a moment).
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${fx.db.s}.jobs WHERE id = $1 FOR UPDATE`, [locked]);
      // The worker's first claim skips the locked job, takes the sentinel, comes back
      // short and sleeps: its poll is an hour away.
      await fx.start({ queues: ['skipped'], pollIntervalMs: 3_600_000, tasks: { echo: async (p) => p } });
      await fx.queue.waitFor(sentinel, { timeoutMs: 20_000 });
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect((await fx.queue.getJob(locked))!.status).toBe('pending');
    expect(await fx.queue.waitFor(locked, { timeoutMs: 20_000 })).toMatchObject({ status: 'completed', result: { n: 1 } });
  });

  it('waitFor does not wait on a row lock held elsewhere: it times out as asked, and flags the job once the lock goes', async () => {
    const id = await fx.queue.enqueue('echo', { n: 3 }, { queue: 'held' });
    const holder = await fx.db.pool.connect();
    const flag = async () =>
      (await fx.db.pool.query(`SELECT notify_on_finish AS f FROM ${fx.db.s}.jobs WHERE id = $1`, [id])).rows[0].f as boolean;
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${fx.db.s}.jobs WHERE id = $1 FOR UPDATE`, [id]);
      // Before (outside review 91) the flag's UPDATE waited on the lock past timeoutMs,
      // until the Queue's statement limit failed it as a lost connection.
      const err = await fx.queue.waitFor(id, { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WaitTimeoutError);
      // A waiter whose only wake-up is the notification (its polls an hour apart).
      const waiting = fx.queue.waitFor(id, { timeoutMs: 20_000, pollIntervalMs: 3_600_000 });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await flag()).toBe(false); // the row is held: nothing flagged it
      await holder.query('COMMIT');
      await waitFor(flag, 'the waiter to flag the job once the lock is gone');
      await fx.start({ queues: ['held'], pollIntervalMs: 3_600_000, tasks: { echo: async (p) => p } });
      expect(await waiting).toMatchObject({ status: 'completed', result: { n: 3 } });
    } finally {
      holder.release();
    }
  });

  it('notifies only for jobs someone waits for', async () => {
    const listener = new pg.Client(fx.db.url);
    await listener.connect();
    const received: string[] = [];
    listener.on('notification', (m) => received.push(m.payload ?? ''));
    await listener.query(`LISTEN "${doneChannelFor(fx.db.schema)}"`);
    try {
      await startWorker({ queues: ['quiet'], tasks: { noop: async () => 'ok' } });
      const plain = await fx.queue.enqueueMany(Array.from({ length: 20 }, () => ({ task: 'noop', queue: 'quiet' })));
      // Due a little later, so the wait is in place before it runs: on a loaded machine
      // it finished before waitFor asked for its notification, and none was sent.
      const watched = await fx.queue.enqueue('noop', {}, { queue: 'quiet', delayMs: 2_000 });
      await fx.queue.waitFor(watched, { timeoutMs: 20_000 });
      await waitFor(async () => {
        const { rows } = await fx.db.pool.query(
          `SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE id = ANY($1) AND status = 'completed'`,
          [plain],
        );
        return rows[0].n === 20;
      }, 'all plain jobs to complete');
      // Notifications arrive in commit order: once this marker is in, all earlier ones are.
      await fx.db.pool.query('SELECT pg_notify($1, $2)', [doneChannelFor(fx.db.schema), 'marker']);
      await waitFor(() => received.includes('marker'), 'the marker');
      expect(received).toEqual([watched, 'marker']);
    } finally {
      await listener.end();
    }
  });

  it('keeps every failed attempt (message, stack, attempt, time) and waitFor sees the final failure', async () => {
    const worker = await startWorker({
      queues: ['history'],
      backoff: { baseMs: 20, maxMs: 20 },
      tasks: {
        flaky: async (_p, { attempt }) => {
          throw new Error(`boom ${attempt}`);
        },
      },
    });
    const retries: unknown[] = [];
    worker.on('job:retry', (job, info) => retries.push([job.id, info.nextAttempt, info.runAt instanceof Date]));
    const id = await fx.queue.enqueue('flaky', {}, { queue: 'history', maxAttempts: 3 });
    const job = await fx.queue.waitFor(id, { timeoutMs: 20_000 });
    expect(job.status).toBe('failed');
    expect(job.errors!.map((e) => [e.attempt, e.message])).toEqual([
      [1, 'Error: boom 1'],
      [2, 'Error: boom 2'],
      [3, 'Error: boom 3'],
    ]);
    expect(job.errors![0]!.stack).toContain('results.test.ts');
    expect(new Date(job.errors![2]!.at).getTime()).toBeGreaterThanOrEqual(new Date(job.errors![0]!.at).getTime());
    expect(retries).toEqual([
      [id, 2, true],
      [id, 3, true],
    ]);
  });

  it('keeps the newest 100 entries of a long history', async () => {
    const id = await fx.queue.enqueue('fails_once_more', {}, { queue: 'long-history', maxAttempts: 1 });
    await fx.db.pool.query(
      `UPDATE ${fx.db.s}.jobs SET errors =
      (SELECT jsonb_agg(jsonb_build_object('attempt', -i, 'message', 'old')) FROM generate_series(1, 100) i) WHERE id = $1`,
      [id],
    );
    await fx.start({
      queues: ['long-history'],
      tasks: {
        fails_once_more: async () => {
          throw new Error('newest');
        },
      },
    });
    const job = await fx.queue.waitFor(id, { timeoutMs: 20_000 });
    expect(job.errors).toHaveLength(100);
    expect(job.errors![0]!.attempt).toBe(-2);
    expect(job.errors![99]).toMatchObject({ attempt: 1, message: 'Error: newest' });
  });

  it('a rescue is recorded in the error history', async () => {
    const started = deferred();
    const release = deferred();
    await startWorker({
      queues: ['rescue'],
      workerId: 'hangs',
      visibilityTimeoutMs: 60_000,
      tasks: {
        hang: async () => {
          started.resolve();
          await release.promise;
        },
      },
    });
    const id = await fx.queue.enqueue('hang', {}, { queue: 'rescue' });
    await started.promise;
    const rescuer = await startWorker({ queues: ['elsewhere'], tasks: { x: async () => {} } });
    void rescuer;
    // Its last heartbeat past its own visibility timeout (the rescuer honours a worker's own, migration 0034).
    // Again until rescued (by this rescue or a worker's own rescuer: the row is eligible to
    // both), as the worker's heartbeat may renew the lock in between.
    await waitFor(async () => {
      await fx.db.pool.query(
        `UPDATE ${fx.db.s}.jobs SET locked_at = now() - interval '2 minutes' WHERE id = $1 AND status = 'processing' AND attempts = 1`,
        [id],
      );
      await rescueExpired(fx.db.pool, workerStatements(fx.db.schema), 0);
      return ((await fx.queue.getJob(id))!.errors ?? []).length > 0;
    }, 'the rescue');
    release.resolve();
    const job = await fx.queue.getJob(id);
    expect(job!.errors).toEqual([
      expect.objectContaining({ attempt: 1, message: expect.stringContaining('lock expired: worker hangs') }),
    ]);
  });

  it('a job the rescuer fails for good keeps its start time; one it returns to pending does not', async () => {
    const { rows } = await fx.db.pool
      .query(`INSERT INTO ${fx.db.s}.jobs (queue, task, status, attempts, max_attempts, locked_at, locked_by, started_at)
      VALUES ('gone-for-good', 'x', 'processing', 3, 3, now() - interval '1 hour', 'dead', now() - interval '2 hours'),
             ('gone-for-good', 'x', 'processing', 1, 3, now() - interval '1 hour', 'dead', now() - interval '2 hours')
      RETURNING id::text AS id`);
    const rescued = await rescueExpired(fx.db.pool, workerStatements(fx.db.schema), 0);
    expect(rescued.map((r) => [r.id, r.status]).sort()).toEqual([
      [rows[0].id, 'failed'],
      [rows[1].id, 'pending'],
    ]);
    const [failed, pending] = await Promise.all(rows.map((r: { id: string }) => fx.queue.getJob(r.id)));
    expect(failed!.started_at).toBeInstanceOf(Date);
    expect(pending!.started_at).toBeNull();
  });

  it('the maintenance leader announces each rescued job (job:rescue) and records it in the history', async () => {
    const { rows } = await fx.db.pool.query(`INSERT INTO ${fx.db.s}.jobs (queue, task, status, attempts, locked_at, locked_by)
      VALUES ('gone', 'x', 'processing', 1, now() - interval '1 hour', 'dead-worker') RETURNING id::text AS id`);
    const rescued: unknown[] = [];
    await fx.start(
      { queues: ['elsewhere'], visibilityTimeoutMs: 1_000, rescueIntervalMs: 100, tasks: { x: async () => {} } },
      (w) => w.on('job:rescue', (job) => rescued.push(job)),
    );
    await waitFor(() => rescued.length > 0, 'a job:rescue event');
    expect(rescued).toEqual([{ id: rows[0].id, queue: 'gone', status: 'pending' }]);
    expect((await fx.queue.getJob(rows[0].id))!.errors).toEqual([
      expect.objectContaining({ attempt: 1, message: expect.stringContaining('dead-worker stopped heartbeating') }),
    ]);
  });

  it('progress is stored (newest value, rate-limited) and emitted; non-JSON progress throws in the handler', async () => {
    const release = deferred();
    const refused: unknown[] = [];
    const worker = await startWorker({
      queues: ['progress'],
      progressIntervalMs: 50,
      tasks: {
        report: async (_p, ctx) => {
          for (let i = 1; i <= 100; i++) ctx.progress(i);
          try {
            ctx.progress({ big: 10n });
          } catch (err) {
            refused.push(err);
          }
          ctx.progress({ step: 'upload', done: 3, of: 4 });
          await release.promise;
          return { ok: true };
        },
      },
    });
    const events: unknown[] = [];
    worker.on('job:progress', (_job, info) => events.push(info.progress));
    const id = await fx.queue.enqueue('report', {}, { queue: 'progress' });
    await waitFor(async () => {
      const job = await fx.queue.getJob(id);
      return (job!.progress as { step?: string } | null)?.step === 'upload';
    }, 'the newest progress to be stored');
    release.resolve();
    const done = await fx.queue.waitFor(id, { timeoutMs: 20_000 });
    expect(done).toMatchObject({ status: 'completed', result: { ok: true }, progress: { step: 'upload', done: 3, of: 4 } });
    expect(events).toHaveLength(101);
    expect(refused).toEqual([expect.any(ValidationError)]);
  });

  it('a single report made while another session holds the row is stored once the row is free', async () => {
    const reported = deferred();
    const release = deferred();
    await startWorker({
      queues: ['progress-held'],
      progressIntervalMs: 50,
      tasks: {
        once: async (_p, ctx) => {
          await reported.promise;
          ctx.progress({ pct: 40 });
          await release.promise;
        },
      },
    });
    const id = await fx.queue.enqueue('once', {}, { queue: 'progress-held' });
    await waitFor(async () => (await fx.queue.getJob(id))?.status === 'processing', 'the job to start');
    const other = await fx.db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT id FROM ${fx.db.s}.jobs WHERE id = $1 FOR UPDATE`, [id]);
      reported.resolve();
      // The report's write finds the row held and skips it (it never waits on another session).
      await waitFor(async () => {
        const { rows } = await fx.db.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE starts_with(query, $1) AND query LIKE '%SET progress%' AND state = 'idle'`,
          [`UPDATE ${fx.db.s}.jobs j`],
        );
        return rows[0].n > 0;
      }, 'a progress write to have been sent');
      expect((await fx.queue.getJob(id))?.progress).toBeNull();
      await other.query('COMMIT');
    } finally {
      other.release();
    }
    // Only one report was made: it is the worker's retry that stores it.
    await waitFor(
      async () => ((await fx.queue.getJob(id))?.progress as { pct?: number } | null)?.pct === 40,
      'the report stored',
    );
    release.resolve();
    expect(await fx.queue.waitFor(id, { timeoutMs: 20_000 })).toMatchObject({ status: 'completed', progress: { pct: 40 } });
  });

  it('progress(undefined) clears the report (null), it does not store {}', async () => {
    await startWorker({
      queues: ['progress-cleared'],
      tasks: {
        clears: async (_p, ctx) => {
          ctx.progress(50);
          ctx.progress(undefined);
        },
      },
    });
    const id = await fx.queue.enqueue('clears', {}, { queue: 'progress-cleared' });
    expect(await fx.queue.waitFor(id, { timeoutMs: 20_000 })).toMatchObject({ status: 'completed', progress: null });
  });

  it('a result that is not JSON fails the job for good instead of losing it', async () => {
    const worker = await startWorker({ queues: ['bad-result'], tasks: { weird: async () => ({ n: 1n }) } });
    const failed = nextEvent<[JobRow, { willRetry: boolean }]>(worker, 'job:fail');
    const id = await fx.queue.enqueue('weird', {}, { queue: 'bad-result', maxAttempts: 5 });
    const [, info] = await failed;
    expect(info.willRetry).toBe(false);
    const job = await fx.queue.getJob(id);
    expect(job).toMatchObject({ status: 'failed', attempts: 1, result: null });
    expect(job!.last_error).toContain('result.n is a bigint');
  });
  /** One job whose handler gets { poison: true } among 50 that return 'fine', at concurrency 10; all must finish. */
  async function poisonAmongFifty(queue: string, handler: (payload: { poison?: boolean }) => Promise<unknown>, finished = 51) {
    const worker = await startWorker({ queues: [queue], concurrency: 10, tasks: { job: handler } });
    const errors: Error[] = [];
    worker.on('error', (err) => errors.push(err));
    const poison = await fx.queue.enqueue('job', { poison: true }, { queue });
    await fx.queue.enqueueMany(Array.from({ length: 50 }, () => ({ task: 'job', queue, payload: {} })));
    await allFinished(queue, finished);
    const { rows } = await fx.db.pool.query(
      `SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = $1 AND status = 'completed' AND result = '"fine"'`,
      [queue],
    );
    expect(rows[0].n).toBe(50);
    return { job: (await fx.queue.getJob(poison))!, errors };
  }

  it('a result Postgres cannot store (a boxed string holding a NUL) fails its job alone; the others in the batch complete', async () => {
    const { job, errors } = await poisonAmongFifty('boxed-result', async ({ poison }) =>
      poison ? { s: new String('a\u0000b') } : 'fine',
    );
    expect(job).toMatchObject({ status: 'failed', result: null });
    expect(job.last_error).toContain('result.s contains a NUL character');
    expect(errors).toEqual([]);
  });
  /**
   * Runs `body` with a trigger of the user's that refuses (RAISE EXCEPTION, SQLSTATE
   * P0001) every write of the result `result`; `lift()` drops it early.
   */
  async function withRefusedResult(name: string, result: string, body: (lift: () => Promise<void>) => Promise<void>) {
    const { s } = fx.db;
    const lift = async () => {
      await fx.db.pool.query(`DROP TRIGGER IF EXISTS ${name} ON ${s}.jobs`);
    };
    await fx.db.pool.query(`
      CREATE FUNCTION ${s}.${name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'this result is not welcome'; END $$;
      CREATE TRIGGER ${name} BEFORE UPDATE ON ${s}.jobs FOR EACH ROW
        WHEN (NEW.result = '${JSON.stringify(result)}'::jsonb) EXECUTE FUNCTION ${s}.${name}()`);
    try {
      await body(lift);
    } finally {
      await lift();
      await fx.db.pool.query(`DROP FUNCTION ${s}.${name}()`);
    }
  }
  it('a result Postgres refuses (here a trigger of the user) is held and retried alone; the rest of its batch is written', async () => {
    await withRefusedResult('refuse_result', 'refuse-me', async (lift) => {
      // A plain RAISE EXCEPTION (SQLSTATE P0001). The other 50 are written while the
      // refused one is held, its lock kept, and tried alone again; once the trigger
      // goes, it is written: run once, its attempt not spent again. (Given up after
      // 30 s: tests/fast/completer.test.ts.)
      const { job, errors } = await poisonAmongFifty('refused-result', async ({ poison }) => (poison ? 'refuse-me' : 'fine'), 50);
      expect(job).toMatchObject({ status: 'processing', attempts: 1 });
      await lift();
      await allFinished('refused-result', 51);
      expect(await fx.queue.getJob(job.id)).toMatchObject({ status: 'completed', result: 'refuse-me', attempts: 1 });
      // The refused writes are reported, as every failed statement is.
      expect(errors.length).toBeGreaterThan(0);
    });
  });
  it('several results refused at once are all held while the worker runs the rest, and reported once each', async () => {
    await withRefusedResult('refuse_some', 'refuse-us', async (lift) => {
      // Outside reviews 41 and 42: three held at concurrency 4 stopped the worker's
      // claims until they were given up 30 s later (waitFor gives up after 20 s), and
      // 20 held at concurrency 50 did too, each tried alone on a new connection.
      const queue = 'refused-several';
      const worker = await startWorker({
        queues: [queue],
        concurrency: 50,
        tasks: {
          job: async ({ poison }: { poison?: boolean }) => {
            if (poison) return 'refuse-us';
            await new Promise((resolve) => setTimeout(resolve, 10));
            return 'fine';
          },
        },
      });
      const errors: Error[] = [];
      worker.on('error', (err) => errors.push(err));
      const poisons = await fx.queue.enqueueMany(
        Array.from({ length: 20 }, () => ({ task: 'job', queue, payload: { poison: true } })),
      );
      // The other jobs arrive once all 20 are held, each refused on its own.
      await waitFor(() => errors.length >= 20, 'the refused results to be held');
      await fx.queue.enqueueMany(Array.from({ length: 500 }, () => ({ task: 'job', queue, payload: {} })));
      await allFinished(queue, 500);
      for (const id of poisons) expect(await fx.queue.getJob(id)).toMatchObject({ status: 'processing', attempts: 1 });
      // Each refusal is news once or twice (in a batch, then alone), not at every try.
      expect(errors.length).toBeGreaterThan(0);
      expect(errors.length).toBeLessThanOrEqual(20 * 2 + 5);
      await lift();
      await allFinished(queue, 520);
      for (const id of poisons)
        expect(await fx.queue.getJob(id)).toMatchObject({ status: 'completed', result: 'refuse-us', attempts: 1 });
    });
  });
  it('a handler that throws a value that cannot be read fails its job; the slot is freed and the others run', async () => {
    const worker = await startWorker({
      queues: ['hostile-throws'],
      concurrency: 1,
      tasks: {
        hostile: async ({ kind }: { kind: string }) => {
          if (kind === 'revoked') {
            const { proxy, revoke } = Proxy.revocable({}, {});
            revoke();
            throw proxy;
          }
          if (kind === 'stack') throw Object.assign(new Error('odd stack'), { stack: 42 });
          if (kind === 'stack-getter') {
            const error = new Error('its message survives');
            Object.defineProperty(error, 'stack', {
              get() {
                throw new Error('no stack for you');
              },
            });
            throw error;
          }
        },
      },
    });
    const errors: Error[] = [];
    worker.on('error', (err) => errors.push(err));
    const ids = await fx.queue.enqueueMany([
      { task: 'hostile', queue: 'hostile-throws', payload: { kind: 'revoked' }, maxAttempts: 1 },
      { task: 'hostile', queue: 'hostile-throws', payload: { kind: 'stack' }, maxAttempts: 1 },
      { task: 'hostile', queue: 'hostile-throws', payload: { kind: 'stack-getter' }, maxAttempts: 1 },
      ...Array.from({ length: 20 }, () => ({ task: 'hostile', queue: 'hostile-throws', payload: { kind: 'fine' } })),
    ]);
    await allFinished('hostile-throws', 23);
    expect((await fx.queue.getJob(ids[0]!))!.last_error).toContain('the handler threw a value that cannot be read');
    expect((await fx.queue.getJob(ids[1]!))!.last_error).toBe('Error: odd stack');
    expect((await fx.queue.getJob(ids[2]!))!).toMatchObject({ status: 'failed', last_error: 'Error: its message survives' });
    const { rows } = await fx.db.pool.query(
      `SELECT count(*)::int AS n FROM ${fx.db.s}.jobs WHERE queue = 'hostile-throws' AND status = 'completed'`,
    );
    expect(rows[0].n).toBe(20);
    expect(errors).toEqual([]);
  });
  it('records when each attempt started, also for jobs claimed ahead that started and ended between two cycles', async () => {
    // Small slots and no-op jobs: most jobs are claimed ahead and run to their end
    // before the cycle that would write their start mark.
    const ended: string[] = [];
    const w = await startWorker({
      queues: ['starts'],
      concurrency: 3,
      tasks: {
        noop: async () => {},
        broken: { handler: async () => Promise.reject(new Error('no')), maxAttempts: 2, backoff: { baseMs: 10, shape: 'fixed' } },
      },
    });
    w.on('job:complete', (job) => ended.push(job.id));
    w.on('job:fail', (job) => ended.push(job.id));
    await fx.queue.enqueueMany([
      ...Array.from({ length: 300 }, () => ({ task: 'noop', queue: 'starts' })),
      ...Array.from({ length: 10 }, () => ({ task: 'broken', queue: 'starts' })),
    ]);
    await allFinished('starts', 310);
    const { rows } = await fx.db.pool.query(
      `SELECT status,
              count(*) FILTER (WHERE started_at IS NULL)::int AS no_start,
              count(*) FILTER (WHERE started_at > finished_at)::int AS start_after_end,
              count(*) FILTER (WHERE EXISTS (SELECT FROM jsonb_array_elements(errors) e WHERE e->>'started_at' IS NULL))::int AS attempt_no_start
       FROM ${fx.db.s}.jobs WHERE queue = 'starts' GROUP BY status ORDER BY status`,
    );
    expect(rows).toEqual([
      { status: 'completed', no_start: 0, start_after_end: 0, attempt_no_start: 0 },
      { status: 'failed', no_start: 0, start_after_end: 0, attempt_no_start: 0 },
    ]);
  });
  it("keeps each job's last progress report, also when the handler returns or throws right after it", async () => {
    await startWorker({
      queues: ['reports'],
      concurrency: 5,
      tasks: {
        report: async ({ i }: { i: number }, { progress }) => {
          progress(1);
          progress({ done: i });
          // Every tenth fails for good right after its report: the dead letter keeps it too.
          if (i % 10 === 0) throw new Error('after the report');
          return i;
        },
      },
    });
    const ids = await fx.queue.enqueueMany(
      Array.from({ length: 200 }, (_, i) => ({ task: 'report', queue: 'reports', payload: { i }, maxAttempts: 1 })),
    );
    await allFinished('reports', 200);
    const { rows } = await fx.db.pool.query(`SELECT id::text AS id, progress FROM ${fx.db.s}.jobs WHERE id = ANY($1::bigint[])`, [
      ids,
    ]);
    const wrong = rows.filter((r) => JSON.stringify(r.progress) !== JSON.stringify({ done: ids.indexOf(r.id) }));
    expect(wrong).toEqual([]);
  });
});
