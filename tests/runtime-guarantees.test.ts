/**
 * Three promises of the worker runtime, each broken once (issue 12), proven with
 * real workers and processes on real Postgres:
 * - stop() hands back every job it claimed but did not finish, including the
 *   ones a claim still in flight brings back;
 * - every known due time (delayed jobs, retries, snoozes) wakes the worker, not
 *   only the earliest;
 * - a job claimed ahead never waits for a slot behind slow jobs.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { Snooze } from '../src/index.js';
import { statusCounts, waitFor } from './helpers/database.js';
import { FIXTURES, spawnCli } from './helpers/cli.js';
import { deferred, useWorkers } from './helpers/workers.js';

const t = useWorkers('guarantees');

/** Far longer than any test: only wake-ups the worker arranges itself can start a job. */
const NO_POLL = 3_600_000;

beforeEach(async () => {
  await t.db.pool.query(`TRUNCATE ${t.db.s}.jobs`);
});

/** Jobs the worker holds but did not finish: must be none after a stop. */
async function leftProcessing(): Promise<number> {
  const { rows } = await t.db.pool.query(`SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE status = 'processing'`);
  return rows[0].n;
}

/** Pending jobs whose attempt was spent: a stop must give attempts back. */
async function pendingWithSpentAttempts(): Promise<number> {
  const { rows } = await t.db.pool.query(
    `SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE status = 'pending' AND attempts > 0`,
  );
  return rows[0].n;
}

async function completedCount(): Promise<number> {
  return (await statusCounts(t.db)).completed ?? 0;
}

describe('stop()', () => {
  it('leaves no job processing and spends no attempt, with claims in flight (5 trials)', async () => {
    for (let trial = 0; trial < 5; trial++) {
      await t.db.pool.query(`TRUNCATE ${t.db.s}.jobs`);
      await t.queue.enqueueMany(Array.from({ length: 400 }, () => ({ task: 'paced', maxAttempts: 1 })));
      const ran = new Set<string>();
      const worker = await t.start({
        concurrency: 10,
        pollIntervalMs: NO_POLL,
        tasks: {
          paced: async (_p, { job }) => {
            ran.add(job.id);
            await new Promise((r) => setTimeout(r, 2));
          },
        },
      });
      await waitFor(async () => (await completedCount()) >= 50, '50 jobs to complete');
      await worker.stop();

      expect(await leftProcessing()).toBe(0);
      expect(await pendingWithSpentAttempts()).toBe(0);
      const counts = await statusCounts(t.db);
      expect((counts.completed ?? 0) + (counts.pending ?? 0)).toBe(400);
      // Every completed job ran here; nothing ran that is not completed or handed back.
      const { rows } = await t.db.pool.query(`SELECT id::text AS id FROM ${t.db.s}.jobs WHERE status = 'completed'`);
      for (const row of rows) expect(ran.has(row.id)).toBe(true);
    }
  });

  it('`sluice worker` on SIGTERM hands back what it holds and exits 0 (3 trials)', async () => {
    for (let trial = 0; trial < 3; trial++) {
      await t.db.pool.query(`TRUNCATE ${t.db.s}.jobs`);
      await t.queue.enqueueMany(Array.from({ length: 400 }, () => ({ task: 'paced', maxAttempts: 1 })));
      const worker = spawnCli(['worker', '--tasks', `${FIXTURES}cli-paced-tasks.mjs`, '--concurrency', '10'], {
        DATABASE_URL: t.db.url,
        SLUICE_SCHEMA: t.db.schema,
      });
      try {
        await waitFor(async () => (await completedCount()) >= 50, '50 jobs to complete');
        worker.child.kill('SIGTERM');
        const result = await worker.exited;
        expect(result.code, result.stderr).toBe(0);
      } finally {
        worker.child.kill('SIGKILL');
      }
      expect(await leftProcessing()).toBe(0);
      expect(await pendingWithSpentAttempts()).toBe(0);
    }
  });
});

