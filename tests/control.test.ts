import { describe, expect, it } from 'vitest';
import {
  Snooze,
  cancelJobs,
  getJobAudit,
  JobCancelledError,
  retryJob,
  ValidationError,
  ConfigError,
  Queue,
  Worker,
  type JobRow,
  type WorkerOptions,
} from '../src/index.js';
import { channelFor } from '../src/db/identifiers.js';
import { nextEvent, waitFor } from './helpers/database.js';
import { deferred, useWorkers } from './helpers/workers.js';
import { runCli } from './helpers/cli.js';

const suite = useWorkers('control');
let started = 0;

/** `n` started workers on this file's schema, each with its own connections and id. */
function startWorkers(n: number, options: Omit<WorkerOptions, 'connectionString' | 'schema'>): Promise<Worker[]> {
  return Promise.all(Array.from({ length: n }, () => suite.start({ workerId: `w${started++}`, ...options })));
}

async function job(id: string): Promise<JobRow> {
  return (await suite.queue.getJob(id))!;
}

async function waitForStatus(id: string, status: string): Promise<JobRow> {
  return waitFor(async () => {
    const row = await job(id);
    return row.status === status ? row : undefined;
  }, `job ${id} to be ${status}`);
}

/** Resolves with the first of these workers to emit `event`. */
function firstEvent<T extends unknown[]>(list: Worker[], event: string): Promise<T> {
  return Promise.race(list.map((w) => nextEvent<T>(w, event)));
}

