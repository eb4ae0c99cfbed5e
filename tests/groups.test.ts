import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { getGroupStats } from '../src/admin/groups.js';
import { workerStatements } from '../src/db/statements/worker.js';
import { ConfigError, ValidationError } from '../src/errors.js';
import { Queue, SluiceMetrics } from '../src/index.js';
import { watchGroups } from '../src/metrics/groups.js';
import {
  listGroupSettings,
  listQueueLimits,
  setGroupSettings,
  setQueueGroups,
  setQueueRateLimit,
} from '../src/groups/settings.js';
import { createTestSchema, waitFor } from './helpers/database.js';
import { prune } from '../src/maintenance/pruner.js';
import { resolvePrunerConfig } from '../src/maintenance/options.js';
import { maintenanceStatements } from '../src/db/statements/maintenance.js';
import { groupedQueuesTask } from '../src/maintenance/grouped-queues.js';
import type { JobRow } from '../src/job.js';
import { deferred, useWorkers } from './helpers/workers.js';

const t = useWorkers('groups');

interface Claimed {
  id: string | null;
  group_key: string | null;
  wait_until: Date | null;
}

/**
 * One claim through the statement workers send for grouped, limited and
 * rate-limited queues. A queue with grouped jobs is flagged first, as the worker
 * that claimed its first grouped job would have (migration 0021).
 */
async function claim(
  queue: string,
  max: number,
  worker = 'claimer',
  db: pg.ClientBase | pg.Pool = t.db.pool,
  startNow = max,
  finished: string[] = [],
) {
  await db.query(
    `SELECT ${t.db.s}.mark_queue_grouped($1, 'sluice-test') WHERE EXISTS (SELECT FROM ${t.db.s}.jobs WHERE queue = $1 AND group_key IS NOT NULL)`,
    [queue],
  );
  const { rows } = await db.query<Claimed>(
    `SELECT c.id, j.group_key, c.wait_until FROM (${workerStatements(t.db.schema).claimLimited}) c
     LEFT JOIN ${t.db.s}.jobs j ON j.id = c.id::bigint`,
    [worker, queue, ['t'], max, startNow, finished],
  );
  return { jobs: rows.filter((r) => r.id !== null), waitUntil: rows.find((r) => r.id === null)?.wait_until ?? null };
}

function groupsOf(jobs: Claimed[]): (string | null)[] {
  return jobs.map((j) => j.group_key);
}

async function finish(queue: string): Promise<void> {
  await t.db.pool.query(`UPDATE ${t.db.s}.jobs SET status = 'completed', finished_at = now() WHERE queue = $1`, [queue]);
}

