/**
 * Slots: which jobs run and wait, how many a claim may ask for (slots, per-task
 * prefetch, per-queue limits), and which waiting jobs are overdue.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { JobRow } from '../../src/job.js';
import { Run } from '../../src/worker/run.js';
import { Slots, type SlotsConfig } from '../../src/worker/slots.js';

let nextId = 1;
/** A claimed job; `ahead`: claimed ahead of a free slot (started_at not set by the claim). */
function job(task = 't', queue = 'default', ahead = false): JobRow {
  const now = new Date(0);
  return {
    id: String(nextId++),
    queue,
    task,
    payload: {},
    status: 'processing',
    priority: 0,
    run_at: now,
    attempts: 1,
    max_attempts: 25,
    locked_at: now,
    locked_by: 'w',
    last_error: null,
    created_at: now,
    updated_at: now,
    finished_at: null,
    started_at: ahead ? null : now,
    trace_context: null,
    job_key: null,
    group_key: null,
  };
}

function run(row: JobRow): Run {
  return new Run(row, { handler: () => {}, timeoutMs: undefined, maxAttempts: undefined, backoff: undefined });
}

function slots(config: Partial<SlotsConfig> = {}): Slots {
  return new Slots({ concurrency: 4, prefetch: 0, queueLimits: new Map(), ...config });
}

/** Starts `n` runs of `task`; returns them. */
function startMany(s: Slots, n: number, task = 't', queue = 'default'): Run[] {
  return Array.from({ length: n }, () => {
    const r = run(job(task, queue));
    s.start(r);
    return r;
  });
}

/** Teaches `s` that `task` takes `ms` (one finished run). */
function learn(s: Slots, task: string, ms: number): void {
  const r = run(job(task));
  s.start(r);
  s.finish(r, ms);
}

describe('Slots: holding and starting', () => {
  it('asks for one job per free slot without prefetch', () => {
    const s = slots();
    expect(s.capacity()).toBe(4);
    expect(s.wanted()).toBe(4);
    startMany(s, 3);
    expect(s.wanted()).toBe(1);
    s.hold([job()]);
    expect(s.wanted()).toBe(0);
  });

  it('starts waiting jobs in claim order, only while a slot is free', () => {
    const s = slots({ concurrency: 2 });
    const claimed = [job(), job(), job()];
    s.hold(claimed);
    const first = s.nextToStart()!;
    s.start(run(first));
    const second = s.nextToStart()!;
    s.start(run(second));
    expect([first.id, second.id]).toEqual([claimed[0]!.id, claimed[1]!.id]);
    expect(s.nextToStart()).toBeUndefined();
    expect(s.waitingIds()).toEqual([claimed[2]!.id]);
  });

  it('starts first the jobs the claim gave free slots to (started_at set), then those claimed ahead', () => {
    const s = slots({ concurrency: 2 });
    const [ahead1, now1, ahead2, now2] = [job('t', 'default', true), job(), job('t', 'default', true), job()];
    s.hold([ahead1!, now1!, ahead2!, now2!]);
    expect(s.waitingIds()).toEqual([now1!.id, now2!.id, ahead1!.id, ahead2!.id]);
    const started = [s.nextToStart()!, s.nextToStart()!];
    for (const j of started) s.start(run(j));
    expect(started).toEqual([now1, now2]);
  });

  it('counts free slots: neither running nor waiting', () => {
    const s = slots({ concurrency: 4 });
    expect(s.free()).toBe(4);
    startMany(s, 1);
    s.hold([job('t', 'default', true), job('t', 'default', true)]);
    expect(s.free()).toBe(1);
    s.hold([job('t', 'default', true), job('t', 'default', true)]);
    expect(s.free()).toBe(0);
  });

  it('frees the slot of a finished run, and only of that run', () => {
    const s = slots({ concurrency: 1 });
    const [r] = startMany(s, 1);
    const impostor = run(r!.job); // same job id, another run (e.g. a stale reference)
    expect(s.finish(impostor, 5)).toBe(false);
    expect(s.runningCount).toBe(1);
    expect(s.finish(r!, 5)).toBe(true);
    expect(s.runningCount).toBe(0);
    expect(s.finish(r!, 5)).toBe(false);
  });

  it('heartbeats running and waiting jobs alike', () => {
    const s = slots();
    const [r] = startMany(s, 1);
    const waiting = job();
    s.hold([waiting]);
    expect(s.heldIds().sort()).toEqual([r!.job.id, waiting.id].sort());
    expect(s.runOf(r!.job.id)).toBe(r);
    expect(s.runOf(waiting.id)).toBeUndefined();
  });

  it('drops a waiting job whose lock was lost, so it never starts', () => {
    const s = slots({ concurrency: 1 });
    const [a, b] = [job(), job()];
    s.hold([a!, b!]);
    expect(s.dropWaiting(a!.id)).toBe(a);
    expect(s.dropWaiting('nope')).toBeUndefined();
    expect(s.nextToStart()).toBe(b);
  });

  it('takeWaiting() hands every waiting job over and leaves none', () => {
    const s = slots();
    const held = [job(), job(), job()];
    s.hold(held);
    expect(s.takeWaiting()).toEqual(held);
    expect(s.waitingCount).toBe(0);
    expect(s.nextToStart()).toBeUndefined();
  });
});