describe('cancellation', () => {
  it('a cancelled pending job never runs', async () => {
    const ran: string[] = [];
    // Enqueued before the marker, so the claim order would reach it first.
    const doomed = await suite.queue.enqueue('note', {}, { queue: 'c-pending' });
    const result = await suite.queue.cancel(doomed);
    expect(result).toMatchObject({ ok: true, previousStatus: 'pending', job: { id: doomed, status: 'cancelled' } });
    const marker = await suite.queue.enqueue('note', {}, { queue: 'c-pending' });
    await startWorkers(2, { queues: ['c-pending'], tasks: { note: async (_p, { job: j }) => void ran.push(j.id) } });
    await waitForStatus(marker, 'completed');
    expect(ran).toEqual([marker]);
    expect(await job(doomed)).toMatchObject({ status: 'cancelled', attempts: 0 });
    expect((await job(doomed)).finished_at).toBeInstanceOf(Date);
  });

  it('cancel takes { tx, actor } and refuses other option names, so a misspelt tx cancels nothing (outside review 75)', async () => {
    const id = await suite.queue.enqueue('note', {}, { queue: 'c-options' });
    await expect(suite.queue.cancel(id, { trx: suite.db.pool } as never)).rejects.toThrow(/cancel: unknown option "trx"/);
    await expect(suite.queue.getJob(id, { txx: 1 } as never)).rejects.toThrow(/getJob: unknown option "txx"/);
    await expect(suite.queue.listQueues({ tx: suite.db.pool, x: 1 } as never)).rejects.toThrow(/listQueues: unknown option "x"/);
    expect(await job(id)).toMatchObject({ status: 'pending' });
    const client = await suite.db.pool.connect();
    try {
      await client.query('BEGIN');
      expect(await suite.queue.cancel(id, { tx: client, actor: 'ops' })).toMatchObject({ ok: true });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await job(id)).toMatchObject({ status: 'pending' });
    expect(await suite.queue.cancel(id, { actor: 'ops' })).toMatchObject({ ok: true });
    expect(await getJobAudit(suite.db.pool, suite.db.schema, id)).toEqual([
      expect.objectContaining({ action: 'cancel', actor: 'ops' }),
    ]);
  });

  it('a running job is aborted on whichever worker runs it, ends cancelled and is not retried', async () => {
    const aborted: { worker: string; reason: unknown }[] = [];
    const list = await startWorkers(3, {
      queues: ['c-running'],
      pollIntervalMs: 3_600_000, // only NOTIFY can tell the worker
      heartbeatIntervalMs: 10_000, // and not the heartbeat fallback either
      tasks: {
        wait: (_p, { signal, job: j }) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => {
              aborted.push({ worker: j.locked_by!, reason: signal.reason });
              reject(signal.reason);
            });
          }),
        quick: async () => {},
      },
    });
    const startedOn = firstEvent<[JobRow]>(list, 'job:start');
    const id = await suite.queue.enqueue('wait', {}, { queue: 'c-running', maxAttempts: 5 });
    const [startedJob] = await startedOn;
    // A caller waiting for the outcome is woken by the cancel (poll far slower than the test).
    const outcome = suite.queue.waitFor(id, { pollIntervalMs: 3_600_000, timeoutMs: 20_000 });
    const cancelledEvent = firstEvent<[JobRow]>(list, 'job:cancel');
    expect(await suite.queue.cancel(id)).toMatchObject({ ok: true, previousStatus: 'processing', job: { status: 'cancelled' } });
    const [cancelled] = await cancelledEvent;
    expect(cancelled.id).toBe(id);
    expect(aborted).toHaveLength(1);
    expect(aborted[0]!.worker).toBe(startedJob.locked_by);
    expect(await outcome).toMatchObject({ id, status: 'cancelled' });
    expect(aborted[0]!.reason).toBeInstanceOf(JobCancelledError);
    // Later cycles of every worker write nothing over it: run more jobs through all of them.
    const later = await suite.queue.enqueueMany(Array.from({ length: 30 }, () => ({ task: 'quick', queue: 'c-running' })));
    await Promise.all(later.map((l) => waitForStatus(l, 'completed')));
    expect(await job(id)).toMatchObject({ status: 'cancelled', attempts: 1, last_error: null });
  });

  it("cancelJobs cancels a queue's jobs at once: running handlers on several workers are aborted, waiting ones never start", async () => {
    const aborted: string[] = [];
    const ran: string[] = [];
    const list = await startWorkers(2, {
      queues: ['c-bulk'],
      concurrency: 2,
      pollIntervalMs: 3_600_000, // only NOTIFY can tell the workers
      heartbeatIntervalMs: 10_000,
      tasks: {
        wait: (_p, { signal, job: j }) =>
          new Promise((_, reject) => {
            ran.push(j.id);
            signal.addEventListener('abort', () => {
              aborted.push(j.id);
              reject(signal.reason);
            });
          }),
      },
    });
    const ids = await suite.queue.enqueueMany(
      Array.from({ length: 30 }, () => ({ task: 'wait', queue: 'c-bulk', maxAttempts: 5 })),
    );
    const other = await suite.queue.enqueue('wait', {}, { queue: 'c-bulk-other' });
    // Every slot of both workers busy (and more claimed ahead), the rest pending.
    await waitFor(() => ran.length === 4, 'four handlers running');
    const running = [...ran];
    const cancels = Promise.all(list.map((w) => nextEvent(w, 'job:cancel')));
    const result = await cancelJobs(suite.db.pool, suite.db.schema, { queue: 'c-bulk', actor: 'ops' });
    expect(result.cancelled).toBe(30);
    expect(result.processing).toBeGreaterThanOrEqual(4);
    expect(result.pending + result.processing).toBe(30);
    await cancels;
    await waitFor(() => aborted.length === 4, 'the four handlers aborted').catch((err: unknown) => {
      throw new Error(
        `${String(err)}; ran ${JSON.stringify(ran)} aborted ${JSON.stringify(aborted)} result ${JSON.stringify(result)}`,
      );
    });
    expect(aborted.sort()).toEqual(running.sort());
    const rows = await Promise.all(ids.map(job));
    expect(rows.every((r) => r.status === 'cancelled')).toBe(true);
    expect(await job(other)).toMatchObject({ status: 'pending' });
    expect((await getJobAudit(suite.db.pool, suite.db.schema, ids[29]!))[0]).toMatchObject({ action: 'cancel', actor: 'ops' });
    // No handler started after the cancel, and none ran twice.
    expect(ran.sort()).toEqual(running.sort());
  });

  it('without LISTEN the heartbeat tells a running job it was cancelled: JobCancelledError and job:cancel, not a lost lock (outside review 238)', async () => {
    const reasons: unknown[] = [];
    const started = deferred();
    // Due before the worker starts: its first claim takes it (no LISTEN, no poll to wait for).
    const id = await suite.queue.enqueue('wait', {}, { queue: 'c-nolisten' });
    const [worker] = await startWorkers(1, {
      queues: ['c-nolisten'],
      listen: false,
      pollIntervalMs: 3_600_000,
      heartbeatIntervalMs: 200,
      tasks: {
        wait: (_p, { signal }) =>
          new Promise((_, reject) => {
            signal.addEventListener('abort', () => {
              reasons.push(signal.reason);
              reject(signal.reason as Error);
            });
            started.resolve();
          }),
      },
    });
    const lockLost: string[] = [];
    worker!.on('job:lock-lost', (j: JobRow) => lockLost.push(j.id));
    const cancelledEvent = nextEvent<[JobRow]>(worker!, 'job:cancel');
    await started.promise;
    expect((await suite.queue.cancel(id)).ok).toBe(true);
    expect((await cancelledEvent)[0].id).toBe(id);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(JobCancelledError);
    expect(lockLost).toEqual([]);
    expect(await job(id)).toMatchObject({ status: 'cancelled', attempts: 1 });
  });

  it('the slot a cancelled job frees claims the next due job at once, not at the next poll (outside review 207)', async () => {
    const started: string[] = [];
    await startWorkers(1, {
      queues: ['c-slot'],
      concurrency: 1,
      prefetch: 0, // the next job is not claimed ahead: only a claim after the cancel starts it
      pollIntervalMs: 3_600_000,
      heartbeatIntervalMs: 10_000,
      tasks: {
        // Some clean-up after the abort: the cancel's own wake-up comes while the slot is still held.
        wait: (_p, { signal, job: j }) => {
          started.push(j.id);
          return new Promise((_, reject) =>
            signal.addEventListener('abort', () => setTimeout(() => reject(signal.reason as Error), 300)),
          );
        },
      },
    });
    const first = await suite.queue.enqueue('wait', {}, { queue: 'c-slot' });
    await waitFor(() => started.includes(first), 'the first job to start');
    // Due while the only slot is busy: its notification finds no room.
    const next = await suite.queue.enqueue('wait', {}, { queue: 'c-slot' });
    expect((await suite.queue.cancel(first)).ok).toBe(true);
    await waitFor(() => started.includes(next), 'the next job to start in the freed slot');
  });

  it("a worker's late result (success or failure) does not overwrite a cancellation", async () => {
    const release = new Map<string, () => void>();
    // listen: false and a slow heartbeat: the worker never hears of the cancel, so
    // the only thing between its result and the row is the status guard.
    const [worker] = await startWorkers(1, {
      queues: ['c-late'],
      listen: false,
      pollIntervalMs: 50,
      heartbeatIntervalMs: 10_000,
      tasks: {
        late: async ({ fail }: { fail: boolean }, { job: j }) => {
          await new Promise<void>((resolve) => release.set(j.id, resolve));
          if (fail) throw new Error('failed after the cancel');
        },
      },
    });
    // Told as cancelled, not as lost locks (outside review 240: job:lock-lost).
    const told: string[] = [];
    worker!.on('job:lock-lost', (j) => told.push(`lock-lost ${j.id}`));
    worker!.on('job:cancel', (j) => told.push(`cancel ${j.id}`));
    const ok = await suite.queue.enqueue('late', { fail: false }, { queue: 'c-late' });
    const bad = await suite.queue.enqueue('late', { fail: true }, { queue: 'c-late' });
    await waitFor(() => release.has(ok) && release.has(bad), 'both jobs to start');
    await suite.queue.cancel(ok);
    await suite.queue.cancel(bad);
    release.get(ok)!();
    release.get(bad)!();
    await waitFor(() => told.length === 2, 'both results to be rejected');
    expect(told.sort()).toEqual([`cancel ${bad}`, `cancel ${ok}`].sort());
    expect(await job(ok)).toMatchObject({ status: 'cancelled', attempts: 1 });
    expect(await job(bad)).toMatchObject({ status: 'cancelled', attempts: 1, last_error: null });
  });

  it('a running job cancelled while its handler ignores the signal is reported cancelled, not also lock-lost', async () => {
    let release: (() => void) | undefined;
    const [worker] = await startWorkers(1, {
      queues: ['c-ignore'],
      heartbeatIntervalMs: 100,
      tasks: {
        // Ignores its signal: runs on after the cancel, through several heartbeats.
        stubborn: async () => new Promise<void>((resolve) => (release = resolve)),
      },
    });
    const events: string[] = [];
    worker!.on('job:lock-lost', (j) => events.push(`lock-lost ${j.id}`));
    worker!.on('job:cancel', (j) => events.push(`cancel ${j.id}`));
    const id = await suite.queue.enqueue('stubborn', {}, { queue: 'c-ignore' });
    await waitFor(() => release, 'the job to start');
    await suite.queue.cancel(id);
    await waitForStatus(id, 'cancelled');
    // Heartbeats find the row no longer locked to the worker meanwhile (review 69: job:lock-lost as well).
    await new Promise((resolve) => setTimeout(resolve, 500));
    release!();
    await waitFor(() => events.length > 0, 'the cancel event');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(events).toEqual([`cancel ${id}`]);
  });

  it("a cancel's notification that reaches a worker after the job was retried leaves the new attempt alone (outside review 261)", async () => {
    const release = deferred();
    const aborted: number[] = [];
    const started: number[] = [];
    await startWorkers(1, {
      queues: ['c-late'],
      tasks: {
        held: (_p, { signal, attempt }) =>
          new Promise<void>((resolve, reject) => {
            started.push(attempt);
            signal.addEventListener('abort', () => {
              aborted.push(attempt);
              reject(signal.reason as Error);
            });
            void release.promise.then(() => resolve());
          }),
      },
    });
    const listener = await suite.db.pool.connect();
    const payloads: string[] = [];
    listener.on('notification', (n) => {
      if (n.payload?.includes('"cancel"')) payloads.push(n.payload);
    });
    try {
      await listener.query(`LISTEN "${channelFor(suite.db.schema)}"`);
      const id = await suite.queue.enqueue('held', {}, { queue: 'c-late', maxAttempts: 5 });
      await waitFor(() => started.length === 1, 'the first attempt to start');
      expect((await suite.queue.cancel(id)).ok).toBe(true);
      await waitFor(() => aborted.length === 1 && payloads.length === 1, 'the first attempt aborted');
      expect(JSON.parse(payloads[0]!)).toEqual({ c: 'cancel', id, attempt: 1 });
      expect((await retryJob(suite.db.pool, suite.db.schema, id)).ok).toBe(true);
      await waitFor(() => started.length === 2, 'the retry to start');
      // The same notification once more, as one delivered late would arrive: attempt 2 is not the one it cancelled.
      await suite.db.pool.query('SELECT pg_notify($1, $2)', [channelFor(suite.db.schema), payloads[0]]);
      await waitFor(() => payloads.length === 2, 'the late copy delivered');
      // Time for the worker's own LISTEN to deliver it too, while attempt 2 still runs.
      await new Promise((resolve) => setTimeout(resolve, 300));
      release.resolve();
      await waitForStatus(id, 'completed');
      expect(aborted).toEqual([1]);
      expect(started).toEqual([1, 2]);
    } finally {
      await listener.query('UNLISTEN *').catch(() => {});
      listener.release();
    }
  });

  it('finished or unknown jobs cannot be cancelled; a bad id is a ValidationError', async () => {
    const id = await suite.queue.enqueue('x', {}, { queue: 'c-done' });
    await suite.db.pool.query(`UPDATE ${suite.db.s}.jobs SET status = 'completed' WHERE id = $1`, [id]);
    expect(await suite.queue.cancel(id)).toEqual({ ok: false, reason: 'wrong_status', status: 'completed' });
    expect(await suite.queue.cancel('999999999')).toEqual({ ok: false, reason: 'not_found' });
    await expect(suite.queue.cancel('12; DROP TABLE x')).rejects.toBeInstanceOf(ValidationError);
    expect((await job(id)).status).toBe('completed');
  });
});