describe('groups: enqueue', () => {
  it('enqueue_job() names an empty or overlong group key, and inserts nothing', async () => {
    for (const key of ["''", "repeat('g', 129)"]) {
      await expect(
        t.db.pool.query(`SELECT ${t.db.s}.enqueue_job('bad-group', '{"task":"t"}', _group_key => ${key})`),
      ).rejects.toMatchObject({ code: '22023', message: expect.stringContaining('_group_key must be 1 to 128 characters') });
    }
    const { rows } = await t.db.pool.query(`SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE queue = 'bad-group'`);
    expect(rows[0].n).toBe(0);
  });

  it('stores the group from enqueue, enqueueMany and enqueue_job(), and flags the queue as grouped', async () => {
    const a = await t.queue.enqueue('t', {}, { queue: 'e1', group: 'tenant-1' });
    const [b, c] = await t.queue.enqueueMany([
      { task: 't', queue: 'e1', group: 'tenant-2' },
      { task: 't', queue: 'e1' },
    ]);
    const keyed = await t.queue.enqueue('t', {}, { queue: 'e1', group: 'tenant-3', jobKey: 'k1' });
    const {
      rows: [sql],
    } = await t.db.pool.query(`SELECT ${t.db.s}.enqueue_job('e1', '{"task":"t"}', _group_key => 'tenant-4')::text AS id`);
    const { rows } = await t.db.pool.query(
      `SELECT id::text, group_key FROM ${t.db.s}.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[a, b, c, keyed, sql.id]],
    );
    expect(rows.map((r) => r.group_key)).toEqual(['tenant-1', 'tenant-2', null, 'tenant-3', 'tenant-4']);
    // Flagged by the first worker to claim one of them, not by the enqueues.
    expect((await listQueueLimits(t.db.pool, t.db.schema)).some((q) => q.name === 'e1')).toBe(false);
    await t.start({ queues: ['e1'], concurrency: 2, tasks: { t: () => {} } });
    await waitFor(
      async () => (await listQueueLimits(t.db.pool, t.db.schema)).find((q) => q.name === 'e1')?.grouped,
      'a worker to flag the queue grouped',
    );
  });

  it("a worker that claimed a queue's first grouped jobs in common order flags it, hands back what it claimed ahead, runs each once", async () => {
    const gate = deferred();
    const handedBack: string[] = [];
    const ran: string[] = [];
    await t.start(
      {
        queues: ['late-grouped'],
        concurrency: 4,
        tasks: {
          w: async (payload: { block?: boolean }, ctx) => {
            ran.push(ctx.job.id);
            if (payload.block) await gate.promise;
          },
        },
      },
      (worker) => worker.on('jobs:handed-back', (jobs) => handedBack.push(...jobs.map((j) => j.id))),
    );
    // Fast runs first, so the worker claims ahead: its next claim asks for more than its 4 slots.
    await t.queue.enqueueMany(Array.from({ length: 20 }, () => ({ task: 'w', queue: 'late-grouped' })));
    await waitFor(() => ran.length === 20, 'the ungrouped jobs to run');
    const big = await t.queue.enqueueMany(
      Array.from({ length: 100 }, () => ({ task: 'w', queue: 'late-grouped', group: 'big', payload: { block: true } })),
    );
    // The 4 slots block on the gate; every other job it took waits in the worker,
    // claimed out of turn, and goes back (at once when the worker starts flagging the
    // queue, else after 0.5 s as overdue: which of the two is tests/fast/grouped-queues.test.ts's).
    await waitFor(() => handedBack.length > 0, 'the jobs claimed ahead to be handed back');
    expect(ran.length).toBe(24);
    // The hand-back goes out as the worker starts flagging the queue, not after: wait for the flag.
    await waitFor(
      async () => (await listQueueLimits(t.db.pool, t.db.schema)).find((q) => q.name === 'late-grouped')?.grouped === true,
      'the queue to be flagged grouped',
    );
    gate.resolve();
    await waitFor(() => ran.length === 120, 'every job to run');
    expect(new Set(ran).size).toBe(120);
    expect(handedBack.every((id) => big.includes(id))).toBe(true);
  });

  it('the leader flags a queue whose grouped jobs wait behind its backlog without groups, once, whatever the backlog', async () => {
    await t.queue.enqueueMany(Array.from({ length: 500 }, () => ({ task: 't', queue: 'lf-backlog' })));
    await t.queue.enqueue('t', {}, { queue: 'lf-backlog', group: 'small' });
    await t.queue.enqueue('t', {}, { queue: 'lf-plain' });
    await t.queue.enqueue('t', {}, { queue: 'lf-delayed', group: 'later', delayMs: 60_000 });
    const task = groupedQueuesTask(t.db.pool, t.db.schema);
    const flagged = await task.run(new AbortController().signal);
    // Only queues with grouped jobs pending (delayed ones too); flagged ones are passed the next time.
    expect(flagged.filter((q) => q.startsWith('lf-')).sort()).toEqual(['lf-backlog', 'lf-delayed']);
    const limits = await listQueueLimits(t.db.pool, t.db.schema);
    expect(limits.find((q) => q.name === 'lf-backlog')?.grouped).toBe(true);
    expect(limits.some((q) => q.name === 'lf-plain')).toBe(false);
    expect((await task.run(new AbortController().signal)).filter((q) => q.startsWith('lf-'))).toEqual([]);
    // Every second; after a pass that failed (no EXECUTE on mark_queue_grouped, say), a minute.
    const interval = task.intervalMs as (flagged: string[] | undefined) => number;
    expect([interval([]), interval(undefined)]).toEqual([1_000, 60_000]);
  });

  it('a small group enqueued behind a backlog without groups runs long before the backlog drains (outside review 115)', async () => {
    // Before, the queue was flagged grouped only when a worker claimed its first
    // grouped job, in common order: after the whole backlog.
    const backlog = await t.queue.enqueueMany(Array.from({ length: 2_000 }, () => ({ task: 'w', queue: 'lf-fair' })));
    const backlogIds = new Set(backlog);
    let backlogRan = 0;
    const small: number[] = [];
    await t.start({
      queues: ['lf-fair'],
      concurrency: 2,
      tasks: {
        w: async (_p: unknown, { job }: { job: JobRow }) => {
          if (!backlogIds.has(job.id)) small.push(backlogRan);
          else backlogRan++;
          await new Promise((r) => setTimeout(r, 10));
        },
      },
    });
    await waitFor(() => backlogRan > 20, 'the backlog to start');
    await t.queue.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ task: 'w', queue: 'lf-fair', group: `small-${i}` })));
    await waitFor(() => small.length === 5, 'the small groups to run', 30_000);
    // A leader pass (every second) and a turn each: far from the 2,000 jobs before them.
    expect(Math.max(...small)).toBeLessThan(1_000);
  });

  it('the first grouped job of a queue, in a transaction left open, holds up no other producer, setting or worker', async () => {
    const tx = await t.db.pool.connect();
    const other = await t.db.pool.connect();
    try {
      await tx.query('BEGIN');
      await t.queue.enqueue('t', {}, { queue: 'open-tx', group: 'tenant-1', tx });
      // Each of these waited for the transaction above to end (until 0021).
      await other.query(`SET lock_timeout = '2s'`);
      await t.queue.enqueue('t', {}, { queue: 'open-tx', group: 'tenant-2', tx: other });
      await other.query(`SELECT ${t.db.s}.enqueue_job('open-tx', '{"task":"t"}', _group_key => 'tenant-3')`);
      await setQueueRateLimit(other, t.db.schema, 'open-tx', { limit: 1000 });
      await setQueueGroups(other, t.db.schema, 'open-tx', { groupConcurrency: 5 });
      await tx.query('COMMIT');
    } finally {
      await tx.query('ROLLBACK').catch(() => {});
      tx.release();
      other.release();
    }
    const { rows } = await t.db.pool.query(`SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE queue = 'open-tx'`);
    expect(rows[0].n).toBe(3);
  });

  it("one group's settings changed in a transaction left open leave the queue's row unlocked (outside review 94)", async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gs-open-tx', { groupConcurrency: 2 });
    const tx = await t.db.pool.connect();
    try {
      await tx.query('BEGIN');
      await setGroupSettings(tx, t.db.schema, 'gs-open-tx', 'g0', { weight: 2 });
      // A claim of a queue with a queue-wide limit locks this row: it waited for the transaction.
      const { rows } = await t.db.pool.query(`SELECT name FROM ${t.db.s}.queues WHERE name = 'gs-open-tx' FOR UPDATE NOWAIT`);
      expect(rows).toEqual([{ name: 'gs-open-tx' }]);
      await tx.query('COMMIT');
    } finally {
      await tx.query('ROLLBACK').catch(() => {});
      tx.release();
    }
    expect(await listGroupSettings(t.db.pool, t.db.schema, 'gs-open-tx')).toEqual([
      expect.objectContaining({ group: 'g0', weight: 2 }),
    ]);
  });

  it('a queue without grouped jobs stays ungrouped and is claimed by the common cycle', async () => {
    await t.queue.enqueue('t', {}, { queue: 'plain-only' });
    expect((await listQueueLimits(t.db.pool, t.db.schema)).some((q) => q.name === 'plain-only')).toBe(false);
  });

  it('rejects a bad group with a ValidationError before anything is inserted', async () => {
    for (const group of ['', 'x'.repeat(129), 42, 'a\u0000b']) {
      await expect(t.queue.enqueue('t', {}, { queue: 'bad', group: group as string })).rejects.toBeInstanceOf(ValidationError);
      await expect(t.queue.enqueueMany([{ task: 't', queue: 'bad', group: group as string }])).rejects.toBeInstanceOf(
        ValidationError,
      );
    }
    const { rows } = await t.db.pool.query(`SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE queue = 'bad'`);
    expect(rows[0].n).toBe(0);
  });

  it('takes group: null as no group, like leaving it out', async () => {
    const one = await t.queue.enqueue('t', {}, { queue: 'nullgroup', group: null });
    const [two] = await t.queue.enqueueMany([{ task: 't', queue: 'nullgroup', group: null }]);
    const { rows } = await t.db.pool.query(`SELECT group_key FROM ${t.db.s}.jobs WHERE id = ANY($1::bigint[])`, [[one, two]]);
    expect(rows).toEqual([{ group_key: null }, { group_key: null }]);
  });
});

describe('groups: fair claims', () => {
  it('takes jobs round-robin across groups: a big backlog gets one turn like every small group', async () => {
    await t.queue.enqueueMany(Array.from({ length: 500 }, () => ({ task: 't', queue: 'fair', group: 'big' })));
    await t.queue.enqueueMany(
      ['s1', 's2', 's3', 's4'].flatMap((g) => Array.from({ length: 2 }, () => ({ task: 't', queue: 'fair', group: g }))),
    );
    const first = await claim('fair', 5);
    expect(groupsOf(first.jobs).sort()).toEqual(['big', 's1', 's2', 's3', 's4']);
    const second = await claim('fair', 5);
    expect(groupsOf(second.jobs).sort()).toEqual(['big', 's1', 's2', 's3', 's4']);
    // Only the big group is left: later rounds of one claim give it the whole batch.
    const third = await claim('fair', 20);
    expect(groupsOf(third.jobs)).toEqual(Array.from({ length: 20 }, () => 'big'));
  });

  it('continues from where the last claim stopped, wrapping around, jobs without a group as one more group', async () => {
    await t.queue.enqueueMany(
      ['a', 'b', 'c', null].flatMap((g) =>
        Array.from({ length: 4 }, () => ({ task: 't', queue: 'cursor', ...(g === null ? {} : { group: g }) })),
      ),
    );
    const seen: (string | null)[] = [];
    for (let i = 0; i < 6; i++) seen.push(...groupsOf((await claim('cursor', 1)).jobs));
    expect(seen).toEqual([null, 'a', 'b', 'c', null, 'a']);
  });

  it('orders jobs inside a group by priority, then run_at', async () => {
    const [low, high] = await t.queue.enqueueMany([
      { task: 't', queue: 'prio', group: 'g', priority: 0 },
      { task: 't', queue: 'prio', group: 'g', priority: 5 },
    ]);
    expect((await claim('prio', 1)).jobs.map((j) => j.id)).toEqual([high]);
    expect((await claim('prio', 1)).jobs.map((j) => j.id)).toEqual([low]);
  });

  it('gives a group `weight` jobs per turn', async () => {
    await t.queue.enqueueMany(
      ['heavy', 'light1', 'light2'].flatMap((g) => Array.from({ length: 10 }, () => ({ task: 't', queue: 'weights', group: g }))),
    );
    await setGroupSettings(t.db.pool, t.db.schema, 'weights', 'heavy', { weight: 3 });
    const { jobs } = await claim('weights', 5);
    const count = (g: string) => groupsOf(jobs).filter((x) => x === g).length;
    expect([count('heavy'), count('light1'), count('light2')]).toEqual([3, 1, 1]);
  });

  it("keeps a group's weight across claims of one job: the rest of its turn begins the next claim (0022)", async () => {
    await t.queue.enqueueMany(
      ['heavy', 'light1', 'light2'].flatMap((g) => Array.from({ length: 10 }, () => ({ task: 't', queue: 'wturns', group: g }))),
    );
    await setGroupSettings(t.db.pool, t.db.schema, 'wturns', 'heavy', { weight: 3 });
    const order: (string | null)[] = [];
    for (let i = 0; i < 10; i++) order.push(...groupsOf((await claim('wturns', 1)).jobs));
    expect(order).toEqual(['heavy', 'heavy', 'heavy', 'light1', 'light2', 'heavy', 'heavy', 'heavy', 'light1', 'light2']);
    // A claim of two takes the rest of a turn and goes on to the next group.
    expect(groupsOf((await claim('wturns', 1)).jobs)).toEqual(['heavy']);
    expect(groupsOf((await claim('wturns', 3)).jobs)).toEqual(['heavy', 'heavy', 'light1']);
  });

  it('shares the later rounds of a big claim by weight too (0022)', async () => {
    await t.queue.enqueueMany(
      ['heavy', 'light1', 'light2'].flatMap((g) => Array.from({ length: 20 }, () => ({ task: 't', queue: 'wrounds', group: g }))),
    );
    await setGroupSettings(t.db.pool, t.db.schema, 'wrounds', 'heavy', { weight: 3 });
    const { jobs } = await claim('wrounds', 20);
    const count = (g: string) => groupsOf(jobs).filter((x) => x === g).length;
    // Round 1: 3 + 1 + 1; the 15 left are shared 3 : 1 : 1 (0016 shared them evenly: 8 : 6 : 6).
    expect([count('heavy'), count('light1'), count('light2')]).toEqual([12, 4, 4]);
  });

  it('ends a turn when the weight is lowered to what the group has had of it already', async () => {
    await t.queue.enqueueMany(
      ['heavy', 'light'].flatMap((g) => Array.from({ length: 5 }, () => ({ task: 't', queue: 'wlower', group: g }))),
    );
    await setGroupSettings(t.db.pool, t.db.schema, 'wlower', 'heavy', { weight: 3 });
    expect(groupsOf((await claim('wlower', 1)).jobs)).toEqual(['heavy']);
    expect(groupsOf((await claim('wlower', 1)).jobs)).toEqual(['heavy']);
    await setGroupSettings(t.db.pool, t.db.schema, 'wlower', 'heavy', { weight: 2 });
    expect(groupsOf((await claim('wlower', 1)).jobs)).toEqual(['light']);
    expect(groupsOf((await claim('wlower', 2)).jobs)).toEqual(['heavy', 'heavy']);
  });

  /** `n` groups named `${prefix}0000`... in `queue`, each with only a job due in an hour. */
  async function delayedGroups(queue: string, prefix: string, n: number): Promise<void> {
    for (let from = 0; from < n; from += 1_000) {
      await t.queue.enqueueMany(
        Array.from({ length: Math.min(1_000, n - from) }, (_, i) => ({
          task: 't',
          queue,
          group: `${prefix}${String(from + i).padStart(4, '0')}`,
          delayMs: 3_600_000,
        })),
      );
    }
  }

  it('an empty-handed claim passes up to 1,024 groups with nothing due, and leaves the rest to the next claim (0028)', async () => {
    // Before 0028 a claim visited at most 32 groups and its worker then waited for
    // its next poll: a due job behind 1,000 such groups waited 44-54 s (review 68).
    await delayedGroups('future', 'f', 200);
    await t.queue.enqueue('t', {}, { queue: 'future', group: 'zz-due' });
    expect(groupsOf((await claim('future', 1)).jobs)).toEqual(['zz-due']);

    await delayedGroups('far', 'f', 1_100);
    await t.queue.enqueue('t', {}, { queue: 'far', group: 'zz-due' });
    // One scan of all of them is never made: the bound holds.
    const first = await claim('far', 1);
    expect(first.jobs).toEqual([]);
    expect(groupsOf((await claim('far', 1)).jobs)).toEqual(['zz-due']);
  });

  it('a claim that holds jobs already visits at most max(32, 4 x its batch) groups (0028)', async () => {
    await t.queue.enqueue('t', {}, { queue: 'bounded', group: 'a-due' });
    await delayedGroups('bounded', 'm', 100);
    await t.queue.enqueue('t', {}, { queue: 'bounded', group: 'zz-due' });
    expect(groupsOf((await claim('bounded', 2)).jobs)).toEqual(['a-due']);
    expect(groupsOf((await claim('bounded', 2)).jobs)).toEqual(['zz-due']);
  });

  it('a worker drains the small groups while the big backlog waits its turns', async () => {
    await t.queue.enqueueMany(Array.from({ length: 400 }, () => ({ task: 'w', queue: 'drain', group: 'big' })));
    await t.queue.enqueueMany(
      Array.from({ length: 10 }, (_, g) =>
        Array.from({ length: 3 }, () => ({ task: 'w', queue: 'drain', group: `small${g}` })),
      ).flat(),
    );
    await t.start({
      queues: ['drain'],
      concurrency: 4,
      tasks: { w: () => new Promise((resolve) => setTimeout(resolve, 5)) },
    });
    await waitFor(async () => {
      const { rows } = await t.db.pool.query(
        `SELECT count(*)::int AS n FROM ${t.db.s}.jobs WHERE queue = 'drain' AND group_key <> 'big' AND status = 'completed'`,
      );
      return rows[0].n === 30;
    }, 'the small groups to finish');
    // Counted by when the results were written, not when this test saw them: the
    // worker claims ahead and drains fast, so many more big jobs may finish while
    // waitFor polls.
    const { rows } = await t.db.pool.query(
      `SELECT count(*)::int AS n FROM ${t.db.s}.jobs
       WHERE queue = 'drain' AND group_key = 'big' AND status = 'completed'
         AND finished_at < (SELECT max(finished_at) FROM ${t.db.s}.jobs WHERE queue = 'drain' AND group_key <> 'big')`,
    );
    // FIFO would have run all 400 first. Round robin: about one big job per small one.
    expect(rows[0].n).toBeLessThan(100);
  });
});

describe('groups: limits', () => {
  it('holds a group concurrency limit exactly under claimers racing on separate connections', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'glimit', { groupConcurrency: 2 });
    await setGroupSettings(t.db.pool, t.db.schema, 'glimit', 'g0', { concurrencyLimit: 3 });
    const clients = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const c = new pg.Client({ connectionString: t.db.url });
        await c.connect();
        return c;
      }),
    );
    try {
      for (let round = 0; round < 8; round++) {
        await t.queue.enqueueMany(
          Array.from({ length: 5 }, (_, g) =>
            Array.from({ length: 6 }, () => ({ task: 't', queue: 'glimit', group: `g${g}` })),
          ).flat(),
        );
        await Promise.all(clients.map((c, i) => claim('glimit', 4, `racer${i}`, c)));
        const running = async () =>
          (
            await t.db.pool.query<{ group_key: string; n: number }>(
              `SELECT group_key, count(*)::int AS n FROM ${t.db.s}.jobs WHERE queue = 'glimit' AND status = 'processing'
               GROUP BY group_key ORDER BY group_key`,
            )
          ).rows;
        // Racing claimers skip a group another one is in, so some slots may stay
        // free for this round, but no group is ever over its limit ...
        for (const { group_key: g, n } of await running()) expect(n).toBeLessThanOrEqual(g === 'g0' ? 3 : 2);
        // ... and the next claim fills every group exactly to it.
        await claim('glimit', 20);
        expect(await running()).toEqual([
          { group_key: 'g0', n: 3 },
          ...['g1', 'g2', 'g3', 'g4'].map((g) => ({ group_key: g, n: 2 })),
        ]);
        await finish('glimit');
      }
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('does not count as running the jobs the claimer says it finished, while they are still its own (0022)', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gdone', { groupConcurrency: 2 });
    await t.queue.enqueueMany(Array.from({ length: 6 }, () => ({ task: 't', queue: 'gdone', group: 'g' })));
    const running = (await claim('gdone', 5, 'w1')).jobs.map((j) => j.id!);
    expect(running).toHaveLength(2);
    // Still 'processing' (the result is being written beside the claim): at the limit for anyone else ...
    expect((await claim('gdone', 5, 'w2', t.db.pool, 5, [running[0]!])).jobs).toHaveLength(0);
    // ... but not for the worker whose handler ended.
    const refill = (await claim('gdone', 5, 'w1', t.db.pool, 5, [running[0]!])).jobs;
    expect(refill).toHaveLength(1);
    expect((await claim('gdone', 5, 'w1', t.db.pool, 5, [running[0]!])).jobs).toHaveLength(0);
    // A job taken from the worker (rescued and claimed elsewhere) counts again for its new holder.
    await t.db.pool.query(`UPDATE ${t.db.s}.jobs SET locked_by = 'w3' WHERE id = $1`, [running[1]]);
    expect((await claim('gdone', 5, 'w1', t.db.pool, 5, [running[0]!, running[1]!])).jobs).toHaveLength(0);
  });

  it('counts a job it says finished once it takes that job again itself (a retry whose write committed first)', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gagain', { groupConcurrency: 1 });
    await t.queue.enqueueMany(Array.from({ length: 4 }, () => ({ task: 't', queue: 'gagain', group: 'g' })));
    const [first] = (await claim('gagain', 5, 'w1')).jobs.map((j) => j.id!);
    // Its failure was written (back to pending, due now) before the claim that was told it finished ran.
    await t.db.pool.query(`UPDATE ${t.db.s}.jobs SET status = 'pending', locked_at = NULL, locked_by = NULL WHERE id = $1`, [
      first,
    ]);
    // One group with room for one: the claim takes the retried job, and a second
    // round must count it as running (outside review: 2 ran under a limit of 1).
    const again = (await claim('gagain', 5, 'w1', t.db.pool, 5, [first!])).jobs.map((j) => j.id);
    expect(again).toEqual([first]);
  });

  it('does not count finished jobs under a queue-wide limit either, grouped or not (claim_limited)', async () => {
    for (const queue of ['qdone-grouped', 'qdone-plain']) {
      await t.queue.setQueueConcurrency(queue, 1);
      await t.queue.enqueueMany(
        Array.from({ length: 3 }, (_, i) => ({ task: 't', queue, group: queue.endsWith('grouped') ? `g${i}` : undefined })),
      );
      const [first] = (await claim(queue, 3, 'w1')).jobs.map((j) => j.id!);
      expect(first).toBeDefined();
      expect((await claim(queue, 3, 'w1')).jobs).toHaveLength(0);
      expect((await claim(queue, 3, 'w1', t.db.pool, 3, [first!])).jobs).toHaveLength(1);
    }
  });

  it('passes groups full at their own limit or the default, and fills a group whose own limit is above the default', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gfull', { groupConcurrency: 1 });
    await setGroupSettings(t.db.pool, t.db.schema, 'gfull', 'wide', { concurrencyLimit: 3 });
    await t.queue.enqueueMany(
      ['a', 'wide', 'b'].flatMap((g) => Array.from({ length: 4 }, () => ({ task: 't', queue: 'gfull', group: g }))),
    );
    // One at a time, as a worker claims freed slots: a then wide, b, wide, wide.
    const taken: (string | null)[] = [];
    for (let i = 0; i < 6; i++) taken.push(...groupsOf((await claim('gfull', 1, 'w1', t.db.pool, 1)).jobs));
    expect(taken.sort()).toEqual(['a', 'b', 'wide', 'wide', 'wide']);
    // Everyone full: nothing, and no group over its limit, from another worker too.
    expect((await claim('gfull', 5, 'w2')).jobs).toHaveLength(0);
    // A limit of its own only (the default removed): the others are free again, 'wide' stays full.
    await setQueueGroups(t.db.pool, t.db.schema, 'gfull', { groupConcurrency: null });
    expect(groupsOf((await claim('gfull', 10, 'w2')).jobs).filter((g) => g === 'wide')).toEqual([]);
  });

  /** `n` groups of `queue` with one job running (as another worker's) and one pending each. */
  async function fullGroups(queue: string, prefix: string, n: number): Promise<void> {
    await t.queue.enqueueMany(
      Array.from({ length: 2 * n }, (_, i) => ({
        task: 't',
        queue,
        group: `${prefix}${String(i % n).padStart(4, '0')}`,
      })),
    );
    await t.db.pool.query(
      `UPDATE ${t.db.s}.jobs SET status = 'processing', locked_by = 'other', locked_at = now(), attempts = 1
       WHERE id IN (SELECT min(id) FROM ${t.db.s}.jobs WHERE queue = $1 GROUP BY group_key)`,
      [queue],
    );
  }

  it('passes any number of groups at their limit, each a visit of the bound, and wraps around to an open group', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'walk', { groupConcurrency: 1 });
    await fullGroups('walk', 'f', 1_100);
    await t.queue.enqueue('t', {}, { queue: 'walk', group: 'zz-open' });
    // 1,100 full groups before the open one: the first claim stops at the bound of
    // 1,024 visits with nothing, the next goes on from there.
    expect((await claim('walk', 1, 'w1', t.db.pool, 1)).jobs).toEqual([]);
    const { rows } = await t.db.pool.query<{ group_cursor: string }>(
      `SELECT group_cursor FROM ${t.db.s}.queues WHERE name = 'walk'`,
    );
    expect(rows[0]!.group_cursor).toBe('f1023');
    expect(groupsOf((await claim('walk', 1, 'w1', t.db.pool, 1)).jobs)).toEqual(['zz-open']);
    // Every group full now: nothing, at once.
    await t.queue.enqueue('t', {}, { queue: 'walk', group: 'zz-open' });
    expect((await claim('walk', 1, 'w1', t.db.pool, 1)).jobs).toEqual([]);

    // An open group before the cursor: found past the end, wrapping around.
    await setQueueGroups(t.db.pool, t.db.schema, 'wrap', { groupConcurrency: 1 });
    await fullGroups('wrap', 'm', 30);
    await t.queue.enqueue('t', {}, { queue: 'wrap', group: 'a-open' });
    await t.db.pool.query(`UPDATE ${t.db.s}.queues SET group_cursor = 'm0010' WHERE name = 'wrap'`);
    expect(groupsOf((await claim('wrap', 1, 'w1', t.db.pool, 1)).jobs)).toEqual(['a-open']);
    // A group freed among the full ones is found from anywhere.
    await t.db.pool.query(
      `UPDATE ${t.db.s}.jobs SET status = 'completed', finished_at = now()
       WHERE queue = 'wrap' AND group_key = 'm0005' AND status = 'processing'`,
    );
    expect(groupsOf((await claim('wrap', 1, 'w1', t.db.pool, 1)).jobs)).toEqual(['m0005']);
    expect((await claim('wrap', 1, 'w1', t.db.pool, 1)).jobs).toEqual([]);
  });

  it('keeps the queue-wide concurrency limit on a grouped queue', async () => {
    await t.queue.setQueueConcurrency('gglobal', 3);
    await t.queue.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ task: 't', queue: 'gglobal', group: `g${i}` })));
    expect((await claim('gglobal', 10)).jobs).toHaveLength(3);
    expect((await claim('gglobal', 10)).jobs).toHaveLength(0);
  });

  it.each([
    ['a group limit', 'starved-group', () => setQueueGroups(t.db.pool, t.db.schema, 'starved-group', { groupConcurrency: 2 })],
    ['a queue limit', 'starved-queue', () => t.queue.setQueueConcurrency('starved-queue', 3)],
    ['a rate limit', 'starved-rate', () => setQueueRateLimit(t.db.pool, t.db.schema, 'starved-rate', { limit: 50, burst: 2 })],
  ] as const)(
    'a queue under %s beside a busy plain queue in one worker gets slots while the plain backlog waits (outside review 128)',
    async (_limit, queue, limit) => {
      await limit();
      const plain = `${queue}-plain`;
      await t.queue.enqueueMany(Array.from({ length: 1_500 }, () => ({ task: 'w', queue: plain })));
      await t.queue.enqueueMany(
        Array.from({ length: 12 }, (_, i) => ({
          task: 'w',
          queue,
          ...(queue === 'starved-group' ? { group: `g${i % 2}` } : {}),
        })),
      );
      let plainStarted = 0;
      const limitedStartedAfter: number[] = [];
      const worker = await t.start({
        queues: [queue, plain],
        concurrency: 6,
        tasks: {
          w: async (_p: unknown, { job }: { job: JobRow }) => {
            if (job.queue === queue) limitedStartedAfter.push(plainStarted);
            else plainStarted++;
            await new Promise((r) => setTimeout(r, 5));
          },
        },
      });
      await waitFor(() => limitedStartedAfter.length === 12, `the ${queue} jobs to run`, 60_000);
      await worker.stop();
      // Before, the plain jobs claimed ahead took every slot that freed: the limited
      // queue ran a few jobs, then none until the plain backlog was gone.
      expect(Math.max(...limitedStartedAfter)).toBeLessThan(750);
    },
  );

  // Outside review 133: an empty limited queue cost short plain jobs most of their
  // rate, so plain queues are served as if alone while the limited ones are quiet;
  // a notification for a limited queue (or its due time) must end that at once.
  it.each([
    ['due now', 0],
    ['due in a second', 1_000],
  ])(
    'a limited queue left empty while a plain backlog drains is served again once a job is enqueued there (%s)',
    async (_when, delayMs) => {
      const limited = `quiet-limited-${delayMs}`;
      const plain = `quiet-plain-${delayMs}`;
      await t.queue.setQueueConcurrency(limited, 1);
      await t.queue.enqueueMany(Array.from({ length: 4_000 }, () => ({ task: 'w', queue: plain })));
      let plainStarted = 0;
      const limitedStartedAfter: number[] = [];
      const worker = await t.start({
        queues: [limited, plain],
        concurrency: 6,
        // No poll tick to end the quiet: only the notification or the due time may.
        pollIntervalMs: 3_600_000,
        tasks: {
          w: async (_p: unknown, { job }: { job: JobRow }) => {
            if (job.queue === limited) limitedStartedAfter.push(plainStarted);
            else plainStarted++;
            await new Promise((r) => setTimeout(r, 5));
          },
        },
      });
      await waitFor(() => plainStarted >= 300, 'the plain backlog to drain a while', 60_000);
      const runAt = new Date(Date.now() + delayMs);
      await t.queue.enqueueMany(Array.from({ length: 4 }, () => ({ task: 'w', queue: limited, runAt })));
      await new Promise((r) => setTimeout(r, Math.max(0, runAt.getTime() - Date.now())));
      const dueAfter = plainStarted; // plain starts before the limited jobs fell due
      await waitFor(
        () => limitedStartedAfter.length === 4 || plainStarted === 4_000,
        'the limited jobs, or the plain backlog, to run',
        60_000,
      );
      await worker.stop();
      expect(limitedStartedAfter).toHaveLength(4);
      expect(Math.max(...limitedStartedAfter) - dueAfter).toBeLessThan(300);
    },
  );

  it('a limited queue beside long plain jobs, whose slots free one at a time, gets every other one (outside review 132)', async () => {
    await t.queue.setQueueConcurrency('odd-limited', 1);
    await t.queue.enqueueMany(Array.from({ length: 200 }, () => ({ task: 'w', queue: 'odd-plain' })));
    await t.queue.enqueueMany(Array.from({ length: 6 }, () => ({ task: 'w', queue: 'odd-limited' })));
    let plainStarted = 0;
    const limitedStartedAfter: number[] = [];
    const worker = await t.start({
      queues: ['odd-limited', 'odd-plain'],
      concurrency: 3,
      tasks: {
        w: async (_p: unknown, { job }: { job: JobRow }) => {
          if (job.queue === 'odd-limited') limitedStartedAfter.push(plainStarted);
          else plainStarted++;
          await new Promise((r) => setTimeout(r, job.queue === 'odd-limited' ? 5 : 100));
        },
      },
    });
    await waitFor(
      () => limitedStartedAfter.length === 6 || plainStarted === 200,
      'the limited jobs, or the plain backlog, to run',
      60_000,
    );
    await worker.stop();
    // Before, half of one free slot rounded down kept none for the limited queue: it
    // started only when two plain jobs ended together.
    expect(limitedStartedAfter).toHaveLength(6);
    expect(Math.max(...limitedStartedAfter)).toBeLessThan(60);
  });

  it('a rate-limited queue starts at most its burst at once and says when the next token is due', async () => {
    await setQueueRateLimit(t.db.pool, t.db.schema, 'rated', { limit: 2, intervalMs: 60_000, burst: 3 });
    await t.queue.enqueueMany(Array.from({ length: 10 }, () => ({ task: 't', queue: 'rated' })));
    const before = Date.now();
    const first = await claim('rated', 10);
    expect(first.jobs).toHaveLength(3);
    const second = await claim('rated', 10);
    expect(second.jobs).toHaveLength(0);
    // The next token comes 30 s (60 s / 2) after the bucket ran dry.
    expect(second.waitUntil!.getTime()).toBeGreaterThan(before + 25_000);
    expect(second.waitUntil!.getTime()).toBeLessThan(Date.now() + 31_000);
    // No group limit holds them: the queue's does (outside review 193: "0 throttled" said nothing of it).
    expect(await getGroupStats(t.db.pool, t.db.schema, 'rated')).toMatchObject({ due: 7, throttled: 0, queueThrottled: true });
  });

  it('a rate-limited queue with fewer due jobs than tokens sets no timer: an idle worker does not claim it every token (0028)', async () => {
    // Review 71: a worker with more free slots than the burst was told to come back
    // at the next token whatever the backlog, and claimed an empty queue for ever.
    await setQueueRateLimit(t.db.pool, t.db.schema, 'rated-idle', { limit: 1, intervalMs: 60_000, burst: 5 });
    expect(await claim('rated-idle', 10)).toEqual({ jobs: [], waitUntil: null });
    await t.queue.enqueueMany([
      { task: 't', queue: 'rated-idle' },
      { task: 't', queue: 'rated-idle' },
    ]);
    const some = await claim('rated-idle', 10);
    expect(some.jobs).toHaveLength(2);
    expect(some.waitUntil).toBeNull();
    // Three tokens left, four jobs due: all three spent, and a timer for the fourth.
    await t.queue.enqueueMany(Array.from({ length: 4 }, () => ({ task: 't', queue: 'rated-idle' })));
    const capped = await claim('rated-idle', 10);
    expect(capped.jobs).toHaveLength(3);
    expect(capped.waitUntil).not.toBeNull();
  });

  it("an idle worker backs off while a transaction holds its limited queue's row, and claims once it ends (review 72)", async () => {
    await setQueueRateLimit(t.db.pool, t.db.schema, 'rated-held', { limit: 20, intervalMs: 1_000, burst: 5 });
    const ran: string[] = [];
    const worker = await t.start({
      queues: ['rated-held'],
      concurrency: 10,
      pollIntervalMs: 3_600_000,
      tasks: { t: async (_p: unknown, { job }: { job: { id: string } }) => void ran.push(job.id) },
    });
    const admin = await t.db.pool.connect();
    try {
      // An admin's transaction that changed the queue's settings and is still open.
      await admin.query('BEGIN');
      await t.queue.setQueueConcurrency('rated-held', 50, { tx: admin });
      const before = worker.stats.claims;
      const id = await t.queue.enqueue('t', {}, { queue: 'rated-held' }); // wakes the worker
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      // Told "come back in 5 ms" each time, it came back every 5-7 ms: some 200 claims here.
      expect(worker.stats.claims - before).toBeLessThan(30);
      await admin.query('COMMIT');
      await waitFor(() => ran.includes(id), 'the job to run once the transaction ended');
    } finally {
      await admin.query('ROLLBACK').catch(() => {});
      admin.release();
    }
  });

  it('passes a new group whose settings row an open transaction is writing, instead of waiting for it (0028, review 73)', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gr-new', { groupRateLimit: { limit: 100 } });
    await t.queue.enqueue('t', {}, { queue: 'gr-new', group: 'acme' });
    await t.queue.enqueue('t', {}, { queue: 'gr-new', group: 'other' });
    const admin = await t.db.pool.connect();
    try {
      await admin.query('BEGIN');
      await setGroupSettings(admin, t.db.schema, 'gr-new', 'acme', { weight: 2 });
      // Before: the claim waited on the admin's uncommitted row until it committed.
      const answer = await Promise.race([
        claim('gr-new', 2),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 10_000).unref()),
      ]);
      expect(answer).not.toBe('waited');
      const held = answer as Awaited<ReturnType<typeof claim>>;
      expect(groupsOf(held.jobs)).toEqual(['other']);
      expect(held.waitUntil).not.toBeNull(); // come back for acme in a moment
      await admin.query('COMMIT');
      expect(groupsOf((await claim('gr-new', 2)).jobs)).toEqual(['acme']);
    } finally {
      await admin.query('ROLLBACK').catch(() => {});
      admin.release();
    }
  });

  it('rate-limits each group on its own', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'grated', { groupRateLimit: { limit: 1, intervalMs: 60_000, burst: 2 } });
    await setGroupSettings(t.db.pool, t.db.schema, 'grated', 'vip', { rateLimit: { limit: 10, intervalMs: 60_000, burst: 4 } });
    await t.queue.enqueueMany(
      ['a', 'b', 'vip'].flatMap((g) => Array.from({ length: 6 }, () => ({ task: 't', queue: 'grated', group: g }))),
    );
    const claimed: (string | null)[] = [];
    for (let i = 0; i < 4; i++) claimed.push(...groupsOf((await claim('grated', 10)).jobs));
    const count = (g: string) => claimed.filter((x) => x === g).length;
    expect([count('a'), count('b'), count('vip')]).toEqual([2, 2, 4]);
    const stats = await getGroupStats(t.db.pool, t.db.schema, 'grated');
    expect(stats).toMatchObject({ groups: 3, due: 10, running: 8, throttled: 3, queueThrottled: false });
  });

  it('the pruner deletes the job_groups rows that hold only a full token bucket, and keeps the rest', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'buckets', { groupRateLimit: { limit: 1000, intervalMs: 1000, burst: 1 } });
    await setGroupSettings(t.db.pool, t.db.schema, 'buckets', 'own', { weight: 2 });
    await t.queue.enqueueMany(['a', 'b', 'own'].map((group) => ({ task: 't', queue: 'buckets', group })));
    expect((await claim('buckets', 10)).jobs).toHaveLength(3);
    // One more group whose bucket stays empty for a day: its row must stay.
    await setQueueGroups(t.db.pool, t.db.schema, 'slow-buckets', {
      groupRateLimit: { limit: 1, intervalMs: 86_400_000, burst: 1 },
    });
    await t.queue.enqueue('t', {}, { queue: 'slow-buckets', group: 'spent' });
    expect((await claim('slow-buckets', 10)).jobs).toHaveLength(1);
    const rowsOf = async () =>
      (
        await t.db.pool.query(
          `SELECT queue || '/' || group_key AS k FROM ${t.db.s}.job_groups WHERE queue IN ('buckets', 'slow-buckets') ORDER BY 1`,
        )
      ).rows.map((r) => r.k as string);
    expect(await rowsOf()).toEqual(['buckets/a', 'buckets/b', 'buckets/own', 'slow-buckets/spent']);
    // 1 token per ms, burst 1: full again 1 ms later.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const result = await prune(t.db.pool, maintenanceStatements(t.db.schema), resolvePrunerConfig({}));
    expect(result.groupBuckets).toBeGreaterThanOrEqual(2);
    expect(await rowsOf()).toEqual(['buckets/own', 'slow-buckets/spent']);
  });

  it('a paused grouped queue claims nothing', async () => {
    await t.queue.enqueue('t', {}, { queue: 'gpaused', group: 'g' });
    await t.queue.pauseQueue('gpaused');
    expect((await claim('gpaused', 5)).jobs).toHaveLength(0);
    await t.queue.resumeQueue('gpaused');
    expect((await claim('gpaused', 5)).jobs).toHaveLength(1);
  });
});

/** Which of the jobs started at the claim (started_at set) and which were claimed ahead, in claim order. */
async function startedOf(jobs: Claimed[]): Promise<[string | null, boolean][]> {
  const { rows } = await t.db.pool.query<{ group_key: string | null; started: boolean }>(
    `SELECT j.group_key, j.started_at IS NOT NULL AS started
     FROM unnest($1::bigint[]) WITH ORDINALITY AS c(id, n) JOIN ${t.db.s}.jobs j ON j.id = c.id ORDER BY c.n`,
    [jobs.map((j) => j.id)],
  );
  return rows.map((r) => [r.group_key, r.started]);
}

describe('groups: claiming ahead (0019)', () => {
  it('reads the jobs table through its indexes only, however small the table looks to the planner (0029)', async () => {
    // A schema of its own: no other session reads its jobs table, so its scan
    // counter moves only with the claims below. Before 0029 a generic plan scanned
    // a table the planner took for small: the UPDATE of each group's claimed rows
    // (~1 ms per group at 2,700 jobs) and the look for jobs without a group.
    const db = await createTestSchema('claimscan');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await db.pool.query(
        `INSERT INTO ${db.s}.queues (name, grouped, group_concurrency) VALUES ('q', true, 2);
         INSERT INTO ${db.s}.jobs (queue, task, group_key) SELECT 'q', 't', 'g' || (i % 20) FROM generate_series(1, 2000) i`,
      );
      const seqScans = async () => {
        // This session's counts are flushed when it goes idle after this call.
        await client.query('SELECT pg_stat_force_next_flush()');
        const { rows } = await client.query<{ n: string }>(
          `SELECT pg_stat_clear_snapshot(), (SELECT seq_scan FROM pg_stat_user_tables WHERE relid = '${db.s}.jobs'::regclass) AS n`,
        );
        return Number(rows[0]!.n);
      };
      const before = await seqScans();
      let claimed = 0;
      for (let i = 0; i < 5; i++) {
        const { rows } = await client.query(
          `SELECT count(*)::int AS n FROM ${db.s}.claim_queue('q', 'w', '{t}', 3, 32, 3, '{}') c WHERE (c.job).id IS NOT NULL`,
        );
        claimed += (rows[0] as { n: number }).n;
      }
      expect(claimed).toBe(15);
      expect(await seqScans()).toBe(before);
    } finally {
      await client.end();
      await db.drop();
    }
  });

  it('claims a grouped queue without limits ahead: the first startNow start, the rest wait in the worker', async () => {
    await t.queue.enqueueMany(
      ['a', 'b'].flatMap((g) => Array.from({ length: 5 }, () => ({ task: 't', queue: 'ahead', group: g }))),
    );
    const { jobs } = await claim('ahead', 6, 'claimer', t.db.pool, 2);
    expect(jobs).toHaveLength(6);
    const started = await startedOf(jobs);
    expect(started.filter(([, s]) => s)).toHaveLength(2);
    expect(started.filter(([, s]) => !s)).toHaveLength(4);
  });

  it('claims nothing ahead under a group default, a queue concurrency limit or a rate limit', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'ahead-glimit', { groupConcurrency: 5 });
    await t.queue.setQueueConcurrency('ahead-qlimit', 5);
    await setQueueRateLimit(t.db.pool, t.db.schema, 'ahead-rate', { limit: 100, intervalMs: 1000, burst: 50 });
    for (const queue of ['ahead-glimit', 'ahead-qlimit', 'ahead-rate']) {
      await t.queue.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ task: 't', queue, group: `g${i % 2}` })));
      const { jobs } = await claim(queue, 6, 'claimer', t.db.pool, 2);
      expect(await startedOf(jobs), queue).toEqual([
        [expect.any(String), true],
        [expect.any(String), true],
      ]);
    }
  });

  it('gives a group with a limit of its own only jobs that start now, and begins the next claim with it when out of starts', async () => {
    await t.queue.enqueueMany(
      ['a', 'b', 'c'].flatMap((g) => Array.from({ length: 5 }, () => ({ task: 't', queue: 'ahead-mixed', group: g }))),
    );
    await setGroupSettings(t.db.pool, t.db.schema, 'ahead-mixed', 'b', { concurrencyLimit: 3 });
    // One start: 'a' takes it, and the claim ends before 'b' rather than pass it by.
    expect(await startedOf((await claim('ahead-mixed', 6, 'claimer', t.db.pool, 1)).jobs)).toEqual([['a', true]]);
    // The next claim begins with 'b', which takes the start; 'c' and 'a' are claimed ahead.
    expect(await startedOf((await claim('ahead-mixed', 6, 'claimer', t.db.pool, 1)).jobs)).toEqual([
      ['b', true],
      ['c', false],
      ['a', false],
    ]);
  });

  it('says to come back in a moment when a limited group was held by another claimer', async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'ahead-busy', { groupConcurrency: 2 });
    await t.queue.enqueueMany(Array.from({ length: 3 }, () => ({ task: 't', queue: 'ahead-busy', group: 'g' })));
    const holder = new pg.Client({ connectionString: t.db.url });
    await holder.connect();
    try {
      // The key of a claim of the same names in another schema (0016-0024: the queue
      // and group alone) no longer holds this schema's group (0028, review 72).
      await holder.query(`SELECT pg_advisory_lock(hashtext('ahead-busy'), hashtext('g'))`);
      const other = await claim('ahead-busy', 1);
      expect(other.jobs).toHaveLength(1);
      expect(other.waitUntil).toBeNull();
      await finish('ahead-busy');
      await t.queue.enqueueMany(Array.from({ length: 3 }, () => ({ task: 't', queue: 'ahead-busy', group: 'g' })));
      // The lock claim_queue() takes for the group: the queue's name with this schema's queues table, and the group.
      const key = `hashtext('ahead-busy') # (SELECT tableoid::integer FROM ${t.db.s}.queues WHERE name = 'ahead-busy')`;
      await holder.query(`SELECT pg_advisory_lock(${key}, hashtext('g'))`);
      const before = Date.now();
      const held = await claim('ahead-busy', 2);
      expect(held.jobs).toHaveLength(0);
      expect(held.waitUntil).not.toBeNull();
      expect(held.waitUntil!.getTime()).toBeLessThan(before + 1_000);
      await holder.query(`SELECT pg_advisory_unlock(${key}, hashtext('g'))`);
      const free = await claim('ahead-busy', 2);
      expect(free.jobs).toHaveLength(2);
      expect(free.waitUntil).toBeNull();
    } finally {
      await holder.end();
    }
  });
});

