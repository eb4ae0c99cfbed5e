/**
 * QueueState: the claim plan (which queues the common claim takes, which go
 * through claim_limited, which not at all) from the queues table and local limits.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { lostClaimAhead, QueueState, turnedGrouped } from '../../src/worker/queue-state.js';
import { MemoryDatabase } from '../helpers/memory-store.js';

const QUEUES = ['a', 'b', 'c', 'd'];

let db: MemoryDatabase;
let changed: number;
let errors: unknown[];

function queueState(localLimits: Record<string, number> = {}, refreshMs = 10_000): QueueState {
  return new QueueState(
    db.store('w1'),
    QUEUES,
    new Map(Object.entries(localLimits)),
    refreshMs,
    () => changed++,
    (err) => errors.push(err),
  );
}

function reads(): number {
  return db.log.filter((e) => e.op === 'queueState').length;
}

beforeEach(() => {
  vi.useFakeTimers();
  db = new MemoryDatabase();
  changed = 0;
  errors = [];
});
afterEach(() => {
  vi.useRealTimers();
});

describe('QueueState', () => {
  it('claims every queue in the common claim until it has read the table', () => {
    db.setQueue('a', { paused: true });
    expect(queueState().claimPlan).toEqual({ plain: QUEUES, limited: [], strict: [], noAhead: [] });
  });

  it('leaves paused queues out, sends limited ones (global or local) through claim_limited, keeps the order', async () => {
    db.setQueue('a', { paused: true });
    db.setQueue('c', { limit: 2 });
    db.setQueue('other', { paused: true }); // not one of this worker's
    const qs = queueState({ d: 1 });
    await qs.start();
    expect(qs.claimPlan).toEqual({ plain: ['b'], limited: ['c', 'd'], strict: ['c', 'd'], noAhead: ['c', 'd'] });
    expect(changed).toBe(1);
    qs.stop();
  });

  it('marks strict only the limited queues where a limit counts every claimed job (not a grouped queue without limits)', async () => {
    db.queues.set('a', { name: 'a', paused: false, concurrency_limit: null, grouped: true, strict: false });
    db.queues.set('b', { name: 'b', paused: false, concurrency_limit: null, grouped: true, strict: true });
    const qs = queueState({ d: 2 });
    await qs.start();
    expect(qs.claimPlan).toEqual({ plain: ['c'], limited: ['a', 'b', 'd'], strict: ['b', 'd'], noAhead: ['d'] });
    db.queues.set('b', { name: 'b', paused: false, concurrency_limit: null, grouped: true, strict: false });
    await qs.refresh();
    expect(qs.claimPlan.strict).toEqual(['d']);
    expect(changed).toBe(2);
    qs.stop();
  });

  it('a paused queue is left out even when it has a limit', async () => {
    db.setQueue('c', { paused: true, limit: 1 });
    const qs = queueState({ c: 3 });
    await qs.start();
    expect(qs.claimPlan).toEqual({ plain: ['a', 'b', 'd'], limited: [], strict: [], noAhead: [] });
    qs.stop();
  });

  it('sees a pause, a resume and a limit removed on refresh()', async () => {
    const qs = queueState();
    await qs.start();
    db.setQueue('b', { paused: true });
    await qs.refresh();
    expect(qs.claimPlan.plain).toEqual(['a', 'c', 'd']);
    db.setQueue('b', { paused: false, limit: 1 });
    await qs.refresh();
    expect(qs.claimPlan).toEqual({ plain: ['a', 'c', 'd'], limited: ['b'], strict: ['b'], noAhead: ['b'] });
    db.setQueue('b', { limit: null });
    await qs.refresh();
    expect(qs.claimPlan).toEqual({ plain: QUEUES, limited: [], strict: [], noAhead: [] });
    qs.stop();
  });

  it('folds refreshes asked for during a read into exactly one more read', async () => {
    const qs = queueState();
    const open = db.holdNext('queueState');
    const first = qs.refresh();
    await vi.advanceTimersByTimeAsync(0);
    const second = qs.refresh();
    const third = qs.refresh();
    open();
    await Promise.all([first, second, third]);
    expect(reads()).toBe(2);
    // Nothing is paused or limited: the plan never changed, so the loop was not woken.
    expect(changed).toBe(0);
  });

  it('wakes the fetch loop only when a read changes the plan', async () => {
    const qs = queueState();
    await qs.start();
    await qs.refresh();
    expect(changed).toBe(0);
    db.setQueue('a', { paused: true });
    await qs.refresh();
    expect(changed).toBe(1);
    await qs.refresh();
    expect(changed).toBe(1);
    db.setQueue('a', { paused: false });
    await qs.refresh();
    expect(changed).toBe(2);
    qs.stop();
  });

  it('keeps the last plan and reports the error when the read fails; start() does not throw', async () => {
    db.setQueue('a', { paused: true });
    const qs = queueState();
    await qs.start();
    db.setQueue('a', { paused: false });
    db.failNext('queueState');
    await qs.refresh();
    expect(errors).toHaveLength(1);
    expect(qs.claimPlan.plain).toEqual(['b', 'c', 'd']);
    qs.stop();
    db.failNext('queueState');
    await expect(queueState().start()).resolves.toBeUndefined();
  });

  it('re-reads on its timer (workers that poll, missed notifications) until stop()', async () => {
    const qs = queueState({}, 1_000);
    await qs.start();
    db.setQueue('d', { paused: true });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(qs.claimPlan.plain).toEqual(['a', 'b', 'c']);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(reads()).toBe(5);
    qs.stop();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(reads()).toBe(5);
  });

  it('keeps its timer going after a failed read', async () => {
    const qs = queueState({}, 1_000);
    await qs.start();
    db.failNext('queueState');
    await vi.advanceTimersByTimeAsync(1_000);
    db.setQueue('a', { paused: true });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(errors).toHaveLength(1);
    expect(qs.claimPlan.plain).toEqual(['b', 'c', 'd']);
    qs.stop();
  });

  it('has no timer with a refresh interval of 0', async () => {
    const qs = queueState({}, 0);
    await qs.start();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(reads()).toBe(1);
  });
});

describe('QueueState.assumeGrouped', () => {
  it('holds a queue being flagged out of every claim, then claims it as grouped; plain puts it back', async () => {
    const qs = queueState();
    await qs.start();
    expect(qs.claimPlan.plain).toEqual(QUEUES);
    qs.assumeGrouped('b', 'flagging');
    expect(qs.claimPlan).toEqual({ plain: ['a', 'c', 'd'], limited: [], strict: [], noAhead: [] });
    qs.assumeGrouped('b', 'grouped');
    expect(qs.claimPlan).toEqual({ plain: ['a', 'c', 'd'], limited: ['b'], strict: [], noAhead: [] });
    expect(changed).toBe(2);
    // A re-read that does not see the flag yet keeps what the worker knows.
    await qs.refresh();
    expect(qs.claimPlan.limited).toEqual(['b']);
    qs.assumeGrouped('b', 'plain');
    expect(qs.claimPlan.plain).toEqual(QUEUES);
    qs.stop();
  });
});

describe('lostClaimAhead', () => {
  const plan = (plain: string[], limited: string[] = [], strict: string[] = []) => ({ plain, limited, strict, noAhead: strict });

  it('names the queues paused or given a counting limit since: their jobs claimed ahead must go back', () => {
    const before = plan(['a', 'b', 'c'], ['g', 'h', 's'], ['s']);
    // a paused, b limited (strict), g (grouped, no limit) given a group limit, h paused, s unchanged.
    const after = plan(['c'], ['b', 'g', 's'], ['b', 'g', 's']);
    expect(lostClaimAhead(before, after)).toEqual(['a', 'b', 'g', 'h']);
  });

  it('names none when queues only become claimable ahead, or a grouped queue keeps claiming ahead', () => {
    expect(lostClaimAhead(plan([], ['a'], ['a']), plan(['a']))).toEqual([]);
    expect(lostClaimAhead(plan(['a']), plan([], ['a']))).toEqual([]);
    expect(lostClaimAhead(plan([], [], []), plan(['a']))).toEqual([]);
  });
});

describe('turnedGrouped', () => {
  const plan = (plain: string[], limited: string[] = [], strict: string[] = []) => ({ plain, limited, strict, noAhead: strict });

  it('names the queues claimed in common order before and round-robin now: what was claimed ahead there goes back', () => {
    // a flagged grouped (by the leader), b given a counting limit (lostClaimAhead's), c unchanged, g grouped already.
    expect(turnedGrouped(plan(['a', 'b', 'c'], ['g']), plan(['c'], ['a', 'b', 'g'], ['b']))).toEqual(['a']);
    // Flagged by this worker: held out of every claim first ('flagging'), so not plain just before.
    expect(turnedGrouped(plan([], []), plan([], ['a']))).toEqual([]);
  });
});
