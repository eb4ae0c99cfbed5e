/**
 * Heartbeat: the locks of a worker's jobs stay fresh while it holds them; jobs
 * taken away are reported, jobs that merely finished meanwhile are not; rows
 * another session holds are asked again soon; and a job whose lock could not be
 * renewed is given up before the rescuer may hand it to someone else.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Heartbeat } from '../../src/worker/heartbeat.js';
import { MemoryDatabase, type MemoryStore } from '../helpers/memory-store.js';

const VISIBILITY_MS = 4_000;
const INTERVAL_MS = 1_000;
const RENEWAL_TIMEOUT_MS = 3_000;

let db: MemoryDatabase;
let store: MemoryStore;
let held: string[];
let lost: string[][];
let cancelled: string[][];
let unrenewed: { ids: string[]; at: number; rowHeld: string[]; unanswered: string[] }[];
let errors: unknown[];
let rowsHeldTold: number;
let answered: number;
let heartbeat: Heartbeat;

/** Claims `n` jobs as w1 and tells the heartbeat, as the worker does. */
async function claim(n: number, s = store): Promise<string[]> {
  const sentAt = performance.now();
  const ids = (await s.claim(n)).map((j) => j.id);
  if (s === store) heartbeat.claimed(ids, sentAt);
  return ids;
}

/** Claims `n` jobs, starts the heartbeat and has another session lock the first job's row just before the first beat; returns the commit. */
async function lockedAtFirstBeat(n: number): Promise<() => void> {
  db.addMany(n, 't');
  held = await claim(n);
  heartbeat.start();
  await vi.advanceTimersByTimeAsync(INTERVAL_MS - 10);
  const unlock = db.lockJob(held[0]!);
  await vi.advanceTimersByTimeAsync(10);
  return unlock;
}

function heartbeatOps(): number {
  return db.log.filter((e) => e.op === 'heartbeat').length;
}

beforeEach(() => {
  vi.useFakeTimers();
  db = new MemoryDatabase();
  store = db.store('w1');
  held = [];
  lost = [];
  cancelled = [];
  unrenewed = [];
  errors = [];
  rowsHeldTold = 0;
  answered = 0;
  heartbeat = new Heartbeat(
    store,
    { intervalMs: INTERVAL_MS, renewalTimeoutMs: RENEWAL_TIMEOUT_MS, visibilityTimeoutMs: VISIBILITY_MS },
    {
      held: () => [...held],
      renewable: (ids) => ids,
      lost: (ids) => void lost.push(ids),
      cancelled: (ids) => void cancelled.push(ids),
      unrenewed: (ids, rowHeld, unanswered) =>
        void unrenewed.push({ ids, at: Date.now(), rowHeld: [...rowHeld], unanswered: [...unanswered] }),
      rowHeldChanged: () => void rowsHeldTold++,
      answered: () => void answered++,
      error: (err) => void errors.push(err),
    },
  );
});
afterEach(() => {
  heartbeat.stop();
  vi.useRealTimers();
});