describe('groups: jobs without a group in a grouped queue (0019)', () => {
  it('an enqueue without a group adds no entry to the group index', async () => {
    // Measured by size, not by VACUUM's reltuples: a snapshot held by any other
    // session on the server (a parallel test file) made VACUUM skip the index, and
    // its count read 0.
    const size = async (index: string) =>
      Number((await t.db.pool.query(`SELECT pg_relation_size('${t.db.s}.${index}') AS n`)).rows[0].n);
    await t.queue.enqueueMany(Array.from({ length: 3 }, () => ({ task: 't', queue: 'no-entry', group: 'g' })));
    const before = { grouped: await size('jobs_group_dequeue_idx'), all: await size('jobs_dequeue_idx') };
    await t.queue.enqueueMany(Array.from({ length: 3_000 }, () => ({ task: 't', queue: 'no-entry' })));
    // 3,000 entries fill several pages of the common index, and none of the group index.
    expect(await size('jobs_dequeue_idx')).toBeGreaterThan(before.all);
    expect(await size('jobs_group_dequeue_idx')).toBe(before.grouped);
  });

  it("takes them in their turn once among the queue's next jobs in claim order, behind older jobs of every group", async () => {
    await t.queue.enqueueMany(Array.from({ length: 40 }, () => ({ task: 't', queue: 'mixed', group: 'big' })));
    await t.queue.enqueueMany(Array.from({ length: 2 }, () => ({ task: 't', queue: 'mixed' })));
    const seen: (string | null)[] = [];
    for (let i = 0; i < 11; i++) seen.push(...groupsOf((await claim('mixed', 1)).jobs));
    // A claim of 1 looks at the queue's next 32 due jobs for them: out of reach
    // while more than 32 older jobs of 'big' wait, then every round gives them a turn.
    expect(seen).toEqual([...Array.from({ length: 9 }, () => 'big'), null, 'big']);
  });

  // Outside review 151: held-back jobs of 'vip' filled the window, and the jobs
  // without a group ran only as fast as 'vip' did, with the other slots idle.
  it.each([
    ['at its concurrency limit', { concurrencyLimit: 1 }],
    ['under a rate limit', { rateLimit: { limit: 1, intervalMs: 60_000, burst: 1 } }],
  ])('do not wait behind older jobs of a group %s (0041)', async (_, settings) => {
    const queue = `held-${Object.keys(settings)[0]}`;
    await setGroupSettings(t.db.pool, t.db.schema, queue, 'vip', settings);
    // More than the 256 rows of the first look (outside review 153: 600 held back, 11.7 s).
    await t.queue.enqueueMany(Array.from({ length: 600 }, () => ({ task: 't', queue, group: 'vip' })));
    await t.queue.enqueueMany(Array.from({ length: 20 }, () => ({ task: 't', queue })));
    // The first claim takes vip's one job (and, under the rate limit, which holds vip
    // back from the start, jobs without a group beside it).
    const first = groupsOf((await claim(queue, 10)).jobs);
    expect(first.filter((g) => g === 'vip')).toEqual(['vip']);
    let ungrouped = first.length - 1;
    // vip is held back now (one running, or its token spent): the others' jobs go.
    for (let i = 0; i < 2; i++) {
      const got = groupsOf((await claim(queue, 10)).jobs);
      expect(got.every((g) => g === null)).toBe(true);
      ungrouped += got.length;
    }
    expect(ungrouped).toBe(20);
    // None left: the deeper look found none, and says so for the next second's claims.
    expect((await claim(queue, 10)).jobs).toEqual([]);
    const { rows } = await t.db.pool.query(`SELECT ungrouped_none_at FROM ${t.db.s}.queues WHERE name = $1`, [queue]);
    expect(rows[0].ungrouped_none_at).toBeInstanceOf(Date);
  });
});

