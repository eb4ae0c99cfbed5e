import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Queue, Worker, ConfigError, PermanentFailure, type WorkerOptions, type JobRow } from '../src/index.js';
import { rescueExpired } from '../src/maintenance/rescuer.js';
import { workerStatements } from '../src/db/statements/worker.js';
import type { Driver } from '../src/db/driver.js';
import { createTestSchema, nextEvent, waitFor, type TestDatabase } from './helpers/database.js';
import { openTestDriver, TEST_DRIVER } from './helpers/driver.js';

let db: TestDatabase;
let queue: Queue;
/** The driver under test, for calling worker internals (the rescuer) directly. */
let driver: Driver;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestSchema('worker');
  queue = new Queue({ pool: db.pool, schema: db.schema });
  driver = await openTestDriver(db.url);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});
afterAll(async () => {
  await queue.close();
  await driver.end();
  await db.drop();
});

/** A started worker on this file's schema; stopped after each test. */
async function startWorker(options: Omit<WorkerOptions, 'connectionString' | 'schema'>): Promise<Worker> {
  const worker = new Worker({ connectionString: db.url, schema: db.schema, driver: TEST_DRIVER, ...options });
  worker.on('error', () => {});
  workers.push(worker);
  await worker.start();
  return worker;
}

async function job(id: string): Promise<JobRow> {
  return (await queue.getJob(id))!;
}