describe('Slots: overdue waiting jobs', () => {
  it('takes out the jobs that waited at least maxWaitMs, oldest first, and leaves the rest', () => {
    const s = slots({ concurrency: 1 });
    const [a, b, c] = [job(), job(), job()];
    s.hold([a!, b!], 1_000);
    s.hold([c!], 1_400);
    expect(s.oldestWaitingSince()).toBe(1_000);
    expect(s.takeOverdue(500, 1_499)).toEqual([]);
    expect(s.takeOverdue(500, 1_500)).toEqual([a, b]);
    expect(s.waitingIds()).toEqual([c!.id]);
    expect(s.oldestWaitingSince()).toBe(1_400);
    expect(s.takeOverdue(500, 1_900)).toEqual([c]);
    expect(s.oldestWaitingSince()).toBeUndefined();
  });

  it('takes out every waiting job of one queue (found grouped), still held until handed back', () => {
    const s = slots({ concurrency: 1 });
    const [a1, b1, a2] = [job('t', 'a'), job('t', 'b'), job('t', 'a')];
    // A keyed job goes back too: a job claimed ahead still holds its key (migration 0024).
    const keyed = { ...job('t', 'a'), job_key: 'k' };
    s.hold([a1!, b1!, a2!, keyed]);
    expect(s.takeWaitingIn('a', 'grouped')).toEqual([a1, a2, keyed]);
    expect(s.waitingIds()).toEqual([b1!.id]);
    s.takeOverdue(0, Infinity);
    expect(s.heldIds().sort()).toEqual([a1!.id, b1!.id, a2!.id, keyed.id].sort());
    s.handedBack([a1!, a2!, b1!, keyed], []);
    expect(s.heldIds()).toEqual([]);
  });
});