describe("groups: the claim statement's plans (0019)", () => {
  it("takes a group's jobs from the group index even when the statistics saw one big group", async () => {
    await t.queue.enqueueMany(Array.from({ length: 3000 }, () => ({ task: 't', queue: 'plans', group: 'big' })));
    await t.db.pool.query(`ANALYZE ${t.db.s}.jobs`);
    await t.queue.enqueueMany(['s1', 's2', 's3'].map((group) => ({ task: 't', queue: 'plans', group })));
    // A session of its own: claim_queue() plans its statements (generic plans) once per session.
    const client = new pg.Client({ connectionString: t.db.url });
    await client.connect();
    const plans: string[] = [];
    client.on('notice', (n) => plans.push(n.message ?? ''));
    try {
      await client.query(`LOAD 'auto_explain'`);
      await client.query(
        `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log`,
      );
      const { jobs } = await claim('plans', 8, 'planner', client);
      expect(new Set(groupsOf(jobs))).toEqual(new Set(['big', 's1', 's2', 's3']));
    } finally {
      await client.end();
    }
    const fetches = plans.filter((p) => p.includes('group_key >= _next'));
    expect(fetches.length).toBeGreaterThan(0);
    for (const plan of fetches) {
      expect(plan).toContain('jobs_group_dequeue_idx');
      expect(plan).not.toContain('jobs_dequeue_idx');
    }
  });
});

