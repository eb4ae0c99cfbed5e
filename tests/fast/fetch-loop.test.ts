/**
 * FetchLoop: when a cycle goes out (wakes, full and short claims, the claim
 * threshold, the result flush), what it claims (batch size, room for limited
 * queues), and how it behaves when a cycle fails or the worker stops. The claim
 * target is a plain list of held jobs; the results come from the real Completer.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { JobRow } from '../../src/job.js';
import { Completer } from '../../src/worker/completer.js';
import type { ClaimTarget } from '../../src/worker/claim-target.js';
import { FetchLoop } from '../../src/worker/fetch-loop.js';
import type { ClaimPlan } from '../../src/worker/queue-state.js';
import { Run } from '../../src/worker/run.js';
import { MemoryDatabase, type MemoryStore } from '../helpers/memory-store.js';

const TASK = { handler: () => {}, timeoutMs: undefined, maxAttempts: undefined, backoff: undefined };

/** Holds what it is given, up to `slots` plus `prefetch`; local limits per queue like Slots. */
class Target implements ClaimTarget {
  held: JobRow[] = [];
  constructor(
    public slots: number,
    private readonly limits = new Map<string, number>(),
    public prefetch = 0,
  ) {}
  capacity(): number {
    return this.slots + this.prefetch;
  }
  wanted(): number {
    return Math.max(0, this.capacity() - this.held.length);
  }
  free(): number {
    return Math.max(0, this.slots - this.held.length);
  }
  wantedIn(queue: string): number {
    const free = this.slots - this.held.length;
    const limit = this.limits.get(queue);
    if (limit === undefined) return Math.max(0, free);
    return Math.max(0, Math.min(free, limit - this.held.filter((j) => j.queue === queue).length));
  }
  /** As the worker's: what it holds, and the jobs whose results wait to be written. */
  heldIds(): string[] {
    return [...this.held.map((j) => j.id), ...completer.ids()];
  }
  claimed(jobs: JobRow[]): void {
    this.held.push(...jobs);
  }
}

interface Setup {
  slots?: number;
  prefetch?: number;
  batchSize?: number;
  completionFlushMs?: number;
  pollIntervalMs?: number;
  heartbeatIntervalMs?: number;
  plan?: ClaimPlan;
  limits?: Record<string, number>;
}

let db: MemoryDatabase;
let target: Target;
let completer: Completer;
let loop: FetchLoop;
let errors: unknown[];
let completed: string[];

function setup(options: Setup = {}): void {
  const store = db.store('w1');
  target = new Target(options.slots ?? 4, new Map(Object.entries(options.limits ?? {})), options.prefetch ?? 0);
  completer = new Completer(
    store,
    { backoff: { baseMs: 1_000, maxMs: 1_000, shape: 'fixed' }, maxResultBytes: 1_000, visibilityTimeoutMs: 30_000 },
    {
      emit: (event, ...args) => {
        if (event === 'job:complete') completed.push((args[0] as JobRow).id);
      },
      resultAdded: () => loop.resultAdded(),
      slotFreed: () => loop.slotFreed(),
      dueAt: (at) => loop.wakeAt(at),
      error: (err) => void errors.push(err),
      writeError: (err) => void errors.push(err),
    },
  );
  const plan = options.plan ?? { plain: ['default'], limited: [], strict: [], noAhead: [] };
  loop = new FetchLoop(
    store,
    {
      tasks: ['t'],
      batchSize: options.batchSize ?? 100,
      completionFlushMs: options.completionFlushMs ?? 50,
      pollIntervalMs: options.pollIntervalMs ?? 3_600_000,
      wakeCooldownMs: 0,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 5_000,
    },
    target,
    completer,
    () => plan,
    (err) => void errors.push(err),
  );
}

/** The handler of a held job returned: its slot frees and its result waits in the completer. */
function finish(job: JobRow): void {
  target.held = target.held.filter((j) => j !== job);
  completer.record(new Run(job, TASK), { kind: 'completed', value: job.id }, 1);
}

/**
 * Lets every cycle that is due now run. A setImmediate() made while fake timers
 * run is due 1 ms later (@sinonjs/fake-timers), so each hop of the loop costs 1 ms here.
 */
async function settle(): Promise<void> {
  await vi.advanceTimersByTimeAsync(20);
}

function cycles(): number {
  return db.log.filter((e) => e.op === 'cycle').length;
}