describe('Slots: prefetch', () => {
  // The allowance reads how long each run has been running (performance.now()): a
  // real clock that ran on past a 1 ms task, as it can on a loaded machine, made
  // the expected numbers wrong. Time stands still here unless a test moves it.
  beforeEach(() => void vi.useFakeTimers({ toFake: ['performance'] }));
  afterEach(() => void vi.useRealTimers());

  it('claims nothing ahead before any task has finished here', () => {
    const s = slots({ prefetch: 50 });
    startMany(s, 4);
    expect(s.prefetchAllowance()).toBe(0);
    expect(s.capacity()).toBe(4);
  });

  it('claims ahead the slots expected to free within the horizon, capped at prefetch', () => {
    const s = slots({ concurrency: 4, prefetch: 50 });
    learn(s, 'fast', 2); // 2 ms a run
    startMany(s, 4, 'fast');
    // 4 slots freeing every 2 ms over the minimum 10 ms horizon: 20 jobs.
    expect(s.prefetchAllowance()).toBe(20);
    expect(s.capacity()).toBe(24);
    expect(s.wanted()).toBe(20);
    const capped = slots({ concurrency: 4, prefetch: 8 });
    learn(capped, 'fast', 2);
    startMany(capped, 4, 'fast');
    expect(capped.capacity()).toBe(12);
  });

  it('claims nothing ahead while its slots hold slow jobs, however fast its other tasks are', () => {
    const s = slots({ concurrency: 4, prefetch: 50 });
    learn(s, 'fast', 1);
    learn(s, 'slow', 5_000);
    startMany(s, 4, 'slow');
    expect(s.prefetchAllowance()).toBe(0);
    expect(s.wanted()).toBe(0);
  });

  it('counts a running task never finished here as never freeing its slot', () => {
    const s = slots({ concurrency: 4, prefetch: 50 });
    learn(s, 'fast', 1);
    startMany(s, 2, 'fast');
    startMany(s, 2, 'unknown');
    // Only the two fast slots free up: 2 per ms over 10 ms.
    expect(s.prefetchAllowance()).toBe(20);
    const blocked = slots({ concurrency: 4, prefetch: 50 });
    learn(blocked, 'fast', 1);
    startMany(blocked, 4, 'unknown');
    expect(blocked.prefetchAllowance()).toBe(0);
  });

  it('expects free slots to be filled by the slowest task seen', () => {
    const s = slots({ concurrency: 4, prefetch: 50 });
    learn(s, 'fast', 1);
    expect(s.prefetchAllowance()).toBe(40); // 4 free slots at 1 ms
    learn(s, 'slow', 100);
    expect(s.prefetchAllowance()).toBe(0); // 4 free slots at 100 ms: 0.4 in 10 ms
  });

  it('widens the horizon to two round trips when the database is far', () => {
    const s = slots({ concurrency: 1, prefetch: 50 });
    learn(s, 'job', 10);
    startMany(s, 1, 'job');
    expect(s.prefetchAllowance()).toBe(1); // 10 ms horizon
    s.recordRoundTrip(50);
    expect(s.prefetchAllowance()).toBe(10); // 100 ms horizon
  });

  it('learns that a task became slower and claims less ahead', () => {
    const s = slots({ concurrency: 2, prefetch: 50 });
    learn(s, 'job', 1);
    startMany(s, 2, 'job');
    const before = s.prefetchAllowance();
    for (let i = 0; i < 30; i++) learn(s, 'job', 100);
    expect(before).toBe(20);
    expect(s.prefetchAllowance()).toBe(0);
  });

  it('never claims ahead with prefetch 0', () => {
    const s = slots({ concurrency: 4, prefetch: 0 });
    learn(s, 'fast', 0);
    startMany(s, 4, 'fast');
    expect(s.capacity()).toBe(4);
    expect(s.wanted()).toBe(0);
  });
});

describe('Slots: per-queue limits', () => {
  it('gives a limited queue its local limit minus the jobs of it held (running or waiting)', () => {
    const s = slots({ concurrency: 8, queueLimits: new Map([['serial', 3]]) });
    expect(s.wantedIn('serial')).toBe(3);
    startMany(s, 1, 't', 'serial');
    s.hold([job('t', 'serial')]);
    expect(s.wantedIn('serial')).toBe(1);
    startMany(s, 5, 't', 'other');
    expect(s.wantedIn('serial')).toBe(1);
  });

  it('never gives a locally limited queue more than the free slots, nor the prefetch', () => {
    const s = slots({ concurrency: 4, prefetch: 50, queueLimits: new Map([['serial', 10]]) });
    learn(s, 'fast', 1);
    startMany(s, 3, 'fast');
    expect(s.wanted()).toBeGreaterThan(1); // prefetch in effect for the common claim
    expect(s.wantedIn('serial')).toBe(1);
    startMany(s, 1, 'fast');
    expect(s.wantedIn('serial')).toBe(0);
  });

  it('gives a queue without a local limit what any claim may ask, prefetch included (the database holds its limits)', () => {
    // The clock held still: the prefetch allowance follows the time since each start,
    // and a loaded machine (CI) let two calls a millisecond apart see 34 and 40.
    const at = performance.now();
    const clock = vi.spyOn(performance, 'now').mockReturnValue(at);
    try {
      const s = slots({ concurrency: 4, prefetch: 50 });
      learn(s, 'fast', 1);
      startMany(s, 4, 'fast');
      expect(s.wantedIn('grouped')).toBe(s.wanted());
      expect(s.wantedIn('grouped')).toBeGreaterThan(0); // every slot taken: only the prefetch
    } finally {
      clock.mockRestore();
    }
  });
});