describe('retry control from handlers', () => {
  it('Snooze runs the job again later without spending an attempt', async () => {
    const seen: number[] = [];
    const claimedAt: Date[] = [];
    const list = await startWorkers(2, {
      queues: ['snooze'],
      tasks: {
        // maxAttempts 1: if a snooze spent the attempt, the job could never run again.
        nap: async (_p, { attempt, job: j }) => {
          seen.push(attempt);
          claimedAt.push(j.locked_at!);
          if (seen.length < 3) throw new Snooze(seen.length === 1 ? 150 : new Date(Date.now() + 100));
        },
      },
    });
    const snoozed: Date[] = [];
    for (const w of list) w.on('job:snooze', (_j, { runAt }) => snoozed.push(runAt));
    const id = await suite.queue.enqueue('nap', {}, { queue: 'snooze', maxAttempts: 1 });
    const [first] = await firstEvent<[JobRow, { runAt: Date }]>(list, 'job:snooze');
    expect(first.id).toBe(id);
    const between = await job(id);
    // Unless it already runs again, it waits with its attempt given back.
    if (between.status === 'pending') expect(between).toMatchObject({ attempts: 0, locked_by: null });
    const done = await waitForStatus(id, 'completed');
    expect(seen).toEqual([1, 1, 1]);
    expect(done.attempts).toBe(1);
    expect(snoozed).toHaveLength(2);
    // Each run was claimed (server clock) no earlier than the snooze asked for.
    expect(claimedAt[1]!.getTime()).toBeGreaterThanOrEqual(snoozed[0]!.getTime());
    expect(claimedAt[2]!.getTime()).toBeGreaterThanOrEqual(snoozed[1]!.getTime());
    expect(snoozed[0]!.getTime() - claimedAt[0]!.getTime()).toBeGreaterThanOrEqual(150);
  });

  it('Snooze rejects a bad delay', () => {
    expect(() => new Snooze(-1)).toThrow(ValidationError);
    expect(() => new Snooze(new Date('nope'))).toThrow(ValidationError);
  });

  it("a task's maxAttempts overrides the job's, both up and down", async () => {
    const runs = new Map<string, number>();
    const count = (id: string) => runs.set(id, (runs.get(id) ?? 0) + 1);
    await startWorkers(2, {
      queues: ['policy'],
      tasks: {
        more: {
          maxAttempts: 3,
          backoff: { shape: 'fixed', baseMs: 10, maxMs: 10 },
          handler: async (_p, { job: j }) => {
            count(j.id);
            throw new Error('again');
          },
        },
        fewer: {
          maxAttempts: 2,
          backoff: { shape: 'linear', baseMs: 10, maxMs: 50 },
          handler: async (_p, { job: j }) => {
            count(j.id);
            throw new Error('again');
          },
        },
      },
    });
    const more = await suite.queue.enqueue('more', {}, { queue: 'policy', maxAttempts: 1 });
    const fewer = await suite.queue.enqueue('fewer', {}, { queue: 'policy', maxAttempts: 10 });
    expect(await waitForStatus(more, 'failed')).toMatchObject({ attempts: 3 });
    expect(await waitForStatus(fewer, 'failed')).toMatchObject({ attempts: 2 });
    expect([runs.get(more), runs.get(fewer)]).toEqual([3, 2]);
  });

  it('rejects a bad per-task policy or local limit with a ConfigError', () => {
    const make = (options: Partial<WorkerOptions>) =>
      new Worker({ connectionString: suite.db.url, tasks: { t: async () => {} }, ...options });
    expect(() => make({ tasks: { t: { handler: async () => {}, maxAttempts: 0 } } })).toThrow(ConfigError);
    expect(() => make({ tasks: { t: { handler: async () => {}, backoff: { shape: 'cubic' as 'fixed' } } } })).toThrow(/shape/);
    expect(() => make({ tasks: { t: { handler: async () => {}, retries: 3 } as never } })).toThrow(/unknown option/);
    expect(() => make({ queueConcurrency: { elsewhere: 1 } })).toThrow(/not one of this worker's queues/);
    // Outside review 128: an array was taken as no limits.
    expect(() => make({ queueConcurrency: [] as unknown as Record<string, number> })).toThrow(
      'queueConcurrency must be an object of queue → limit',
    );
    expect(() => make({ concurrency: 4, queueConcurrency: { default: 5 } })).toThrow(ConfigError);
  });

  it('options that throw as they are read are a ConfigError, for the Worker and the Queue', () => {
    // Outside review 43: a throwing getter escaped as a plain Error.
    const hostile = {
      connectionString: suite.db.url,
      tasks: { t: async () => {} },
      get concurrency(): number {
        throw new Error('no concurrency for you');
      },
    };
    expect(() => new Worker(hostile)).toThrow(/Worker: the input cannot be read/);
    expect(() => new Worker(hostile)).toThrow(ConfigError);
    // One level down too: a task definition whose handler cannot be read.
    const badTask = {
      get handler(): () => void {
        throw new Error('no handler');
      },
    };
    expect(() => new Worker({ connectionString: suite.db.url, tasks: { t: badTask } })).toThrow(ConfigError);
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(() => new Queue(proxy)).toThrow(ConfigError);
    expect(
      () =>
        new Queue({
          get schema(): string {
            throw new Error('no schema');
          },
        }),
    ).toThrow(/Queue: the input cannot be read/);
  });
});

describe('pause and resume', () => {
  it("the Queue's queue settings take { tx, actor }: the actor goes to the audit log, unknown names are refused (review 71)", async () => {
    await suite.queue.pauseQueue('pz-actor', { actor: 'ops' });
    const client = await suite.db.pool.connect();
    try {
      await client.query('BEGIN');
      await suite.queue.setQueueConcurrency('pz-actor', 3, { actor: 'ops', tx: client });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    // A pool is no transaction: refused for a write, as for an enqueue (outside review 214).
    await expect(suite.queue.setQueueConcurrency('pz-actor', 3, { tx: suite.db.pool })).rejects.toThrow(/tx is a pg Pool/);
    await suite.queue.resumeQueue('pz-actor');
    const { rows } = await suite.db.pool.query<{ action: string; actor: string; detail: unknown }>(
      `SELECT action, actor, detail FROM ${suite.db.s}.audit_log WHERE queue = 'pz-actor' ORDER BY id`,
    );
    expect(rows.map((r) => r.actor)).toEqual(['ops', 'ops', 'api']);
    // The limit set, in the record (migration 0033); pause and resume need none.
    expect(rows.map((r) => [r.action, r.detail])).toEqual([
      ['pause', null],
      ['concurrency_limit', { concurrency_limit: 3 }],
      ['resume', null],
    ]);
    await expect(suite.queue.pauseQueue('pz-actor', { bogus: 1 } as never)).rejects.toBeInstanceOf(ValidationError);
    await expect(suite.queue.setQueueConcurrency('pz-actor', 1, { actr: 'x' } as never)).rejects.toThrow(/unknown option/);
    await expect(suite.queue.pauseQueue('pz-actor', { actor: 'a\0b' })).rejects.toThrow(/actor holds a NUL/);
    // 200 emoji are 200 characters for Postgres, 400 UTF-16 units for JavaScript (review 72).
    await suite.queue.pauseQueue('pz-actor', { actor: '\u{1F600}'.repeat(200) });
    await suite.queue.resumeQueue('pz-actor');
    expect((await suite.queue.listQueues()).find((q) => q.name === 'pz-actor')).toMatchObject({
      paused: false,
      concurrencyLimit: 3,
    });
  });

  it('a paused queue is not claimed from by any worker, jobs still enqueue, resume wakes them at once', async () => {
    const ran: string[] = [];
    const list = await startWorkers(3, {
      queues: ['pz', 'pz-other'],
      pollIntervalMs: 3_600_000, // after resume only the notification can wake them
      tasks: { t: async (_p, { job: j }) => void ran.push(j.queue) },
    });
    expect(await suite.queue.pauseQueue('pz')).toMatchObject({ name: 'pz', paused: true, concurrencyLimit: null });
    // The workers have the pause in their cache once the notification arrived;
    // the claim's own check makes it hold even before that.
    const ids = await suite.queue.enqueueMany(Array.from({ length: 5 }, () => ({ task: 't', queue: 'pz' })));
    // Enqueued after them: completing it proves the workers were awake and claiming.
    const marker = await suite.queue.enqueue('t', {}, { queue: 'pz-other' });
    await waitForStatus(marker, 'completed');
    expect(ran).toEqual(['pz-other']);
    for (const id of ids) expect((await job(id)).status).toBe('pending');

    expect(await suite.queue.resumeQueue('pz')).toMatchObject({ paused: false });
    await Promise.all(ids.map((id) => waitForStatus(id, 'completed')));
    expect(ran.filter((q) => q === 'pz')).toHaveLength(5);
    void list;
  });

  it('a worker hands back the jobs it claimed ahead of a queue paused (or limited) since, and starts none of them', async () => {
    const gate = deferred();
    const ran: string[] = [];
    const reasons: string[] = [];
    const handedBack: string[] = [];
    const [worker] = await startWorkers(1, {
      queues: ['pz-ahead'],
      concurrency: 2,
      tasks: {
        t: async (payload: { block?: boolean }, { job: j }) => {
          ran.push(j.id);
          if (payload.block) await gate.promise;
        },
      },
    });
    worker!.on('jobs:handed-back', (jobs, { reason }) => {
      reasons.push(reason);
      handedBack.push(...jobs.map((j) => j.id));
    });
    // Fast runs first, so the worker's next claim takes more than its 2 slots.
    await suite.queue.enqueueMany(Array.from({ length: 20 }, () => ({ task: 't', queue: 'pz-ahead' })));
    await waitFor(() => ran.length === 20, 'the fast jobs to run');
    await suite.queue.enqueueMany([
      ...Array.from({ length: 2 }, () => ({ task: 't', queue: 'pz-ahead', payload: { block: true } })),
      ...Array.from({ length: 10 }, () => ({ task: 't', queue: 'pz-ahead' })),
    ]);
    await waitFor(() => worker!.waitingJobIds.length > 0, 'jobs claimed ahead to wait in the worker');
    const waiting = worker!.waitingJobIds;
    await suite.queue.pauseQueue('pz-ahead');
    await waitFor(() => reasons.includes('queue-changed'), 'the worker to hand back what it claimed ahead');
    for (const id of waiting) {
      expect(handedBack).toContain(id);
      expect(await job(id)).toMatchObject({ status: 'pending', attempts: 0 });
    }
    // The two running jobs finish; nothing of the paused queue starts after them.
    gate.resolve();
    await waitFor(async () => (await suite.queue.getJob(ran.at(-1)!))?.status === 'completed', 'the running jobs to finish');
    expect(ran).toHaveLength(22);
    expect(worker!.waitingJobIds).toEqual([]);
    await suite.queue.resumeQueue('pz-ahead');
    await waitFor(() => ran.length === 32, 'every job to run once resumed');
    expect(new Set(ran).size).toBe(32);
  });

  it('the claim itself skips a paused queue even when the workers missed the change', async () => {
    const ran: string[] = [];
    await startWorkers(2, {
      queues: ['pz-stale', 'pz-stale-other'],
      tasks: { t: async (_p, { job: j }) => void ran.push(j.queue) },
    });
    // Paused behind the workers' backs: no notification, their cache says "running".
    await suite.db.pool.query(`INSERT INTO ${suite.db.s}.queues (name, paused) VALUES ('pz-stale', true)`);
    const id = await suite.queue.enqueue('t', {}, { queue: 'pz-stale' });
    const marker = await suite.queue.enqueue('t', {}, { queue: 'pz-stale-other' });
    await waitForStatus(marker, 'completed');
    expect(ran).toEqual(['pz-stale-other']);
    expect((await job(id)).status).toBe('pending');
  });

  it('the CLI pauses, resumes, limits and lists queues for running workers', async () => {
    const cli = (...args: string[]) => runCli(suite.db.url, suite.db.schema, ['queues', ...args]);
    const ran: string[] = [];
    await startWorkers(2, {
      queues: ['cli-q', 'cli-other'],
      pollIntervalMs: 3_600_000,
      tasks: { t: async (_p, { job: j }) => void ran.push(j.queue) },
    });
    expect(await cli('pause', 'cli-q', '--create')).toMatchObject({
      code: 0,
      stdout: 'cli-q: paused, no limit, not grouped, no group limit, rate -, group rate -\n',
    });
    const id = await suite.queue.enqueue('t', {}, { queue: 'cli-q' });
    await waitForStatus(await suite.queue.enqueue('t', {}, { queue: 'cli-other' }), 'completed');
    expect((await job(id)).status).toBe('pending');
    expect((await cli('limit', 'cli-q', '1')).stdout).toBe(
      'cli-q: paused, limit 1, not grouped, no group limit, rate -, group rate -\n',
    );
    const listed = await cli('list', '--json');
    expect(JSON.parse(listed.stdout)).toContainEqual(
      expect.objectContaining({ name: 'cli-q', paused: true, concurrencyLimit: 1 }),
    );
    expect((await cli('resume', 'cli-q')).stdout).toBe(
      'cli-q: running, limit 1, not grouped, no group limit, rate -, group rate -\n',
    );
    await waitForStatus(id, 'completed');
    expect((await cli('limit', 'cli-q', 'none')).stdout).toBe(
      'cli-q: running, no limit, not grouped, no group limit, rate -, group rate -\n',
    );
    expect((await cli('limit', 'cli-q', 'lots')).code).toBe(2);
    expect((await cli('limit', 'cli-q', '0')).code).toBe(2);
  });

  it('pausing a queue with a concurrency limit stops it too; listQueues shows the settings', async () => {
    await suite.queue.setQueueConcurrency('pz-limited', 2);
    await suite.queue.pauseQueue('pz-limited');
    const ran: string[] = [];
    await startWorkers(2, {
      queues: ['pz-limited', 'pz-limited-other'],
      tasks: { t: async (_p, { job: j }) => void ran.push(j.queue) },
    });
    const id = await suite.queue.enqueue('t', {}, { queue: 'pz-limited' });
    const marker = await suite.queue.enqueue('t', {}, { queue: 'pz-limited-other' });
    await waitForStatus(marker, 'completed');
    expect((await job(id)).status).toBe('pending');
    expect((await suite.queue.listQueues()).find((q) => q.name === 'pz-limited')).toMatchObject({
      paused: true,
      concurrencyLimit: 2,
    });
    await suite.queue.resumeQueue('pz-limited');
    await waitForStatus(id, 'completed');
    await expect(suite.queue.setQueueConcurrency('pz-limited', 0)).rejects.toBeInstanceOf(ValidationError);
    await expect(suite.queue.pauseQueue('')).rejects.toBeInstanceOf(ValidationError);
  });
});

describe('per-queue concurrency', () => {
  /** A handler that tracks how many of its jobs run at once (across every worker of this process). */
  function tracker() {
    let active = 0;
    let max = 0;
    const handler = async () => {
      max = Math.max(max, ++active);
      await new Promise((r) => setTimeout(r, 15)); // the job's "work", not a synchronisation
      active--;
    };
    return { handler, max: () => max };
  }

  it('a local limit caps one queue in one worker while others use the rest', async () => {
    const limited = tracker();
    const free = tracker();
    await startWorkers(1, {
      queues: ['local', 'local-free'],
      concurrency: 10,
      queueConcurrency: { local: 2 },
      tasks: { limited: limited.handler, free: free.handler },
    });
    const ids = await suite.queue.enqueueMany([
      ...Array.from({ length: 20 }, () => ({ task: 'limited', queue: 'local' })),
      ...Array.from({ length: 20 }, () => ({ task: 'free', queue: 'local-free' })),
    ]);
    await Promise.all(ids.map((id) => waitForStatus(id, 'completed')));
    expect(limited.max()).toBe(2);
    expect(free.max()).toBeGreaterThan(2);
  });

  it('a job claimed through a limited queue gives up its pending-only key, as the common claim does', async () => {
    await suite.queue.setQueueConcurrency('limited-key', 1);
    const release = new Map<string, () => void>();
    await startWorkers(1, {
      queues: ['limited-key'],
      tasks: { hold: (_p, { job: j }) => new Promise<void>((resolve) => release.set(j.id, resolve)) },
    });
    const first = await suite.queue.enqueue('hold', {}, { queue: 'limited-key', jobKey: 'k' });
    await waitFor(() => release.has(first), 'the first job to start');
    // Running, so the key is free: a second job with it is a new job, not the first one.
    const second = await suite.queue.enqueue('hold', {}, { queue: 'limited-key', jobKey: 'k' });
    expect(second).not.toBe(first);
    release.get(first)!();
    await waitFor(() => release.has(second), 'the second job to start after the first');
    release.get(second)!();
    await waitForStatus(second, 'completed');
  });

  it('a global limit holds across several workers, and lifting it lets them run wider', async () => {
    const limited = tracker();
    await suite.queue.setQueueConcurrency('global', 3);
    await startWorkers(3, { queues: ['global'], concurrency: 8, batchSize: 8, tasks: { limited: limited.handler } });
    const ids = await suite.queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 'limited', queue: 'global' })));
    await Promise.all(ids.map((id) => waitForStatus(id, 'completed')));
    expect(limited.max()).toBeLessThanOrEqual(3);
    expect(limited.max()).toBeGreaterThan(1);

    const wide = tracker();
    // Only this worker knows the task 'wide'.
    await startWorkers(1, { queues: ['global'], concurrency: 8, tasks: { wide: wide.handler } });
    await suite.queue.setQueueConcurrency('global', null);
    const more = await suite.queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 'wide', queue: 'global' })));
    await Promise.all(more.map((id) => waitForStatus(id, 'completed')));
    expect(wide.max()).toBeGreaterThan(3);
  });
});