function ids(jobs: JobRow[]): string[] {
  return jobs.map((j) => j.id);
}

beforeEach(() => {
  vi.useFakeTimers();
  db = new MemoryDatabase();
  errors = [];
  completed = [];
});
afterEach(async () => {
  await loop.stopClaiming();
  vi.restoreAllMocks();
  vi.useRealTimers();
});

describe('FetchLoop: claiming', () => {
  it('claims at start as many due jobs as the target wants, in priority and id order', async () => {
    db.addMany(6, 't');
    const urgent = db.add('t', { priority: 10 });
    setup({ slots: 4 });
    loop.start();
    await settle();
    expect(ids(target.held)).toEqual([urgent, '1', '2', '3']);
    expect(db.count('processing')).toBe(4);
    expect(db.job('1').locked_by).toBe('w1');
  });

  it('claims nothing for a wake, notification or due time before start()', async () => {
    // Review 67: LISTEN in place while stop() waited for the start woke the loop,
    // and a worker being stopped claimed and ran a job.
    db.addMany(3, 't');
    setup({ slots: 4 });
    loop.wake();
    loop.notified(Date.now());
    loop.wakeAt(Date.now());
    await settle();
    expect(target.held).toEqual([]);
    expect(db.count('processing')).toBe(0);
    expect(loop.stats.claims).toBe(0);
  });

  it('starts at once only as many claimed jobs as there are free slots; the rest are claimed ahead', async () => {
    db.addMany(10, 't');
    setup({ slots: 2, prefetch: 3 });
    loop.start();
    await settle();
    expect(target.held.map((j) => j.started_at !== null)).toEqual([true, true, false, false, false]);
    expect(['1', '2', '3', '4', '5'].map((id) => db.job(id).started_at !== null)).toEqual([true, true, false, false, false]);
  });

  it('writes the start of a job claimed ahead with the next cycle', async () => {
    db.addMany(3, 't');
    setup({ slots: 1, prefetch: 2 });
    loop.start();
    await settle();
    const ahead = target.held[1]!;
    expect(db.job(ahead.id).started_at).toBeNull();
    finish(target.held[0]!);
    completer.markStarted(ahead.id, Date.now()); // it took the freed slot
    await vi.advanceTimersByTimeAsync(60);
    expect(db.job(ahead.id).started_at).not.toBeNull();
    expect(db.job('1').status).toBe('completed');
  });

  it('after a full claim claims again at once, at most batchSize per cycle, until a claim comes back short', async () => {
    db.addMany(30, 't');
    setup({ slots: 100, batchSize: 10 });
    loop.start();
    await settle();
    expect(target.held).toHaveLength(30);
    expect(loop.stats).toEqual({ cycles: 4, claims: 4, emptyClaims: 1, claimed: 30, overlapped: 0, orphansReleased: 0 });
  });

  it('while a backlog drains, sends a second cycle beside the first (never a third), asking only for what the first did not', async () => {
    db.addMany(100, 't');
    setup({ slots: 10, prefetch: 30, batchSize: 20 });
    loop.start();
    await settle();
    // Two full claims of a batch each, one after the other: a backlog, and all 40 held.
    expect(target.held).toHaveLength(40);
    expect(cycles()).toBe(2);
    const first = db.holdNext('cycle', 'reply');
    const second = db.holdNext('cycle', 'reply');
    const third = db.holdNext('cycle', 'reply');
    for (const job of target.held.splice(0, 30)) finish(job);
    await settle();
    // 30 wanted: one cycle asks for a batch (20), the other for the remaining 10; no third.
    expect(cycles()).toBe(4);
    expect(loop.stats.overlapped).toBe(1);
    first();
    second();
    await settle();
    expect(target.held).toHaveLength(40);
    expect(db.count('processing')).toBe(40);
    expect(db.count('completed')).toBe(30);
    third();
    await settle();
  });

  it('after a wake-up without a backlog, claims with one cycle only', async () => {
    db.addMany(3, 't');
    setup({ slots: 10, prefetch: 100, batchSize: 20 });
    const reply = db.holdNext('cycle', 'reply');
    loop.start();
    await settle();
    loop.wake();
    await settle();
    expect(cycles()).toBe(1);
    reply();
    await settle();
    expect(target.held).toHaveLength(3);
    expect(loop.stats.overlapped).toBe(0);
  });

  it('after a short claim asks nothing more until woken', async () => {
    db.addMany(3, 't');
    setup({ slots: 10 });
    loop.start();
    await settle();
    expect(target.held).toHaveLength(3);
    db.addMany(5, 't');
    await vi.advanceTimersByTimeAsync(60_000);
    expect(db.count('pending')).toBe(5);
    expect(cycles()).toBe(1);
    loop.wake();
    await settle();
    expect(target.held).toHaveLength(8);
  });

  it('polls: a poll tick wakes it (the interval jittered by ±25%)', async () => {
    setup({ slots: 10, pollIntervalMs: 1_000 });
    loop.start();
    await settle();
    db.addMany(2, 't');
    await vi.advanceTimersByTimeAsync(729); // 749 ms after start
    expect(target.held).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(511);
    expect(target.held).toHaveLength(2);
  });

  it('does not lose a wake that arrives while a claim is in flight', async () => {
    setup({ slots: 10 });
    const reply = db.holdNext('cycle', 'reply');
    loop.start();
    await settle(); // the claim ran (nothing due), its reply is on the way
    db.add('t');
    loop.wake();
    reply();
    await settle();
    expect(target.held).toHaveLength(1);
  });

  it('outside a backlog never sends two cycles at once: requests during one fold into the next', async () => {
    db.addMany(2, 't');
    setup({ slots: 10 });
    const open = db.holdNext('cycle');
    loop.start();
    await settle();
    for (let i = 0; i < 5; i++) loop.wake();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(cycles()).toBe(1);
    open();
    await settle();
    expect(cycles()).toBe(2);
    expect(target.held).toHaveLength(2);
  });

  it('wakes at a known due time and claims the job then, not earlier, without a poll', async () => {
    setup({ slots: 10 });
    loop.start();
    await settle();
    const later = db.add('t', { delayMs: 5_000 });
    const sooner = db.add('t', { delayMs: 2_000 });
    loop.wakeAt(db.job(later).run_at.getTime());
    loop.wakeAt(db.job(sooner).run_at.getTime());
    await vi.advanceTimersByTimeAsync(2_000);
    expect(target.held).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(5);
    expect(ids(target.held)).toEqual([sooner]);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(ids(target.held)).toEqual([sooner, later]);
  });

  it('keeps room in the common claim for each limited queue', async () => {
    db.addMany(10, 't', { queue: 'bulk' });
    db.addMany(10, 't', { queue: 'serial' });
    setup({
      slots: 4,
      plan: { plain: ['bulk'], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] },
      limits: { serial: 5 },
    });
    loop.start();
    await settle();
    expect(target.held.map((j) => j.queue)).toEqual(['bulk', 'bulk', 'bulk', 'serial']);
  });

  // Outside review 133: an empty limited queue cost short plain jobs four fifths of their rate.
  it('serves plain queues as if alone while the limited queues are empty, until a wake that may concern them', async () => {
    db.setQueue('serial', { limit: 1 });
    db.addMany(40, 't', { queue: 'bulk' });
    setup({ slots: 4, plan: { plain: ['bulk'], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    loop.start();
    await settle();
    const limitedClaims = () => db.log.filter((e) => e.op === 'claimLimited').length;
    expect(limitedClaims()).toBe(1);
    expect(db.log.filter((e) => e.op === 'hasDueJobs')).toHaveLength(1);
    for (let round = 0; round < 3; round++) {
      for (const job of [...target.held]) finish(job);
      await settle();
      // Every slot to the plain queue, no limited claim.
      expect(target.held.map((j) => j.queue)).toEqual(['bulk', 'bulk', 'bulk', 'bulk']);
    }
    expect(limitedClaims()).toBe(1);
    // A plain queue's notification leaves them quiet; one for the limited queue does not.
    loop.notified(Date.now(), 'bulk');
    finish(target.held[0]!);
    await settle();
    expect(limitedClaims()).toBe(1);
    const [serial] = db.addMany(1, 't', { queue: 'serial' });
    loop.notified(Date.now(), 'serial');
    finish(target.held[0]!);
    await settle();
    expect(limitedClaims()).toBe(2);
    expect(ids(target.held.filter((j) => j.queue === 'serial'))).toEqual([serial]);
  });

  it('is not quiet while a limit holds due jobs of a limited queue back', async () => {
    db.setQueue('serial', { limit: 1 });
    db.addMany(40, 't', { queue: 'bulk' });
    db.addMany(2, 't', { queue: 'serial' });
    await db.store('w2').claimLimited('serial', ['t'], 1); // running in another worker: at its limit
    setup({ slots: 4, plan: { plain: ['bulk'], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    loop.start();
    await settle();
    for (const job of [...target.held]) finish(job);
    await settle();
    // Its claim still sent with each refill; asked for due jobs once per stir: the first
    // empty round, then the looks it schedules (the first within 25 ms, then doubling:
    // at most two more in these 40 ms), not once per refill.
    const claimsSent = db.log.filter((e) => e.op === 'claimLimited').length;
    const dueAsked = db.log.filter((e) => e.op === 'hasDueJobs').length;
    expect(claimsSent).toBeGreaterThanOrEqual(2);
    expect(dueAsked).toBeGreaterThanOrEqual(1);
    expect(dueAsked).toBeLessThanOrEqual(3);
  });

  it('claims a limited queue beside the write of its finished jobs, which it counts as no longer running', async () => {
    db.setQueue('serial', { limit: 1 });
    const [first, second] = db.addMany(2, 't', { queue: 'serial' });
    setup({ slots: 4, plan: { plain: [], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    loop.start();
    await settle();
    expect(ids(target.held)).toEqual([first]);
    const before = cycles();
    // The write stays in flight: the claim must not wait for it.
    const write = db.holdNext('cycle');
    finish(target.held[0]!);
    loop.wake(); // as the worker does when a job of a limited queue ends
    await settle();
    expect(db.job(first!).status).toBe('processing');
    expect(ids(target.held)).toEqual([second]);
    write();
    await settle();
    expect(cycles()).toBe(before + 1);
    expect(db.job(first!).status).toBe('completed');
  });

  it('with plain queues as well, claims the limited queues only once the write (and its claim) are back', async () => {
    db.setQueue('serial', { limit: 1 });
    db.addMany(1, 't', { queue: 'bulk' });
    const [first, second] = db.addMany(2, 't', { queue: 'serial' });
    setup({ slots: 4, plan: { plain: ['bulk'], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    loop.start();
    await settle();
    expect(ids(target.held.filter((j) => j.queue === 'serial'))).toEqual([first]);
    const write = db.holdNext('cycle');
    const limitedBefore = db.log.filter((e) => e.op === 'claimLimited').length;
    finish(target.held.find((j) => j.id === first)!);
    loop.wake();
    await settle();
    expect(db.log.filter((e) => e.op === 'claimLimited')).toHaveLength(limitedBefore);
    write();
    await settle();
    expect(db.job(first!).status).toBe('completed');
    expect(ids(target.held.filter((j) => j.queue === 'serial'))).toEqual([second]);
  });

  it('refills a freed slot of a strict limited queue at once while a backlog drains (no batching, no flush wait)', async () => {
    for (const strict of [true, false]) {
      db = new MemoryDatabase();
      db.setQueue('groups', { limit: 8 });
      db.addMany(20, 't', { queue: 'groups' });
      setup({
        slots: 8,
        plan: { plain: [], limited: ['groups'], strict: strict ? ['groups'] : [], noAhead: strict ? ['groups'] : [] },
      });
      loop.start();
      await settle();
      expect(target.held).toHaveLength(8); // a full claim: a backlog drains
      finish(target.held[0]!);
      loop.wake();
      await vi.advanceTimersByTimeAsync(5); // well under completionFlushMs (50)
      // Not strict, one free slot is under the batch threshold (2 of 8) and waits.
      expect(target.held).toHaveLength(strict ? 8 : 7);
      await loop.stopClaiming();
    }
  });

  it('with limited queues alone and nothing to write, a wake sends claim_queue() only (no empty common claim), counted as a claim', async () => {
    db.setQueue('serial', { limit: 1 });
    setup({ slots: 4, plan: { plain: [], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    loop.start();
    await settle();
    const [job] = db.addMany(1, 't', { queue: 'serial' });
    loop.wake(); // as a notification does
    await settle();
    expect(ids(target.held)).toEqual([job]);
    expect(cycles()).toBe(0);
    expect(db.log.filter((e) => e.op === 'claimLimited')).toHaveLength(2);
    expect(loop.stats).toMatchObject({ claims: 2, claimed: 1, emptyClaims: 1 });
  });

  it('with limited queues alone, sends nothing more while their claim is out, and claims again once it is back (review 70)', async () => {
    db.setQueue('serial', { limit: 1 });
    setup({ slots: 4, plan: { plain: [], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    const release = db.holdNext('claimLimited');
    loop.start();
    await settle();
    loop.wake();
    await settle();
    // Before: each hop of the loop started another cycle that sent nothing, counted as sent.
    expect(loop.stats.cycles).toBe(0);
    expect(loop.stats.overlapped).toBe(0);
    const [job] = db.addMany(1, 't', { queue: 'serial' });
    release();
    await settle();
    expect(ids(target.held)).toEqual([job]);
    expect(loop.stats).toMatchObject({ cycles: 2, claims: 2, claimed: 1, overlapped: 0 });
  });

  it('counts each statement it sends, one per limited queue, and the jobs each gave, beside plain queues too (review 71)', async () => {
    db.setQueue('serial', { limit: 1 });
    db.setQueue('serial2', { limit: 1 });
    const limited = ['serial', 'serial2'];
    setup({ slots: 4, plan: { plain: ['bulk'], limited, strict: limited, noAhead: limited } });
    for (const queue of ['bulk', 'serial', 'serial2']) db.addMany(1, 't', { queue });
    loop.start();
    await settle();
    expect(target.held).toHaveLength(3);
    const sent = db.log.filter((e) => e.op === 'cycle' || e.op === 'claimLimited').length;
    expect(loop.stats).toMatchObject({ cycles: sent, claimed: 3 });
  });

  it("reports a failing limited claim without undoing the cycle's writes or its common claim", async () => {
    db.addMany(2, 't', { queue: 'bulk' });
    db.addMany(2, 't', { queue: 'serial' });
    setup({ slots: 4, plan: { plain: ['bulk'], limited: ['serial'], strict: ['serial'], noAhead: ['serial'] } });
    db.failNext('claimLimited');
    loop.start();
    await settle();
    expect(errors).toHaveLength(1);
    expect(target.held.map((j) => j.queue)).toEqual(['bulk', 'bulk']);
    expect(db.count('pending')).toBe(2);
  });
});

describe('FetchLoop: writing results', () => {
  it('holds results back for completionFlushMs when no claim is wanted, then writes them alone', async () => {
    db.addMany(2, 't');
    setup({ slots: 4 });
    loop.start();
    await settle(); // short claim: the backlog is empty
    db.addMany(3, 't'); // enqueued without a wake
    finish(target.held[0]!);
    await vi.advanceTimersByTimeAsync(49);
    expect(completed).toEqual([]);
    await vi.advanceTimersByTimeAsync(5);
    expect(completed).toEqual(['1']);
    expect(db.job('1').status).toBe('completed');
    expect(db.count('pending')).toBe(3);
  });

  it('writes at once when a batch of results is full', async () => {
    db.addMany(3, 't');
    setup({ slots: 4, batchSize: 3 }); // the claim comes back short: no claim is wanted
    loop.start();
    await settle();
    for (const job of [...target.held]) finish(job);
    await settle();
    expect(completed).toEqual(['1', '2', '3']);
  });

  it('writes results of jobs that finish in the same turn in one statement', async () => {
    db.addMany(8, 't');
    setup({ slots: 8 });
    loop.start();
    await settle();
    const before = cycles();
    for (const job of [...target.held]) finish(job);
    await vi.advanceTimersByTimeAsync(100);
    expect(completed).toHaveLength(8);
    expect(cycles()).toBe(before + 1);
  });

  it('waits until a quarter of the slots are free before claiming, then claims them together with the writes', async () => {
    db.addMany(20, 't');
    setup({ slots: 8 }); // threshold: 2
    loop.start();
    await settle();
    const before = cycles();
    finish(target.held[0]!);
    await vi.advanceTimersByTimeAsync(10);
    expect(cycles()).toBe(before);
    finish(target.held[0]!);
    await settle();
    expect(cycles()).toBe(before + 1);
    expect(completed).toEqual(['1', '2']);
    expect(target.held).toHaveLength(8);
  });

  it('a write that goes out anyway takes a claim along, even below the threshold', async () => {
    db.addMany(20, 't');
    setup({ slots: 8 });
    loop.start();
    await settle();
    finish(target.held[0]!);
    await vi.advanceTimersByTimeAsync(55); // the flush
    expect(completed).toEqual(['1']);
    expect(target.held).toHaveLength(8);
    expect(db.job('9').status).toBe('processing');
  });

  // Up to threshold − 1 free slots are only filled when a result write goes out. A
  // worker whose other slots run long jobs then ignores due work: the poll (and
  // any wake) finds wanted() below the threshold and sends nothing.
  it('fills a free slot below the claim threshold on a poll tick when jobs are due', async () => {
    db.addMany(8, 't');
    setup({ slots: 8, pollIntervalMs: 1_000 });
    loop.start();
    await settle();
    target.held.pop(); // the job snoozed, was cancelled or lost its lock: no result to write
    const waiting = db.add('t');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(db.job(waiting).status, 'a job due for 10 s with a slot free').toBe('processing');
  });
});

describe('FetchLoop: pick-up after a wake', () => {
  it('claims alone when a few results wait, and writes them on their flush timer', async () => {
    db.addMany(1, 't');
    setup({ slots: 4, completionFlushMs: 50 });
    loop.start();
    await settle();
    finish(target.held[0]!); // one result waits for its flush
    const sent: { completed: number; limit: number }[] = [];
    const proto = Object.getPrototypeOf(db.store('w1')) as MemoryStore;
    const cycle = proto.cycle;
    vi.spyOn(proto, 'cycle').mockImplementation(function (this: MemoryStore, r) {
      sent.push({ completed: r.completed.length, limit: r.limit });
      return cycle.call(this, r);
    });
    const fresh = db.add('t');
    loop.wake(); // the notification of a new job
    await settle();
    expect(target.held.map((j) => j.id)).toEqual([fresh]);
    expect(sent[0]).toEqual({ completed: 0, limit: expect.any(Number) }); // the claim went without the result
    expect(completed).toEqual([]);
    await vi.advanceTimersByTimeAsync(60);
    expect(completed).toEqual(['1']); // written by its flush timer
    expect(db.job('1').status).toBe('completed');
  });
});

describe('FetchLoop: failures', () => {
  it("gives a failed cycle's results back and writes them after its backoff (25 ms with this draw)", async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    db.addMany(1, 't');
    setup({ slots: 1 });
    loop.start();
    await settle();
    db.failNext('cycle', new Error('connection lost'));
    finish(target.held[0]!);
    await vi.advanceTimersByTimeAsync(0); // the cycle goes out now, and fails
    expect(errors).toEqual([new Error('connection lost')]);
    expect(completer.size).toBe(1);
    expect(db.job('1').status).toBe('processing');
    await vi.advanceTimersByTimeAsync(24);
    expect(completed).toEqual([]);
    await vi.advanceTimersByTimeAsync(5);
    expect(completed).toEqual(['1']);
    expect(db.job('1').status).toBe('completed');
  });

  it("sends the failed cycle's results at once when another part's statement is answered (a heartbeat), not after the backoff", async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    db.addMany(1, 't');
    setup({ slots: 1 });
    loop.start();
    await settle();
    for (let i = 0; i < 5; i++) db.failNext('cycle', new Error('statement timeout'));
    finish(target.held[0]!);
    // Five failures in a row: the next try is 25 * 2^5 = 800 ms away.
    await vi.advanceTimersByTimeAsync(25 + 50 + 100 + 200 + 10);
    expect(errors).toHaveLength(5);
    expect(completed).toEqual([]);
    loop.answered();
    await vi.advanceTimersByTimeAsync(2);
    expect(completed).toEqual(['1']);
    expect(db.job('1').status).toBe('completed');
  });

  it('backs off longer after each failure in a row, and starts over after a success', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0);
    setup({ slots: 4 });
    for (let i = 0; i < 3; i++) db.failNext('cycle');
    loop.start();
    await settle();
    const at: number[] = [];
    for (let ms = 0; ms < 400; ms++) {
      const n = cycles();
      await vi.advanceTimersByTimeAsync(1);
      if (cycles() > n) at.push(Date.now());
    }
    expect(at).toHaveLength(3); // the 4th cycle succeeds
    // 25, 50, then 100 ms apart (+1 ms per loop hop under fake timers).
    const gaps = [at[1]! - at[0]!, at[2]! - at[1]!];
    expect(gaps[0]).toBeGreaterThanOrEqual(50);
    expect(gaps[0]).toBeLessThanOrEqual(52);
    expect(gaps[1]).toBeGreaterThanOrEqual(100);
    expect(gaps[1]).toBeLessThanOrEqual(102);
    db.failNext('cycle');
    db.add('t');
    loop.wake();
    await vi.advanceTimersByTimeAsync(0); // fails
    await vi.advanceTimersByTimeAsync(24);
    expect(target.held).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(5); // 25 ms again, not 200
    expect(target.held).toHaveLength(1);
  });

  it('a failed claim is tried again without a wake', async () => {
    db.addMany(3, 't');
    setup({ slots: 4 });
    db.failNext('cycle');
    loop.start();
    await vi.advanceTimersByTimeAsync(100);
    expect(target.held).toHaveLength(3);
  });
});

describe('FetchLoop: stopping', () => {
  it('stopClaiming() resolves once the claim in flight has handed its jobs over, and claims nothing after', async () => {
    db.addMany(10, 't');
    setup({ slots: 4, pollIntervalMs: 1_000 });
    const open = db.holdNext('cycle');
    loop.start();
    await settle();
    let stopped = false;
    void loop.stopClaiming().then(() => (stopped = target.held.length > 0));
    await vi.advanceTimersByTimeAsync(100);
    expect(stopped).toBe(false);
    open();
    await settle();
    expect(stopped).toBe(true);
    target.held = [];
    loop.wake();
    loop.wakeAt(Date.now() + 10);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(db.count('processing')).toBe(4);
  });

  it('still writes results after stopClaiming(), without claiming along', async () => {
    db.addMany(10, 't');
    setup({ slots: 4 });
    loop.start();
    await settle();
    await loop.stopClaiming();
    for (const job of [...target.held]) finish(job);
    await vi.advanceTimersByTimeAsync(60);
    expect(db.count('completed')).toBe(4);
    expect(db.count('processing')).toBe(0);
  });

  it('drain() writes every buffered result, retrying while the database fails', async () => {
    db.addMany(2, 't');
    setup({ slots: 2 });
    loop.start();
    await settle();
    await loop.stopClaiming();
    db.failNext('cycle');
    db.failNext('cycle');
    for (const job of [...target.held]) finish(job);
    let drained = false;
    void loop.drain(Date.now() + 10_000).then(() => (drained = true));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(drained).toBe(true);
    expect(db.count('completed')).toBe(2);
    expect(completed).toEqual(['1', '2']);
  });

  it('drain() waits for the cycle in flight, whose results it then does not write twice', async () => {
    db.addMany(1, 't');
    setup({ slots: 1 });
    loop.start();
    await settle();
    const open = db.holdNext('cycle');
    finish(target.held[0]!);
    await settle();
    let drained = false;
    void loop.drain(Date.now() + 10_000).then(() => (drained = true));
    await vi.advanceTimersByTimeAsync(100);
    expect(drained).toBe(false);
    open();
    await settle();
    expect(drained).toBe(true);
    expect(completed).toEqual(['1']);
  });

  // A result whose row another session held goes to the Completer's deferred list
  // (retried 250 ms later), which `size` does not count: drain() returns at once and
  // the worker closes its connections with that result never written.
  it('drain() writes a result whose row another session held for a moment, before its deadline', async () => {
    db.addMany(1, 't');
    setup({ slots: 1 });
    loop.start();
    await settle();
    await loop.stopClaiming();
    const unlock = db.lockJob('1');
    finish(target.held[0]!);
    setTimeout(unlock, 100);
    let drained = false;
    void loop.drain(Date.now() + 5_000).then(async () => {
      await completer.settled(); // what the worker's stop() does next
      drained = true;
    });
    await vi.advanceTimersByTimeAsync(5_500);
    expect(drained).toBe(true);
    expect(db.job('1').status, 'the job once stop() has written every result').toBe('completed');
  });

  it('drain() gives up at its deadline, keeping the results it could not write', async () => {
    db.addMany(1, 't');
    setup({ slots: 1 });
    loop.start();
    await settle();
    await loop.stopClaiming();
    for (let i = 0; i < 1_000; i++) db.failNext('cycle');
    finish(target.held[0]!);
    let drained = false;
    void loop.drain(Date.now() + 1_000).then(() => (drained = true));
    await vi.advanceTimersByTimeAsync(900);
    expect(drained).toBe(false);
    await vi.advanceTimersByTimeAsync(400);
    expect(drained).toBe(true);
    expect(completer.size).toBe(1);
    expect(db.job('1').status).toBe('processing');
  });
});