/** A promise with its resolve function, for handlers that wait for the test. */
function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('Worker', () => {
  it('runs a job enqueued from plain SQL, woken by NOTIFY', async () => {
    const seen: unknown[] = [];
    // A poll interval far longer than the test: only the notification can wake it.
    const worker = await startWorker({
      queues: ['sql'],
      pollIntervalMs: 3_600_000,
      tasks: { send_welcome: async (payload, ctx) => void seen.push({ payload, attempt: ctx.attempt }) },
    });
    const completed = nextEvent<[JobRow]>(worker, 'job:complete');
    const { rows } = await db.pool.query(`SELECT ${db.s}.enqueue_job('sql', '{"task":"send_welcome","user_id":42}') AS id`);
    const [done] = await completed;
    expect(done.id).toBe(rows[0].id);
    expect(seen).toEqual([{ payload: { task: 'send_welcome', user_id: 42 }, attempt: 1 }]);
    expect(await job(rows[0].id)).toMatchObject({ status: 'completed', attempts: 1, locked_at: null });
    expect((await job(rows[0].id)).finished_at).toBeInstanceOf(Date);
  });

  it('one slot runs a backlog in priority order, jobs claimed ahead of it included', async () => {
    // Outside review 43: a claim's rows came back in join order, so jobs claimed
    // ahead of a free slot started out of priority order.
    const order: number[] = [];
    await startWorker({ queues: ['prio-one-slot'], concurrency: 1, tasks: { p: ({ p }: { p: number }) => void order.push(p) } });
    const priorities = [0, 5, -3, 10, 5, 7, 7, 1, 2, 9, -1, 4];
    await queue.enqueueMany(priorities.map((p) => ({ task: 'p', queue: 'prio-one-slot', priority: p, payload: { p } })));
    await waitFor(() => order.length === priorities.length, 'every job to run');
    expect(order).toEqual([...priorities].sort((a, b) => b - a));
  });
  it('leaves jobs of unknown tasks for a worker that knows them', async () => {
    const unknown = await queue.enqueue('nobody_handles_this', {}, { queue: 'unknown' });
    const known = await queue.enqueue('handled', {}, { queue: 'unknown' });
    const worker = await startWorker({ queues: ['unknown'], tasks: { handled: async () => {} } });
    await nextEvent(worker, 'job:complete');
    expect((await job(known)).status).toBe('completed');
    expect(await job(unknown)).toMatchObject({ status: 'pending', attempts: 0 });
  });

  it('does not run a delayed job before its run_at, and runs it after', async () => {
    const started: Date[] = [];
    const worker = await startWorker({ queues: ['delayed'], tasks: { later: async () => void started.push(new Date()) } });
    const id = await queue.enqueue('later', {}, { queue: 'delayed', delayMs: 800 });
    const [done] = await nextEvent<[JobRow]>(worker, 'job:complete');
    const row = await job(id);
    expect(done.id).toBe(id);
    expect(started).toHaveLength(1);
    // The claim compares run_at with the server clock; the handler cannot have started earlier.
    expect(done.locked_at!.getTime()).toBeGreaterThanOrEqual(row.run_at.getTime());
  });

  it('retries with backoff, then marks the job failed and keeps the error', async () => {
    const failures: { willRetry: boolean }[] = [];
    const worker = await startWorker({
      queues: ['retry'],
      backoff: { baseMs: 50, maxMs: 200 },
      tasks: {
        flaky: async (_p, { attempt }) => {
          throw new Error(`boom on attempt ${attempt}`);
        },
      },
    });
    worker.on('job:fail', (_job, info) => failures.push({ willRetry: info.willRetry }));
    const id = await queue.enqueue('flaky', {}, { queue: 'retry', maxAttempts: 3 });
    const [first] = await nextEvent<[JobRow]>(worker, 'job:fail');
    const afterFirst = await job(id);
    if (afterFirst.status === 'pending') {
      // The retry waits: run_at was pushed past the moment of failure.
      expect(afterFirst.run_at.getTime()).toBeGreaterThan(afterFirst.updated_at.getTime());
    }
    expect(first.id).toBe(id);
    const final = await waitFor(async () => {
      const row = await job(id);
      return row.status === 'failed' ? row : undefined;
    }, 'job to fail for good');
    expect(final.attempts).toBe(3);
    expect(final.last_error).toContain('boom on attempt 3');
    expect(final.finished_at).toBeInstanceOf(Date);
    await waitFor(() => failures.length === 3, 'three fail events');
    expect(failures.map((f) => f.willRetry)).toEqual([true, true, false]);
  });

  it('PermanentFailure and non-Error throws are handled', async () => {
    const worker = await startWorker({
      queues: ['permanent'],
      tasks: {
        give_up: async () => {
          throw new PermanentFailure('bad input');
        },
        throws_string: async () => {
          throw 'just a string';
        },
        throws_sync: () => {
          throw new Error('synchronous');
        },
      },
    });
    const a = await queue.enqueue('give_up', {}, { queue: 'permanent', maxAttempts: 5 });
    const b = await queue.enqueue('throws_string', {}, { queue: 'permanent', maxAttempts: 1 });
    const c = await queue.enqueue('throws_sync', {}, { queue: 'permanent', maxAttempts: 1 });
    await waitFor(async () => (await Promise.all([a, b, c].map(job))).every((j) => j.status === 'failed'), 'failures');
    expect(await job(a)).toMatchObject({ attempts: 1 });
    expect((await job(a)).last_error).toContain('bad input');
    expect((await job(b)).last_error).toContain('just a string');
    expect((await job(c)).last_error).toContain('synchronous');
    void worker;
  });

  it('aborts a handler that exceeds its task timeout and retries it', async () => {
    const signals: AbortSignal[] = [];
    await startWorker({
      queues: ['timeout'],
      backoff: { baseMs: 10, maxMs: 10 },
      tasks: {
        stuck: {
          timeoutMs: 200,
          handler: (_p, { signal }) => {
            signals.push(signal);
            return new Promise(() => {}); // never settles
          },
        },
      },
    });
    const id = await queue.enqueue('stuck', {}, { queue: 'timeout', maxAttempts: 2 });
    const final = await waitFor(async () => ((await job(id)).status === 'failed' ? job(id) : undefined), 'timeout failure');
    expect(final.attempts).toBe(2);
    expect(final.last_error).toContain('timed out after 200 ms');
    expect(signals.every((s) => s.aborted)).toBe(true);
  });

  it('keeps a long job alive with heartbeats while another worker rescues expired locks', async () => {
    const release = deferred();
    const runs: number[] = [];
    // 2 s, not 1: on a loaded CI machine a 1 s timeout let a renewal land late once.
    const busy = await startWorker({
      queues: ['heartbeat'],
      visibilityTimeoutMs: 2_000,
      heartbeatIntervalMs: 150,
      tasks: {
        long: async (_p, { attempt }) => {
          runs.push(attempt);
          await release.promise;
        },
      },
    });
    const lost: unknown[] = [];
    busy.on('job:lock-lost', (j) => lost.push(j));
    const id = await queue.enqueue('long', {}, { queue: 'heartbeat' });
    await waitFor(() => runs.length === 1, 'job to start');
    // Rescue as aggressively as the timeout allows, for several timeouts' worth of time.
    const { rows } = await db.pool.query('SELECT clock_timestamp() AS t');
    await waitFor(
      async () => {
        await rescueExpired(driver, workerStatements(db.schema), 2_000);
        const now = await db.pool.query('SELECT clock_timestamp() AS t');
        return now.rows[0].t.getTime() - rows[0].t.getTime() > 4_000;
      },
      'two visibility timeouts to pass',
      10_000,
    );
    release.resolve();
    await waitFor(async () => (await job(id)).status === 'completed', 'completion');
    expect(runs).toEqual([1]);
    expect(lost).toEqual([]);
    expect((await job(id)).attempts).toBe(1);
  });

  it('a worker whose lock was taken away cannot complete the job', async () => {
    const releaseA = deferred();
    const startedA = deferred();
    const a = await startWorker({
      queues: ['stolen'],
      workerId: 'worker-A',
      // One slot, busy with the job, and nothing claimed ahead: A cannot claim it again after the rescue.
      concurrency: 1,
      prefetch: 0,
      visibilityTimeoutMs: 60_000,
      tasks: {
        slow: async () => {
          startedA.resolve();
          await releaseA.promise;
        },
      },
    });
    const id = await queue.enqueue('slow', {}, { queue: 'stolen' });
    await startedA.promise;
    // Simulate A's heartbeat going stale: its last renewal longer ago than its own
    // visibility timeout (the rescuer honours a worker's own, migration 0034). Again
    // until the rescue takes it: A's heartbeat may renew the lock in between. The
    // registered timeout is cut too: a lock counts as no older than the server's
    // start, and an embedded Postgres started for this run may be younger than 60 s.
    await waitFor(async () => {
      await db.pool.query(`UPDATE ${db.s}.workers SET visibility_timeout_ms = 1000 WHERE id = 'worker-A'`);
      await db.pool.query(
        `UPDATE ${db.s}.jobs SET locked_at = now() - interval '2 minutes' WHERE id = $1 AND status = 'processing'`,
        [id],
      );
      await rescueExpired(driver, workerStatements(db.schema), 0);
      // Taken by this rescue or by a worker's own rescuer (the row is eligible to both).
      return (await job(id)).status === 'pending';
    }, 'the rescue of the job');
    const b = await startWorker({ queues: ['stolen'], workerId: 'worker-B', tasks: { slow: async () => {} } });
    await nextEvent(b, 'job:complete');
    const lockLost = nextEvent<[JobRow]>(a, 'job:lock-lost');
    releaseA.resolve();
    const [lostJob] = await lockLost;
    expect(lostJob.id).toBe(id);
    expect(await job(id)).toMatchObject({ status: 'completed', attempts: 2, locked_by: 'worker-B' });
  });

  it('stop() lets running jobs finish, then returns unfinished ones without spending the attempt', async () => {
    const finishing = deferred();
    const started: string[] = [];
    const errors: unknown[] = [];
    const worker = await startWorker({
      queues: ['stop'],
      concurrency: 3,
      shutdownTimeoutMs: 500,
      tasks: {
        quick_after_stop: async (_p, { job: j }) => {
          started.push(j.id);
          await finishing.promise;
        },
        honours_abort: async (_p, { job: j, signal }) => {
          started.push(j.id);
          await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error)));
        },
        ignores_abort: async (_p, { job: j }) => {
          started.push(j.id);
          await new Promise(() => {});
        },
      },
    });
    worker.on('error', (err) => errors.push(err));
    const quick = await queue.enqueue('quick_after_stop', {}, { queue: 'stop' });
    const aborted = await queue.enqueue('honours_abort', {}, { queue: 'stop' });
    const stuck = await queue.enqueue('ignores_abort', {}, { queue: 'stop' });
    await waitFor(() => started.length === 3, 'the three jobs to start');
    const stopped = worker.stop();
    // Enqueued after stop began: must not be claimed.
    const late = await queue.enqueue('quick_after_stop', {}, { queue: 'stop' });
    finishing.resolve();
    await stopped;
    expect(await job(quick)).toMatchObject({ status: 'completed', attempts: 1 });
    expect(await job(aborted)).toMatchObject({ status: 'pending', attempts: 0, locked_by: null });
    // Its handler may still be working on it: handed back, another worker could run
    // it at the same time. Left to the rescuer, and said so.
    expect(await job(stuck)).toMatchObject({ status: 'processing', attempts: 1 });
    expect(errors).toEqual([
      expect.objectContaining({
        code: 'SHUTDOWN',
        message: expect.stringContaining(`job(s) ${stuck}: the handler did not stop`),
      }),
    ]);
    expect(await job(late)).toMatchObject({ status: 'pending', attempts: 0 });
  });

  it('stop(): an aborted job is announced as handed back, with a SHUTDOWN reason; one whose row stays locked elsewhere is an error event', async () => {
    const reasons: unknown[] = [];
    const started: string[] = [];
    const worker = await startWorker({
      queues: ['stop-locked'],
      concurrency: 2,
      shutdownTimeoutMs: 300,
      tasks: {
        stuck: async (_p, { job: j, signal }) => {
          started.push(j.id);
          await new Promise((_, reject) =>
            signal.addEventListener('abort', () => {
              reasons.push(signal.reason);
              reject(signal.reason as Error);
            }),
          );
        },
      },
    });
    const handedBack: string[] = [];
    const errors: unknown[] = [];
    worker.on('jobs:handed-back', (jobs, { reason }) => {
      if (reason === 'stopping') handedBack.push(...jobs.map((j) => j.id));
    });
    worker.on('error', (err) => errors.push(err));
    const [free, locked] = await queue.enqueueMany([
      { task: 'stuck', queue: 'stop-locked' },
      { task: 'stuck', queue: 'stop-locked' },
    ]);
    await waitFor(() => started.length === 2, 'both jobs to start');
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM ${db.s}.jobs WHERE id = $1 FOR UPDATE`, [locked]);
      await worker.stop();
      await other.query('COMMIT');
    } finally {
      other.release();
    }
    expect(reasons).toEqual([
      expect.objectContaining({ code: 'SHUTDOWN', name: 'WorkerStoppingError' }),
      expect.objectContaining({ code: 'SHUTDOWN', name: 'WorkerStoppingError' }),
    ]);
    expect(handedBack).toEqual([free]);
    expect(await job(free!)).toMatchObject({ status: 'pending', attempts: 0 });
    expect(await job(locked!)).toMatchObject({ status: 'processing', attempts: 1 });
    expect(errors).toEqual([
      expect.objectContaining({ code: 'SHUTDOWN', message: expect.stringContaining(`job(s) ${locked} on stop`) }),
    ]);
  });

  it('stop() renews the locks of aborted handlers through their grace, so a short visibility timeout does not free their jobs', async () => {
    const finish = deferred();
    const aborted = deferred();
    const worker = await startWorker({
      queues: ['stop-grace'],
      shutdownTimeoutMs: 100,
      visibilityTimeoutMs: 1_000,
      heartbeatIntervalMs: 150,
      tasks: {
        lingers: async (_p, { signal }) => {
          signal.addEventListener('abort', () => aborted.resolve());
          await finish.promise; // returns within the 1 s grace, late
        },
      },
    });
    const id = await queue.enqueue('lingers', {}, { queue: 'stop-grace' });
    await waitFor(async () => (await job(id)).status === 'processing', 'the job to start');
    const lockedAt = async () => (await job(id)).locked_at!.getTime();
    const stopped = worker.stop();
    await aborted.promise;
    // Outside review 199: the heartbeat stopped at the abort, and the lock aged
    // through the grace while the handler still ran.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const early = await lockedAt();
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(await lockedAt()).toBeGreaterThan(early);
    finish.resolve();
    await stopped;
  });

  it('stop({ exiting: true }) hands back a job whose handler ignores its abort: the process ends it', async () => {
    const started: string[] = [];
    const worker = await startWorker({
      queues: ['stop-exiting'],
      shutdownTimeoutMs: 200,
      tasks: {
        ignores_abort: async (_p, { job: j }) => {
          started.push(j.id);
          await new Promise(() => {});
        },
      },
    });
    const id = await queue.enqueue('ignores_abort', {}, { queue: 'stop-exiting' });
    await waitFor(() => started.length === 1, 'the job to start');
    await expect(worker.stop({ exitng: true } as never)).rejects.toBeInstanceOf(ConfigError);
    // Any stop() call's exiting: true counts, also one made after a plain stop() began.
    const plain = worker.stop();
    await worker.stop({ exiting: true });
    await plain;
    expect(await job(id)).toMatchObject({ status: 'pending', attempts: 0, locked_by: null });
  });

  it('stop({ exiting: true, failRunning }) fails the attempt of a job still running at the deadline, leaves one whose handler runs on to the rescuer, hands back what never started', async () => {
    const started: string[] = [];
    const worker = await startWorker({
      queues: ['stop-fail-running'],
      concurrency: 2,
      shutdownTimeoutMs: 200,
      tasks: {
        slow: async (_p, { job: j, signal }) => {
          started.push(j.id);
          await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error)));
        },
        stubborn: async (_p, { job: j }) => {
          started.push(j.id);
          await new Promise(() => {});
        },
      },
    });
    const failures: unknown[] = [];
    worker.on('job:fail', (_j, { error, willRetry }) => failures.push({ error, willRetry }));
    const errors: Error[] = [];
    worker.on('error', (err) => errors.push(err));
    const [running, stubborn, waiting] = await queue.enqueueMany([
      { task: 'slow', queue: 'stop-fail-running', maxAttempts: 3 },
      { task: 'stubborn', queue: 'stop-fail-running', maxAttempts: 3 },
      { task: 'slow', queue: 'stop-fail-running', maxAttempts: 1, priority: -1 },
    ]);
    await waitFor(() => started.length === 2, 'two jobs to start');
    await expect(worker.stop({ failRunning: new Error('x') })).rejects.toThrow(/give exiting: true too/);
    await expect(worker.stop({ exiting: true, failRunning: 'x' } as never)).rejects.toThrow(/failRunning must be an Error/);
    // Handed back unspent, the job that made `sluice worker` stop ran again at every restart, never counted (outside review 195).
    await worker.stop({ exiting: true, failRunning: new Error('uncaught: boom') });
    expect(started.sort()).toEqual([running, stubborn].sort());
    expect(await job(running!)).toMatchObject({
      status: 'pending',
      attempts: 1,
      last_error: expect.stringContaining('uncaught: boom'),
    });
    expect(failures).toEqual([{ error: expect.objectContaining({ message: 'uncaught: boom' }), willRetry: true }]);
    // Its handler runs on: written failed, its retry could start elsewhere beside it (review 196). The rescuer counts its attempt.
    expect(await job(stubborn!)).toMatchObject({ status: 'processing', attempts: 1 });
    expect(errors.map((e) => e.message)).toEqual([expect.stringContaining(`job(s) ${stubborn}: the handler did not stop`)]);
    // Never started: back to pending, its attempt not spent.
    expect(await job(waiting!)).toMatchObject({ status: 'pending', attempts: 0 });
  });

  it('stop(): a result it cannot write (its row locked elsewhere past the deadline) is named in an error event', async () => {
    const gate = deferred();
    const ran: string[] = [];
    const worker = await startWorker({
      queues: ['stop-result-locked'],
      completionFlushMs: 60_000,
      batchSize: 100,
      tasks: {
        quick: async (_p, { job: j }) => {
          await gate.promise;
          ran.push(j.id);
        },
      },
    });
    const errors: unknown[] = [];
    worker.on('error', (err) => errors.push(err));
    const id = await queue.enqueue('quick', {}, { queue: 'stop-result-locked' });
    await waitFor(async () => (await job(id)).status === 'processing', 'the job to start');
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM ${db.s}.jobs WHERE id = $1 FOR UPDATE`, [id]);
      gate.resolve();
      await waitFor(() => ran.length === 1, 'the handler to finish');
      await worker.stop();
      await other.query('COMMIT');
    } finally {
      other.release();
    }
    expect(await job(id)).toMatchObject({ status: 'processing', attempts: 1 });
    // Listed in the stopped worker's registry row: the rescuer gives the attempt back.
    const { rows } = await db.pool.query(`SELECT 1 FROM ${db.s}.workers WHERE $1 = ANY(row_held) AND stopped_at IS NOT NULL`, [
      id,
    ]);
    expect(rows).toHaveLength(1);
    expect(errors).toEqual([
      expect.objectContaining({
        code: 'SHUTDOWN',
        message: expect.stringContaining(`the result(s) or hand-back(s) of job(s) ${id} could not be written`),
      }),
    ]);
  });

  it('never runs more jobs at once than its concurrency', async () => {
    let now = 0;
    let peak = 0;
    const worker = await startWorker({
      queues: ['concurrency'],
      concurrency: 3,
      tasks: {
        count: async () => {
          peak = Math.max(peak, ++now);
          await new Promise((r) => setImmediate(r));
          now--;
        },
      },
    });
    await queue.enqueueMany(Array.from({ length: 60 }, () => ({ task: 'count', queue: 'concurrency' })));
    await waitFor(async () => {
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${db.s}.jobs WHERE queue = 'concurrency' AND status = 'completed'`,
      );
      return rows[0].n === 60;
    }, 'all jobs');
    expect(peak).toBeLessThanOrEqual(3);
    expect(peak).toBeGreaterThan(1);
    void worker;
  });

  it('rejects bad options with ConfigError', () => {
    const base = { connectionString: db.url, tasks: { t: async () => {} } };
    expect(() => new Worker({ ...base, concurrency: 0 })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, concurrency: 1.5 })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, queues: [] })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, queues: [''] })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, tasks: {} })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, tasks: { t: 'nope' as never } })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, visibilityTimeoutMs: 2_000, heartbeatIntervalMs: 1_500 })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, concurency: 3 } as never)).toThrow(/unknown option "concurency"/);
    expect(() => new Worker({ tasks: { t: async () => {} } })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, driver: 'mysql' as never })).toThrow(/driver must be 'pg' or 'postgres.js'/);
    expect(() => new Worker({ ...base, pool: db.pool, driver: 'postgres.js' })).toThrow(ConfigError);
    expect(() => new Worker({ ...base, sql: {} as never })).toThrow(/postgres.js instance/);
    // Outside review 129: taken silently.
    expect(() => new Worker({ ...base, listen: false, listenConnectionString: db.url })).toThrow(
      'Worker: listenConnectionString is for LISTEN, and listen is false: give one or the other',
    );
  });

  it('warns when its pool cannot hold every handler and its own 3 connections (outside review 213)', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'SLUICE_POOL_SIZE') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    const small = new pg.Pool({ connectionString: db.url, max: 3 });
    const large = new pg.Pool({ connectionString: db.url, max: 9 });
    try {
      new Worker({ pool: large, concurrency: 6, tasks: { t: async () => {} } });
      new Worker({ pool: small, concurrency: 6, tasks: { t: async () => {} } });
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([expect.stringMatching(/^Worker: your pool's max is 3, under concurrency \(6\) \+ 3/)]);
    } finally {
      process.off('warning', onWarning);
      await Promise.all([small.end(), large.end()]);
    }
  });
});
