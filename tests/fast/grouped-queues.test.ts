/**
 * GroupedQueues: a worker flags a queue grouped when it first claims one of its
 * grouped jobs (migration 0021), and hands back what it claimed ahead there when
 * those jobs were claimed in common order. The store is the in-memory one (the
 * SQL function is tested against Postgres in tests/groups.test.ts).
 */
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { JobRow } from '../../src/job.js';
import { GroupedQueues } from '../../src/worker/grouped-queues.js';
import { MemoryDatabase } from '../helpers/memory-store.js';

let db: MemoryDatabase;
let found: string[];
let errors: unknown[];
let plain: Set<string>;
let grouped: GroupedQueues;
let assumed: [string, string][];

function job(queue: string, group: string | null): JobRow {
  const id = db.add('t', { queue });
  return { ...db.job(id)!, group_key: group } as JobRow;
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

beforeEach(() => {
  db = new MemoryDatabase();
  found = [];
  errors = [];
  plain = new Set(['p']);
  assumed = [];
  grouped = new GroupedQueues(
    db.store('w1'),
    (queue) => plain.has(queue),
    (queue) => found.push(queue),
    (err) => errors.push(err),
    (queue, grouping) => assumed.push([queue, grouping]),
  );
});

const marks = () => db.log.filter((e) => e.op === 'markGrouped').length;

describe('GroupedQueues', () => {
  it('flags a queue on its first grouped job, once per queue, and never for jobs without a group', async () => {
    grouped.claimed([job('p', null), job('p', null)]);
    await settle();
    expect(marks()).toBe(0);
    grouped.claimed([job('p', 'a'), job('p', 'b'), job('q', 'a')]);
    grouped.claimed([job('p', 'c')]);
    await settle();
    expect(marks()).toBe(2);
    expect(db.queues.get('p')?.grouped).toBe(true);
    expect(db.queues.get('q')?.grouped).toBe(true);
  });

  it('holds a plain queue out of every claim from its first grouped job until the flag returns, then claims it grouped', async () => {
    grouped.claimed([job('p', 'a'), job('limited', 'a')]);
    // At once: the cycles that follow must not claim more of it in common order.
    expect(assumed).toEqual([['p', 'flagging']]);
    await settle();
    expect(assumed).toEqual([
      ['p', 'flagging'],
      ['p', 'grouped'],
    ]);
  });

  it('puts the queue back in the common claim when the call fails', async () => {
    db.failNext('markGrouped');
    grouped.claimed([job('p', 'a')]);
    await settle();
    expect(errors).toHaveLength(1);
    expect(assumed).toEqual([
      ['p', 'flagging'],
      ['p', 'plain'],
    ]);
  });

  it('reports a queue claimed in common order (plain in the plan) even when another worker flagged it first', async () => {
    db.queues.set('p', { name: 'p', paused: false, concurrency_limit: null, grouped: true, strict: false });
    grouped.claimed([job('p', 'a')]);
    await settle();
    expect(found).toEqual(['p']);
  });

  it('reports a limited queue only when this call flagged it (claim_limited() took its jobs in common order)', async () => {
    db.queues.set('already', { name: 'already', paused: false, concurrency_limit: null, grouped: true, strict: false });
    grouped.claimed([job('already', 'a'), job('limited', 'a')]);
    await settle();
    expect(found).toEqual(['limited']);
  });

  it('after a failed call tries again with a grouped job claimed a minute later, not with every claim', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      db.failNext('markGrouped');
      grouped.claimed([job('p', 'a')]);
      await settle();
      expect(errors).toHaveLength(1);
      expect(found).toEqual([]);
      grouped.claimed([job('p', 'b')]);
      await settle();
      expect(marks()).toBe(1);
      vi.advanceTimersByTime(60_000);
      grouped.claimed([job('p', 'c')]);
      await settle();
      expect(marks()).toBe(2);
      expect(found).toEqual(['p']);
      expect(db.queues.get('p')?.grouped).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });
});