describe("groups: the next group's look on stale statistics (outside review 154)", () => {
  it('walks the group index, not every pending row of the queue, on a table never analyzed', async () => {
    const stale = await createTestSchema('groups_stale');
    const queue = new Queue({ pool: stale.pool, schema: stale.schema });
    const client = new pg.Client({ connectionString: stale.url });
    try {
      // Never analyzed (this server's autovacuum is off; elsewhere it may not have come yet).
      for (let g = 0; g < 5; g++) await setGroupSettings(stale.pool, stale.schema, 'q', `g${g}`, { concurrencyLimit: 1 });
      await queue.enqueueMany(Array.from({ length: 20_000 }, (_, i) => ({ task: 't', queue: 'q', group: `g${i % 5}` })));
      await queue.enqueueMany(Array.from({ length: 6_000 }, (_, i) => ({ task: 't', queue: 'q', group: `u${i % 50}` })));
      await client.connect();
      // As workers claim: past the five custom plans, the function's generic plans are what claims run on.
      const claimTen = () => client.query(`SELECT count(*) FROM ${stale.s}.claim_queue('q', 'w', '{t}', 10, 40, 10, '{}')`);
      for (let i = 0; i < 6; i++) await claimTen();
      const plans: string[] = [];
      client.on('notice', (n) => plans.push(n.message ?? ''));
      await client.query(`LOAD 'auto_explain'`);
      await client.query(
        `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log`,
      );
      await claimTen();
      const lookups = plans.filter((p) => p.includes('ORDER BY group_key LIMIT 1'));
      expect(lookups.length).toBeGreaterThan(0);
      for (const plan of lookups) {
        expect(plan).toContain('jobs_group_dequeue_idx');
        expect(plan).not.toContain('Sort');
      }
    } finally {
      await client.end().catch(() => {});
      await queue.close();
      await stale.drop();
    }
  });
});

