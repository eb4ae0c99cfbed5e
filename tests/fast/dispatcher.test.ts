/**
 * Dispatcher: holding the start of jobs claimed ahead while the worker re-reads
 * its queue settings after a control message (a pause or a lowered limit).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { JobRow } from '../../src/job.js';
import { Completer } from '../../src/worker/completer.js';
import { Dispatcher } from '../../src/worker/dispatcher.js';
import { ABORTED_HANDLER_GRACE_MS } from '../../src/worker/run.js';
import { ProgressWriter } from '../../src/worker/progress.js';
import { Slots } from '../../src/worker/slots.js';
import { MemoryDatabase } from '../helpers/memory-store.js';

function setup(
  started: string[],
  stale: (job: JobRow) => 'queue-changed' | undefined = () => undefined,
  resultAdded: () => void = () => {},
) {
  const db = new MemoryDatabase();
  const store = db.store('w1');
  const slots = new Slots({ concurrency: 2, prefetch: 0, queueLimits: new Map() });
  const quiet = { emit: () => {}, resultAdded, slotFreed: () => {}, dueAt: () => {}, error: () => {}, writeError: () => {} };
  const completer = new Completer(
    store,
    { backoff: { baseMs: 1_000, maxMs: 1_000, shape: 'fixed' }, maxResultBytes: 1_000, visibilityTimeoutMs: 30_000 },
    quiet,
  );
  const task = {
    handler: (_payload: unknown, ctx: { job: { id: string } }) => {
      started.push(ctx.job.id);
      return new Promise<void>(() => {});
    },
    timeoutMs: undefined,
    maxAttempts: undefined,
    backoff: undefined,
  };
  const dispatcher = new Dispatcher(
    slots,
    completer,
    new ProgressWriter(store, 1_000, () => {}),
    { tasks: new Map([['t', task]]), maxResultBytes: 1_000, visibilityTimeoutMs: 30_000, lateClaimMs: 17_500 },
    {
      emit: (event, ...args) => void events.push([event, ...args]),
      accepting: () => true,
      finished: () => {},
      stale,
      error: () => {},
    },
  );
  return { db, store, dispatcher };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));
let events: unknown[][] = [];

describe('Dispatcher: held starts', () => {
  it('starts no claimed job while starts are held, and all of them once the last hold is released', async () => {
    const started: string[] = [];
    const { db, store, dispatcher } = setup(started);
    db.addMany(2, 't');
    const jobs = await store.claim(2);
    dispatcher.holdStarts();
    dispatcher.holdStarts(); // a second control message while the first re-read is out
    dispatcher.claimed(jobs);
    await settle();
    expect(started).toEqual([]);
    dispatcher.releaseStarts();
    await settle();
    expect(started).toEqual([]);
    dispatcher.releaseStarts();
    await settle();
    expect(started).toEqual(jobs.map((j) => j.id));
    // A release without a hold changes nothing.
    dispatcher.releaseStarts();
    expect(started).toHaveLength(2);
  });

  it('hands back, unstarted, the jobs a claim brings of a queue paused while it was out', async () => {
    events = [];
    const started: string[] = [];
    const { db, store, dispatcher } = setup(started, (job) => (job.queue === 'paused' ? 'queue-changed' : undefined));
    const [gone] = db.addMany(1, 't', { queue: 'paused' });
    const [kept] = db.addMany(1, 't', { queue: 'open' });
    const jobs = await store.claim(2, ['t'], ['paused', 'open']);
    dispatcher.claimed(jobs);
    await settle();
    expect(started).toEqual([kept]);
    expect(db.job(gone!)).toMatchObject({ status: 'pending', attempts: 0 });
    const handedBack = events.find((e) => e[0] === 'jobs:handed-back');
    expect(handedBack?.[2]).toEqual({ reason: 'queue-changed' });
  });
});

describe('Dispatcher: cancels of jobs it does not hold', () => {
  it("a claim brings a job whose cancel of that attempt was heard meanwhile: handed back unstarted; a heartbeat's cancel is not kept (outside review 263)", async () => {
    events = [];
    const started: string[] = [];
    const { db, store, dispatcher } = setup(started);
    const [heard, beaten] = db.addMany(2, 't');
    const jobs = await store.claim(2);
    const attemptOf = (id: string) => jobs.find((j) => j.id === id)!.attempts;
    Object.assign(db.job(heard!), { status: 'cancelled', finished_at: new Date() }); // what cancel() writes
    dispatcher.cancel(heard!, attemptOf(heard!)); // a notification, the claim's reply still out
    dispatcher.cancel(beaten!); // a heartbeat's, naming no attempt: of a job held here, not this claim's
    dispatcher.claimed(jobs, 1_000);
    await settle();
    expect(started).toEqual([beaten]);
    // Its row cancelled, the hand-back changes nothing and tells nothing.
    await settle();
    expect(db.job(heard!).status).toBe('cancelled');
    expect(events.some((e) => e[0] === 'jobs:handed-back')).toBe(false);
  });
});

describe('Dispatcher: lost locks', () => {
  afterEach(() => void vi.useRealTimers());

  // Outside review 93: a handler that blocked the event loop past the renewal
  // timeout was aborted as unrenewed; its job, rescued meanwhile, was then told
  // lost at every heartbeat (and once more by its refused failure) until the
  // handler returned: 3-4 job:lock-lost events for one attempt.
  it('tells a run lost once, also after it was aborted as unrenewed, and records no result for it', async () => {
    vi.useFakeTimers();
    events = [];
    const started: string[] = [];
    let results = 0;
    const { db, store, dispatcher } = setup(started, undefined, () => results++);
    const [id] = db.addMany(1, 't');
    dispatcher.claimed(await store.claim(1));
    await vi.advanceTimersByTimeAsync(0);
    expect(started).toEqual([id]);
    dispatcher.unrenewed([id!], 3_000);
    db.job(id!).locked_by = 'w2'; // rescued and claimed elsewhere
    dispatcher.lockLost([id!]);
    dispatcher.lockLost([id!]);
    await vi.advanceTimersByTimeAsync(ABORTED_HANDLER_GRACE_MS + 100);
    dispatcher.lockLost([id!]);
    expect(events.filter((e) => e[0] === 'job:lock-lost')).toHaveLength(1);
    expect(results).toBe(0);
  });
});