describe('Heartbeat', () => {
  it('keeps held jobs from being rescued however long they run', async () => {
    db.addMany(3, 't');
    held = await claim(3);
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(20_000);
    expect(db.rescue(VISIBILITY_MS)).toEqual([]);
    expect(lost).toEqual([]);
    expect(unrenewed).toEqual([]);
  });

  it('without it, the same jobs are rescued (the test above can fail)', async () => {
    db.addMany(3, 't');
    held = await claim(3);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(db.rescue(VISIBILITY_MS).sort()).toEqual([...held].sort());
  });

  it('reports the jobs taken away (rescued, then claimed by another worker)', async () => {
    db.addMany(2, 't');
    const [stale] = await claim(1);
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS + 1);
    const [fresh] = await claim(1);
    held = [stale!, fresh!];
    expect(db.rescue(VISIBILITY_MS)).toEqual([stale]);
    await claim(1, db.store('w2'));
    await heartbeat.beat();
    expect(lost).toEqual([[stale]]);
    expect(db.job(stale!).locked_by).toBe('w2');
  });

  it('tells a job cancelled while it ran as cancelled, not as taken away (outside review 238: without LISTEN)', async () => {
    db.addMany(2, 't');
    held = await claim(2);
    db.job(held[0]!).status = 'cancelled';
    await heartbeat.beat();
    expect(cancelled).toEqual([[held[0]]]);
    expect(lost).toEqual([]);
  });

  it('does not report a job that finished while the statement ran', async () => {
    db.addMany(2, 't');
    held = await claim(2);
    const open = db.holdNext('heartbeat');
    const beat = heartbeat.beat();
    // Meanwhile the first job's result is written, and the worker lets it go.
    await store.write({ completed: [{ id: held[0]!, attempt: 1, result: null }] });
    held = [held[1]!];
    open();
    await beat;
    expect(lost).toEqual([]);
  });

  // CI: a job rescued from this worker and claimed by it again while a beat was
  // out: the beat, whose snapshot predates that claim, found the row gone, and its
  // new attempt (waiting for the old handler to stop) was told lost and dropped.
  it('does not report a job whose claim landed while the statement ran (a new attempt, not a lost lock)', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS + 1);
    expect(db.rescue(VISIBILITY_MS)).toEqual(held);
    const open = db.holdNext('heartbeat', 'reply');
    const beat = heartbeat.beat();
    await vi.advanceTimersByTimeAsync(0);
    expect(await claim(1)).toEqual(held);
    open();
    await beat;
    expect(lost).toEqual([]);
    // The next beat renews the new attempt's lock.
    await heartbeat.beat();
    expect(lost).toEqual([]);
    expect(db.job(held[0]!).locked_by).toBe('w1');
  });

  it('does not report as lost a job whose row another session holds, and asks again well before the next beat', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS - 10);
    const unlock = db.lockJob(held[0]!);
    await vi.advanceTimersByTimeAsync(10); // the beat: skipped
    expect(lost).toEqual([]);
    const skippedAt = db.job(held[0]!).locked_at!.getTime();
    unlock();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4);
    expect(heartbeatOps()).toBe(2);
    expect(db.job(held[0]!).locked_at!.getTime()).toBeGreaterThan(skippedAt);
  });

  it('lists the jobs whose rows two beats in a row found held (for the rescuer), tells when one is newly found, drops them once renewed', async () => {
    const unlock = await lockedAtFirstBeat(2);
    // One beat found it locked: maybe this worker's own statement beside the beat; asked again soon.
    expect(heartbeat.rowHeld()).toEqual([]);
    expect(rowsHeldTold).toBe(0);
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4); // asked again, still held: listed
    expect(heartbeatOps()).toBe(2);
    expect(heartbeat.rowHeld()).toEqual([held[0]]);
    expect(rowsHeldTold).toBe(1);
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4); // again, still held: not told again
    expect(heartbeatOps()).toBe(3);
    expect(rowsHeldTold).toBe(1);
    unlock();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4);
    expect(heartbeat.rowHeld()).toEqual([]);
    expect(rowsHeldTold).toBe(2); // renewed again: the list shrank
    const relock = db.lockJob(held[1]!);
    await vi.advanceTimersByTimeAsync(INTERVAL_MS + INTERVAL_MS / 4);
    expect(heartbeat.rowHeld()).toEqual([held[1]]);
    expect(rowsHeldTold).toBe(3);
    const [first, second] = held as [string, string];
    heartbeat.claimed([second], performance.now()); // handed back and claimed again at once: a new lock
    expect(heartbeat.rowHeld()).toEqual([]);
    const beats = heartbeatOps();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4); // beats come a quarter interval apart while rows are held
    expect(heartbeatOps()).toBe(beats + 1);
    expect(heartbeat.rowHeld()).toEqual([]); // one beat of the new lock found it held: not yet
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4);
    expect(heartbeat.rowHeld()).toEqual([second]); // still held: listed again
    held = [first]; // the job left this worker (its result written, say): no longer listed
    expect(heartbeat.rowHeld()).toEqual([]);
    relock();
  });

  it('does not list a row one beat found locked and the next renewed (a statement of its own worker beside the beat)', async () => {
    const unlock = await lockedAtFirstBeat(1);
    unlock();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS / 4);
    expect(heartbeatOps()).toBe(2);
    expect(heartbeat.rowHeld()).toEqual([]);
    expect(rowsHeldTold).toBe(0);
    // And a later lock starts over: one skip again lists nothing.
    await vi.advanceTimersByTimeAsync(INTERVAL_MS - 10);
    const again = db.lockJob(held[0]!);
    await vi.advanceTimersByTimeAsync(10);
    expect(heartbeat.rowHeld()).toEqual([]);
    again();
  });

  it('sends nothing when the worker holds nothing', async () => {
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(heartbeatOps()).toBe(0);
  });

  it('never overlaps: a beat while one is in flight is skipped', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    const open = db.holdNext('heartbeat');
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(2_500);
    expect(heartbeatOps()).toBe(1);
    open();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(heartbeatOps()).toBe(2);
  });

  it('reports a failed statement and beats again at the next interval', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    db.failNext('heartbeat', new Error('connection reset'));
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(errors).toHaveLength(1);
    expect(lost).toEqual([]);
    expect(answered).toBe(0); // a failed beat tells nobody that Postgres answers
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(heartbeatOps()).toBe(2);
    expect(db.job(held[0]!).locked_at!.getTime()).toBe(Date.now());
    expect(answered).toBe(1);
  });

  it('gives up a job it cannot renew before the rescuer could take it, and says so once', async () => {
    db.addMany(2, 't');
    held = await claim(2);
    for (let i = 0; i < 100; i++) db.failNext('heartbeat'); // Postgres unreachable
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(RENEWAL_TIMEOUT_MS);
    expect(unrenewed).toEqual([]);
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS - RENEWAL_TIMEOUT_MS - 1);
    expect(unrenewed.map((u) => u.ids)).toEqual([held]);
    // When it gave them up, no rescuer could have taken them yet.
    const givenUpAt = unrenewed[0]!.at;
    expect(givenUpAt).toBeLessThan(db.job(held[0]!).locked_at!.getTime() + VISIBILITY_MS);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(unrenewed).toHaveLength(1);
    // Unanswered beats: not a row held by another session, and not the job's doing.
    expect(unrenewed[0]!.rowHeld).toEqual([]);
    expect(unrenewed[0]!.unanswered).toEqual(held);
  });

  it('counts a beat held past the renewal timeout (a lock on the jobs table) as unanswered', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    heartbeat.start();
    const open = db.holdNext('heartbeat');
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS);
    expect(unrenewed.map((u) => [u.ids, u.unanswered])).toEqual([[held, held]]);
    open();
  });

  it('counts beats that time out with gaps between them as unanswered (review 146: statement timeout VT / 2)', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    heartbeat.start();
    // Each beat waits 2.6 s, then fails; the next goes out an interval later (a gap at the renewal timeout).
    const release = setInterval(() => gates.splice(0, 1).forEach((g) => g()), 2_600);
    const gates: (() => void)[] = [];
    for (let i = 0; i < 10; i++) {
      db.failNext('heartbeat');
      gates.push(db.holdNext('heartbeat'));
    }
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS);
    clearInterval(release);
    gates.forEach((g) => g());
    expect(unrenewed.map((u) => [u.ids, u.unanswered])).toEqual([[held, held]]);
  });

  it('says which of the jobs it gives up had their rows held by another session, the beats answered', async () => {
    db.addMany(2, 't');
    held = await claim(2);
    const commit = db.lockJob(held[0]!);
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS - 1);
    // The beats were answered: row-held, not unanswered.
    expect(unrenewed.map((u) => [u.ids, u.rowHeld, u.unanswered])).toEqual([[[held[0]], [held[0]], []]]);
    commit();
  });

  it('gives up a job whose row another session keeps locked past the renewal timeout', async () => {
    db.addMany(2, 't');
    held = await claim(2);
    db.lockJob(held[1]!);
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS);
    expect(unrenewed.map((u) => u.ids)).toEqual([[held[1]]]);
    expect(lost).toEqual([]);
  });

  it('reports a job claimed again (by the same worker) after it was given up, when the new lock cannot be renewed', async () => {
    // Found by tests/chaos.test.ts: a job given up (unrenewed), failed and claimed
    // again by the same worker before the watcher saw it go was never reported
    // again: "said so once" outlived the lock it was about, and the new run
    // overlapped the rescuer's.
    db.addMany(1, 't');
    held = await claim(1);
    for (let i = 0; i < 100; i++) db.failNext('heartbeat'); // Postgres unreachable
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS);
    expect(unrenewed.map((u) => u.ids)).toEqual([held]);
    // Claimed again at once: held all along, as the watcher sees it.
    heartbeat.claimed(held, performance.now());
    await vi.advanceTimersByTimeAsync(VISIBILITY_MS);
    expect(unrenewed.map((u) => u.ids)).toEqual([held, held]);
  });

  it('forgets a job it no longer holds: no unrenewed report for it', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    for (let i = 0; i < 100; i++) db.failNext('heartbeat');
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(1_500);
    held = [];
    await vi.advanceTimersByTimeAsync(10_000);
    expect(unrenewed).toEqual([]);
  });

  it('stops beating on stop()', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(2_000);
    heartbeat.stop();
    const sent = heartbeatOps();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(heartbeatOps()).toBe(sent);
    expect(db.rescue(VISIBILITY_MS)).toEqual(held);
  });

  // The worker stops the heartbeat, then closes its connections: a beat in flight
  // at stop() that found a locked row must not schedule another one.
  it('sends no statement after stop(), even when the beat in flight found a row locked', async () => {
    db.addMany(1, 't');
    held = await claim(1);
    db.lockJob(held[0]!);
    const open = db.holdNext('heartbeat');
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    heartbeat.stop();
    open();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(heartbeatOps(), 'heartbeat statements sent in all').toBe(1);
  });
});