/** A Proxy whose every use throws a TypeError. */
function revoked(): never {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy as never;
}

describe('groups: settings', () => {
  it('rejects bad settings with a ValidationError', async () => {
    const bad: [string, () => Promise<unknown>][] = [
      ['weight 0', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', { weight: 0 })],
      ['limit 0', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', { concurrencyLimit: 0 })],
      ['unknown key', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', { wieght: 2 } as never)],
      ['rate without limit', () => setQueueRateLimit(t.db.pool, t.db.schema, 'q', {} as never)],
      ['rate limit 1.5', () => setQueueRateLimit(t.db.pool, t.db.schema, 'q', { limit: 1.5 })],
      ['group concurrency "2"', () => setQueueGroups(t.db.pool, t.db.schema, 'q', { groupConcurrency: '2' as never })],
      ['empty group', () => setGroupSettings(t.db.pool, t.db.schema, 'q', '', { weight: 2 })],
      ['no group settings at all', () => setQueueGroups(t.db.pool, t.db.schema, 'q', {})],
      ['null group settings', () => setQueueGroups(t.db.pool, t.db.schema, 'q', null as never)],
      ['null settings for a group', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', null as never)],
      ['no settings for a group', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', {})],
      ['129 emoji', () => setGroupSettings(t.db.pool, t.db.schema, 'q', '😀'.repeat(129), { weight: 2 })],
      // Input that throws as it is read (outside review 68: a plain Error or TypeError came through).
      [
        'a getter that throws',
        () =>
          setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', {
            get weight(): number {
              throw new Error('boom');
            },
          }),
      ],
      ['revoked Proxy group settings', () => setQueueGroups(t.db.pool, t.db.schema, 'q', revoked())],
      ['revoked Proxy rate limit', () => setQueueRateLimit(t.db.pool, t.db.schema, 'q', revoked())],
      // The trailing { actor } options too (review 70), and names they do not know.
      ['unknown action option', () => setGroupSettings(t.db.pool, t.db.schema, 'q', 'g', { weight: 2 }, { bogus: 1 } as never)],
      ['revoked Proxy action options', () => setQueueGroups(t.db.pool, t.db.schema, 'q', { groupConcurrency: 2 }, revoked())],
      [
        'action options with a throwing getter',
        () =>
          setQueueRateLimit(
            t.db.pool,
            t.db.schema,
            'q',
            { limit: 5 },
            {
              get actor(): string {
                throw new Error('boom');
              },
            },
          ),
      ],
    ];
    for (const [what, call] of bad) await expect(call(), what).rejects.toBeInstanceOf(ValidationError);
    // Nothing was written by any of them: 'q' has no settings (setQueueGroups({}) used to flag it grouped).
    expect((await listQueueLimits(t.db.pool, t.db.schema)).some((q) => q.name === 'q')).toBe(false);
    // Nor may a worker flag a queue without a grouped job, or create one.
    const { rows } = await t.db.pool.query(`SELECT ${t.db.s}.mark_queue_grouped('q', 'sluice-test') AS flagged`);
    expect(rows).toEqual([{ flagged: false }]);
    expect((await listQueueLimits(t.db.pool, t.db.schema)).some((q) => q.name === 'q')).toBe(false);
  });

  it('counts a group key in characters as Postgres does, and shows a rejected value quoted and cut short', async () => {
    // 128 emoji are 256 UTF-16 units, and 128 characters to Postgres: taken from JS as from SQL.
    const emoji = '😀'.repeat(128);
    await t.queue.enqueue('t', {}, { queue: 'chars', group: emoji });
    expect((await setGroupSettings(t.db.pool, t.db.schema, 'chars', emoji, { weight: 2 })).weight).toBe(2);
    const long = await setGroupSettings(t.db.pool, t.db.schema, 'q', 'x'.repeat(100_000), { weight: 2 }).catch((e: Error) => e);
    expect(long).toBeInstanceOf(ValidationError);
    expect((long as Error).message.length).toBeLessThan(200);
    expect((long as Error).message).toContain('(100000 characters)');
    await expect(setQueueGroups(t.db.pool, t.db.schema, 'q', { groupConcurrency: '2' as never })).rejects.toThrow(/got "2"/);
  });

  it('lists what was set, changes only the keys given, and records each change in the audit log', async () => {
    await setQueueRateLimit(t.db.pool, t.db.schema, 'settings', { limit: 100 }, { actor: 'test' });
    await setQueueGroups(t.db.pool, t.db.schema, 'settings', { groupConcurrency: 4 });
    await setQueueGroups(t.db.pool, t.db.schema, 'settings', { groupRateLimit: { limit: 5, intervalMs: 2000 } });
    const [limits] = (await listQueueLimits(t.db.pool, t.db.schema)).filter((q) => q.name === 'settings');
    expect(limits).toMatchObject({
      grouped: true,
      groupConcurrency: 4,
      rateLimit: { limit: 100, intervalMs: 1000, burst: 10 },
      groupRateLimit: { limit: 5, intervalMs: 2000, burst: 1 },
    });
    await setGroupSettings(t.db.pool, t.db.schema, 'settings', null, { weight: 2 });
    await setGroupSettings(t.db.pool, t.db.schema, 'settings', null, { concurrencyLimit: 7 });
    expect(await listGroupSettings(t.db.pool, t.db.schema, 'settings')).toMatchObject([
      { group: null, weight: 2, concurrencyLimit: 7, rateLimit: null },
    ]);
    // null is the default for the weight too (1), as for the limits (outside review 94: it was refused).
    await setGroupSettings(t.db.pool, t.db.schema, 'settings', 'back', { weight: 4 });
    expect(await setGroupSettings(t.db.pool, t.db.schema, 'settings', 'back', { weight: null })).toMatchObject({ weight: 1 });
    await t.db.pool.query(`DELETE FROM ${t.db.s}.job_groups WHERE group_key = 'back'`);
    await t.db.pool.query(`DELETE FROM ${t.db.s}.audit_log WHERE detail ->> 'group' = 'back'`);
    await setQueueRateLimit(t.db.pool, t.db.schema, 'settings', null);
    const [after] = (await listQueueLimits(t.db.pool, t.db.schema)).filter((q) => q.name === 'settings');
    expect(after?.rateLimit).toBeNull();
    const { rows } = await t.db.pool.query(
      `SELECT action, actor, detail, at FROM ${t.db.s}.audit_log WHERE queue = 'settings' ORDER BY id`,
    );
    expect(rows.map((r) => r.action)).toEqual([
      'rate_limit',
      'group_defaults',
      'group_defaults',
      'group_settings',
      'group_settings',
      'rate_limit',
    ]);
    expect(rows[0].actor).toBe('test');
    // What each change left (migration 0033; outside review 80: the log said only that something changed).
    expect(rows.map((r) => r.detail)).toEqual([
      { rate_limit: 100, rate_interval_ms: 1000, rate_burst: 10 },
      { group_concurrency: 4, group_rate_limit: null, group_rate_interval_ms: null, group_rate_burst: null },
      { group_concurrency: 4, group_rate_limit: 5, group_rate_interval_ms: 2000, group_rate_burst: 1 },
      { group: null, weight: 2, concurrency_limit: null, rate_limit: null, rate_interval_ms: null, rate_burst: null },
      { group: null, weight: 2, concurrency_limit: 7, rate_limit: null, rate_interval_ms: null, rate_burst: null },
      { rate_limit: null, rate_interval_ms: null, rate_burst: null },
    ]);
    // The time of each statement, not of its transaction's start.
    const client = await t.db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_sleep(0.05)');
      await setGroupSettings(client, t.db.schema, 'settings', 'g1', { weight: 3 });
      const { rows: times } = await client.query(
        `SELECT at > now() AS after_begin FROM ${t.db.s}.audit_log WHERE queue = 'settings' ORDER BY id DESC LIMIT 1`,
      );
      expect(times[0].after_begin).toBe(true);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});

describe('groups: metrics', () => {
  it("reports groups, throttled groups and the busiest groups' due and running jobs at scrape time", async () => {
    await setQueueGroups(t.db.pool, t.db.schema, 'gmetrics', { groupConcurrency: 1 });
    await t.queue.enqueueMany(['a', 'a', 'a', 'b'].map((group) => ({ task: 't', queue: 'gmetrics', group })));
    await claim('gmetrics', 10);
    const metrics = new SluiceMetrics();
    watchGroups(metrics, t.db.schema, t.db.pool, { top: 1 });
    const text = await metrics.text();
    const labels = `schema="${t.db.schema}",queue="gmetrics"`;
    expect(text).toContain(`sluice_queue_groups{${labels}} 2`);
    // a still has 2 due jobs behind its one running job; b has none left.
    expect(text).toContain(`sluice_queue_groups_throttled{${labels}} 1`);
    expect(text).toContain(`sluice_queue_throttled{${labels}} 0`);
    expect(text).toContain(`sluice_group_jobs{${labels},group="a",state="due"} 2`);
    expect(text).toContain(`sluice_group_jobs{${labels},group="a",state="running"} 1`);
    expect(text).not.toContain(`${labels},group="b"`);
  });

  it('reports the groups of a queue whose grouped jobs no worker has claimed yet', async () => {
    // Not marked grouped: no worker has claimed from it and it has no group settings.
    await t.queue.enqueueMany(['a', 'a', 'b'].map((group) => ({ task: 't', queue: 'gunmarked', group })));
    await t.queue.enqueue('t', {}, { queue: 'gplain' });
    expect((await listQueueLimits(t.db.pool, t.db.schema)).find((q) => q.name === 'gunmarked')?.grouped).not.toBe(true);
    const metrics = new SluiceMetrics();
    watchGroups(metrics, t.db.schema, t.db.pool, { top: 5 });
    const text = await metrics.text();
    expect(text).toContain(`sluice_queue_groups{schema="${t.db.schema}",queue="gunmarked"} 2`);
    expect(text).toContain(`sluice_group_jobs{schema="${t.db.schema}",queue="gunmarked",group="a",state="due"} 2`);
    expect(text).not.toContain(`queue="gplain"`);
    expect(text).toContain(`sluice_group_stats_up{schema="${t.db.schema}"} 1`);
  });

  it('refuses bad options at once, and says when a scrape could not read the groups (outside review 181)', async () => {
    const metrics = new SluiceMetrics();
    // Accepted before, then every scrape failed its read and left all group series out.
    for (const bad of [{ top: 1e9 }, { top: '3' }, { top: 0 }, { top: 2.5 }, { tpo: 2 }, { prefix: 'bad prefix' }]) {
      expect(() => watchGroups(metrics, t.db.schema, t.db.pool, bad as never)).toThrow(ConfigError);
    }
    expect(() => new SluiceMetrics({ prefix: '1x' })).toThrow(/prefix must start a Prometheus metric name/);
    // A schema that is not installed: the read fails, the scrape says so.
    watchGroups(metrics, 'not_installed_here', t.db.pool);
    const text = await metrics.text();
    expect(text).toContain('sluice_group_stats_up{schema="not_installed_here"} 0');
    expect(text).not.toMatch(/^sluice_queue_groups\{/m);
    // A second schema in the same registry: both reported (it was prom-client's "already registered", outside review 245).
    watchGroups(metrics, t.db.schema, t.db.pool);
    const both = await metrics.text();
    expect(both).toContain('sluice_group_stats_up{schema="not_installed_here"} 0');
    expect(both).toContain(`sluice_group_stats_up{schema="${t.db.schema}"} 1`);
  });
});