describe('due times', () => {
  it('starts each delayed job when it falls due, in either order, without a poll', async () => {
    const started: string[] = [];
    await t.start({ pollIntervalMs: NO_POLL, tasks: { later: async (p: { n: string }) => void started.push(p.n) } });
    await t.queue.enqueue('later', { n: 'a1' }, { delayMs: 300 });
    await t.queue.enqueue('later', { n: 'a2' }, { delayMs: 600 });
    await t.queue.enqueue('later', { n: 'b2' }, { delayMs: 900 });
    await t.queue.enqueue('later', { n: 'b1' }, { delayMs: 450 });
    await waitFor(() => started.length === 4, 'all four delayed jobs to start');
    expect(started.sort()).toEqual(['a1', 'a2', 'b1', 'b2']);
  });

  it('starts every delayed job of one enqueueMany, and of concurrent enqueues, when each falls due', async () => {
    const started: string[] = [];
    await t.start({ pollIntervalMs: NO_POLL, tasks: { later: async (p: { n: string }) => void started.push(p.n) } });
    // One statement: one trigger call for four due times.
    await t.queue.enqueueMany(
      [300, 600, 900, 1_200].map((delayMs) => ({ task: 'later', payload: { n: `many-${delayMs}` }, delayMs })),
    );
    // Concurrent single enqueues on the Queue's own pool: their wake-ups are merged after COMMIT.
    await Promise.all([350, 650, 950, 1_250].map((delayMs) => t.queue.enqueue('later', { n: `one-${delayMs}` }, { delayMs })));
    await waitFor(() => started.length === 8, 'all eight delayed jobs to start');
    expect(started.sort()).toEqual([
      'many-1200',
      'many-300',
      'many-600',
      'many-900',
      'one-1250',
      'one-350',
      'one-650',
      'one-950',
    ]);
  });

  it('starts every job of one plain SQL INSERT with several run_at values when each falls due', async () => {
    const started: string[] = [];
    await t.start({ pollIntervalMs: NO_POLL, tasks: { later: async (p: { n: string }) => void started.push(p.n) } });
    await t.db.pool.query(
      `INSERT INTO ${t.db.s}.jobs (queue, task, payload, run_at)
       SELECT 'default', 'later', jsonb_build_object('n', 'sql-' || d), clock_timestamp() + d * interval '1 millisecond'
       FROM unnest(ARRAY[300, 600, 900]) AS d`,
    );
    await waitFor(() => started.length === 3, 'all three delayed jobs to start');
    expect(started.sort()).toEqual(['sql-300', 'sql-600', 'sql-900']);
  });

  it('runs every retry when its backoff ends, without a poll', async () => {
    const attempts = new Map<number, number>();
    await t.start({
      pollIntervalMs: NO_POLL,
      concurrency: 5,
      backoff: { baseMs: 400, shape: 'fixed' },
      tasks: {
        flaky: async (p: { n: number }, { attempt }) => {
          attempts.set(p.n, attempt);
          // Failures spread over time, so their retries fall due at different moments.
          await new Promise((r) => setTimeout(r, p.n * 40));
          if (attempt === 1) throw new Error('first attempt fails');
        },
      },
    });
    await t.queue.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ task: 'flaky', payload: { n }, maxAttempts: 3 })));
    await waitFor(async () => (await completedCount()) === 5, 'every job to complete on its retry');
    expect([...attempts.values()]).toEqual([2, 2, 2, 2, 2]);
  });

  it('runs every snoozed job again when its snooze ends, without a poll', async () => {
    const runs = new Map<number, number>();
    await t.start({
      pollIntervalMs: NO_POLL,
      tasks: {
        sleepy: async (p: { n: number }) => {
          const seen = (runs.get(p.n) ?? 0) + 1;
          runs.set(p.n, seen);
          if (seen === 1) throw new Snooze(200 + p.n * 150);
        },
      },
    });
    await t.queue.enqueueMany(Array.from({ length: 4 }, (_, n) => ({ task: 'sleepy', payload: { n } })));
    await waitFor(async () => (await completedCount()) === 4, 'every snoozed job to complete');
    expect([...runs.values()]).toEqual([2, 2, 2, 2]);
  });
});

describe('prefetch', () => {
  it('never holds a job back behind slow ones: another worker runs it', async () => {
    const release = deferred();
    const slowStarted = new Set<string>();
    const fastRanOn = new Map<string, string>();
    const tasks = (name: string) => ({
      fast: async (_p: unknown, { job }: { job: { id: string } }) => void fastRanOn.set(job.id, name),
      slow: async (_p: unknown, { job }: { job: { id: string } }) => {
        slowStarted.add(job.id);
        await release.promise;
      },
    });
    const busy = await t.start({ concurrency: 4, pollIntervalMs: NO_POLL, tasks: tasks('busy') });
    // Teach the worker that `fast` is fast, so it would prefetch by the old average-based rule.
    await t.queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 'fast' })));
    await waitFor(() => fastRanOn.size === 40, 'the warm-up jobs');

    // Slow jobs first (higher priority), then fast ones that should go to whoever is free.
    await t.queue.enqueueMany([
      ...Array.from({ length: 4 }, () => ({ task: 'slow', priority: 10 })),
      ...Array.from({ length: 8 }, () => ({ task: 'fast' })),
    ]);
    await waitFor(() => slowStarted.size === 4, 'the slow jobs to fill every slot of the busy worker');
    await t.start({ concurrency: 4, pollIntervalMs: 200, tasks: tasks('idle') });
    try {
      await waitFor(() => fastRanOn.size === 48, 'every fast job to run while the slow ones hold the busy worker');
    } finally {
      release.resolve();
    }
    expect(busy.runningJobIds.length).toBeLessThanOrEqual(4);
  });
});

describe('a handler error Postgres cannot store as text', () => {
  it('fails only its own job: a NUL in the error does not stop the worker writing every other result', async () => {
    await t.start({
      pollIntervalMs: NO_POLL,
      tasks: {
        binary: async () => JSON.parse('\u0000garbage') as unknown,
        ok: async () => {},
      },
    });
    const [bad] = await t.queue.enqueueMany([
      { task: 'binary', maxAttempts: 1 },
      ...Array.from({ length: 5 }, () => ({ task: 'ok' })),
    ]);
    await waitFor(async () => (await statusCounts(t.db)).completed === 5, 'the five good jobs to complete');
    await waitFor(async () => (await t.queue.getJob(bad!))?.status === 'failed', 'the bad job to fail');
    expect((await t.queue.getJob(bad!))!.last_error).toContain('\\u0000');
  });
});
