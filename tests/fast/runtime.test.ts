/**
 * The roles together (Slots, Completer, FetchLoop, QueueState, Dispatcher,
 * Heartbeat, wired as worker.ts wires them: tests/helpers/fast-runtime.ts) over
 * one in-memory database shared by several workers: the runtime's promises,
 * checked on the jobs' final state and the events.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Snooze } from '../../src/errors.js';
import type { JobContext, JobRow } from '../../src/job.js';
import { FastWorker, type FastWorkerOptions, sleep } from '../helpers/fast-runtime.js';
import { MemoryDatabase } from '../helpers/memory-store.js';

/** Far longer than any test: only wake-ups the worker arranges itself claim. */
const NO_POLL = 3_600_000;
const HOUR = 3_600_000;

let db: MemoryDatabase;
let workers: FastWorker[];

async function start(id: string, options: FastWorkerOptions): Promise<FastWorker> {
  const worker = new FastWorker(db, id, options);
  workers.push(worker);
  await worker.start();
  return worker;
}

function cycles(): number {
  return db.log.filter((e) => e.op === 'cycle').length;
}

/** Counts the handlers of each job running at once, and of each queue. */
class Tracker {
  readonly runs = new Map<string, number>();
  readonly attempts = new Map<string, number[]>();
  readonly order: string[] = [];
  overlaps = 0;
  maxPerQueue = new Map<string, number>();
  private readonly running = new Map<string, string>();

  begin(ctx: JobContext): void {
    const { job } = ctx;
    if (this.running.has(job.id)) this.overlaps++;
    this.running.set(job.id, job.queue);
    this.runs.set(job.id, (this.runs.get(job.id) ?? 0) + 1);
    this.attempts.set(job.id, [...(this.attempts.get(job.id) ?? []), ctx.attempt]);
    this.order.push(job.id);
    const inQueue = [...this.running.values()].filter((q) => q === job.queue).length;
    this.maxPerQueue.set(job.queue, Math.max(this.maxPerQueue.get(job.queue) ?? 0, inQueue));
  }

  end(job: JobRow): void {
    this.running.delete(job.id);
  }

  /** A handler that runs `ms` (fake time). */
  handler(ms: (job: JobRow) => number) {
    return async (_payload: unknown, ctx: JobContext) => {
      this.begin(ctx);
      try {
        await sleep(ms(ctx.job));
      } finally {
        this.end(ctx.job);
      }
      return { id: ctx.job.id };
    };
  }
}

beforeEach(() => {
  vi.useFakeTimers({ now: Date.UTC(2030, 0, 1) });
  db = new MemoryDatabase();
  workers = [];
});
afterEach(async () => {
  for (const worker of workers) await worker.halt();
  vi.useRealTimers();
});

/** Sleeps `ms`, or rejects as soon as `signal` fires (a handler that honours its signal). */
function abortable(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

describe('runtime: several workers, one database', () => {
  it('runs every job exactly once, never two workers at a time', async () => {
    const ids = db.addMany(150, 't');
    const tracker = new Tracker();
    const options = { tasks: { t: tracker.handler((job) => 1 + (Number(job.id) % 7)) }, concurrency: 4, pollIntervalMs: 50 };
    const all = [await start('A', options), await start('B', options), await start('C', options)];
    await vi.advanceTimersByTimeAsync(5_000);

    expect(db.count('completed')).toBe(150);
    expect(tracker.overlaps).toBe(0);
    expect(ids.filter((id) => tracker.runs.get(id) !== 1)).toEqual([]);
    const claimedBy = all.flatMap((w) => w.ids('jobs:claimed'));
    expect(claimedBy.sort()).toEqual([...ids].sort());
    const completedEvents = all.flatMap((w) => w.ids('job:complete'));
    expect(completedEvents.sort()).toEqual([...ids].sort());
    expect(all.every((w) => w.ids('job:complete').length > 0)).toBe(true); // all took part
    expect([...db.jobs.values()].every((j) => j.attempts === 1 && (j.result as { id: string }).id === j.id)).toBe(true);
  });

  it('runs every job exactly once with prefetch and mixed fast and slow tasks', async () => {
    db.addMany(50, 'fast');
    db.addMany(10, 'slow');
    db.addMany(50, 'fast');
    const tracker = new Tracker();
    const tasks = { fast: tracker.handler(() => 2), slow: tracker.handler(() => 800) };
    const all = [
      await start('A', { tasks, concurrency: 3, prefetch: 10, pollIntervalMs: 50 }),
      await start('B', { tasks, concurrency: 3, prefetch: 10, pollIntervalMs: 50 }),
    ];
    await vi.advanceTimersByTimeAsync(10_000);

    expect(db.count('completed')).toBe(110);
    expect(tracker.overlaps).toBe(0);
    expect([...tracker.runs.values()].every((n) => n === 1)).toBe(true);
    // Jobs handed back (claimed ahead behind a slow one) and claimed again ran once and spent one attempt.
    expect(all.flatMap((w) => w.ids('jobs:handed-back')).length).toBeGreaterThan(0);
    expect([...db.jobs.values()].every((j) => j.attempts === 1)).toBe(true);
    expect(all.flatMap((w) => w.ids('job:complete'))).toHaveLength(110);
  });

  it('a job rescued from a worker is completed once, by its new owner; the old result is dropped', async () => {
    const id = db.add('t');
    let runs = 0;
    const slowThenFast = async (_p: unknown, { job }: JobContext) => {
      runs++;
      await sleep(runs === 1 ? 5_000 : 10);
      return job.locked_by;
    };
    // A does not heartbeat in time (say, a long GC pause).
    const a = await start('A', {
      tasks: { t: slowThenFast },
      pollIntervalMs: NO_POLL,
      heartbeatIntervalMs: HOUR,
      lockRenewalTimeoutMs: 2 * HOUR,
    });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(db.rescue(1_000)).toEqual([id]);
    const b = await start('B', { tasks: { t: slowThenFast }, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(5_000);

    expect(db.job(id)).toMatchObject({ status: 'completed', result: 'B', attempts: 2 });
    expect(b.ids('job:complete')).toEqual([id]);
    expect(a.ids('job:complete')).toEqual([]);
    expect(a.ids('job:lock-lost')).toEqual([id]);
  });
});

describe('runtime: locks', () => {
  it('a worker cut off from the database aborts its handler before the rescuer can give the job to another', async () => {
    const id = db.add('t');
    const tracker = new Tracker();
    const handler = async (_p: unknown, ctx: JobContext) => {
      tracker.begin(ctx);
      try {
        await abortable(ctx.job.locked_by === 'A' ? HOUR : 10, ctx.signal);
      } finally {
        tracker.end(ctx.job);
      }
      return ctx.job.locked_by;
    };
    const options = { tasks: { t: handler }, heartbeatIntervalMs: 1_000, lockRenewalTimeoutMs: 3_000, pollIntervalMs: 100 };
    const a = await start('A', options);
    await vi.advanceTimersByTimeAsync(50);
    const heal = db.partition('A');
    const b = await start('B', options);
    // The maintenance leader rescues jobs whose lock is older than the visibility timeout.
    for (let t = 0; t < 8_000; t += 100) {
      await vi.advanceTimersByTimeAsync(100);
      db.rescue(4_000);
    }
    heal();
    await vi.advanceTimersByTimeAsync(3_000);
    expect(tracker.overlaps).toBe(0);
    expect(tracker.runs.get(id)).toBe(2);
    expect(db.job(id)).toMatchObject({ status: 'completed', result: 'B' });
    expect(b.ids('job:complete')).toEqual([id]);
    expect(a.ids('job:complete')).toEqual([]);
    expect(a.ids('job:fail')).toEqual([]); // its failure (unrenewed) was never written: the job is B's
  });

  // CI under load: the listing of a finished job whose row another session held
  // dropped while each try to write its result was out, and a rescue then took it.
  it('keeps a finished job listed as row-held while a try to write its result is out', async () => {
    const id = db.add('t');
    let finish = (): void => {};
    const handler = () => new Promise<string>((resolve) => (finish = () => resolve('done')));
    const a = await start('A', { tasks: { t: handler }, heartbeatIntervalMs: 1_000, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(50);
    const unlock = db.lockJob(id);
    finish();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(a.heartbeat.rowHeld()).toEqual([id]);
    const release = db.holdNext('cycle'); // the next try to write the result stays out
    await vi.advanceTimersByTimeAsync(2_000);
    expect(a.heartbeat.rowHeld()).toEqual([id]);
    release();
    unlock();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(db.job(id)).toMatchObject({ status: 'completed', result: 'done' });
    expect(a.heartbeat.rowHeld()).toEqual([]);
  });

  // Outside review 118: a claim sent into a stalled network, answered when it healed,
  // started jobs whose locks the worker dated from the send, and the watcher aborted
  // them at once, spending the attempts of jobs that had been pending all along.
  describe('a claim whose reply comes late', () => {
    // Polling finds the jobs handed back (the memory store sends no wake-ups).
    const options = { heartbeatIntervalMs: 1_000, lockRenewalTimeoutMs: 3_000, pollIntervalMs: 100 };

    async function claimAnsweredAfter(ms: number) {
      const ids = [db.add('t', { max_attempts: 1 }), db.add('t', { max_attempts: 1 })];
      const tracker = new Tracker();
      const open = db.holdNext('cycle', 'reply');
      const a = await start('A', { ...options, tasks: { t: tracker.handler(() => 10) } });
      await vi.advanceTimersByTimeAsync(ms);
      open();
      await vi.advanceTimersByTimeAsync(5_000);
      return { ids, a, tracker };
    }

    it('hands its jobs back unstarted, attempts not spent, when the next beat would come too late; they run once', async () => {
      // Renewal timeout 3 s less the 1 s interval: a reply after 2 s is too late.
      const { ids, a, tracker } = await claimAnsweredAfter(2_500);
      expect(a.events.filter((e) => e.event === 'jobs:handed-back').map((e) => e.args[1])).toEqual([{ reason: 'late-claim' }]);
      expect(a.ids('jobs:handed-back').sort()).toEqual([...ids].sort());
      for (const id of ids) expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 1 });
      expect(ids.map((id) => tracker.runs.get(id))).toEqual([1, 1]);
      expect(tracker.attempts.get(ids[0]!)).toEqual([1]);
      expect(a.ids('job:fail')).toEqual([]);
    });

    it('starts them as usual when it came sooner', async () => {
      const { ids, a, tracker } = await claimAnsweredAfter(1_500);
      expect(a.ids('jobs:handed-back')).toEqual([]);
      for (const id of ids) expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 1 });
      expect(ids.map((id) => tracker.runs.get(id))).toEqual([1, 1]);
    });
  });

  // Outside review 110: an outage longer than the renewal timeout spent the running
  // job's attempt, though the outage was Postgres restarting, not the job.
  describe('a job aborted while the database was unreachable', () => {
    const options = { heartbeatIntervalMs: 1_000, lockRenewalTimeoutMs: 3_000, pollIntervalMs: 100 };
    /** A job of `maxAttempts` whose first `hang` runs last until aborted; then it completes. */
    async function cutOff(maxAttempts: number, outage: (heal: () => void) => void, hang = 1) {
      const id = db.add('t', { max_attempts: maxAttempts });
      let runs = 0;
      const handler = async (_p: unknown, ctx: JobContext) => {
        runs++;
        if (runs <= hang) await abortable(HOUR, ctx.signal).catch(() => {});
        return 'done';
      };
      const a = await start('A', { ...options, tasks: { t: handler } });
      await vi.advanceTimersByTimeAsync(50);
      expect(runs).toBe(1);
      const heal = db.partition('A');
      await vi.advanceTimersByTimeAsync(5_000); // past the renewal timeout: aborted
      outage(heal);
      await vi.advanceTimersByTimeAsync(8_000); // the fetch loop's backoff is up to 5 s
      return { id, a, runs: () => runs };
    }

    /**
     * A job of one attempt whose handler (tracked) sleeps `ms(run)` whatever its
     * signal says, cut off from the database past the renewal timeout while Postgres restarts.
     */
    async function ignoringItsSignal(ms: (run: number) => number) {
      const id = db.add('t', { max_attempts: 1 });
      const tracker = new Tracker();
      const handler = async (_p: unknown, ctx: JobContext) => {
        tracker.begin(ctx);
        try {
          await sleep(ctx.job.id === id ? ms(tracker.runs.get(id)!) : 0);
        } finally {
          tracker.end(ctx.job);
        }
      };
      const a = await start('A', { ...options, tasks: { t: handler } }); // visibility timeout 30 s
      await vi.advanceTimersByTimeAsync(50);
      const heal = db.partition('A');
      await vi.advanceTimersByTimeAsync(5_000);
      db.restarted();
      heal();
      return { id, a, tracker };
    }

    it('gets its attempt back when Postgres restarted meanwhile, and runs again', async () => {
      const { id, a, runs } = await cutOff(1, (heal) => {
        db.restarted();
        heal();
      });
      expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 1 });
      expect(runs()).toBe(2);
      expect(a.ids('jobs:handed-back')).toEqual([id]);
      expect(a.ids('job:fail')).toEqual([]);
      expect(db.job(id).errors).toMatchObject([{ attempt: 1, refunded: true, message: expect.stringMatching(/restarted/) }]);
    });

    it('spends its attempt when Postgres did not restart (a partition)', async () => {
      const { id, a } = await cutOff(1, (heal) => heal());
      expect(db.job(id)).toMatchObject({ status: 'failed', attempts: 1, last_error: expect.stringMatching(/LOCK_LOST|renewed/) });
      expect(a.ids('jobs:handed-back')).toEqual([]);
      expect(a.ids('job:fail')).toEqual([id]);
    });

    it('is not refunded twice in a row, so a job that crashes Postgres still runs out of attempts', async () => {
      const { id, a } = await cutOff(
        2,
        (heal) => {
          db.restarted();
          heal();
        },
        2,
      );
      // Refunded once, running again (its second run hangs too): Postgres restarts again.
      expect(db.job(id)).toMatchObject({ status: 'processing', attempts: 1 });
      const heal = db.partition('A');
      await vi.advanceTimersByTimeAsync(5_000);
      db.restarted();
      heal();
      await vi.advanceTimersByTimeAsync(8_000);
      expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 2 });
      expect(a.ids('jobs:handed-back')).toEqual([id]);
      expect(a.ids('job:fail')).toEqual([id]);
      expect(db.job(id).errors.map((e) => e.message)).toEqual([
        expect.stringMatching(/restarted/),
        expect.stringMatching(/previous attempt was given back already, so this one counts/),
      ]);
    });

    // Outside review 112: left to the rescuer (its handler never stopped), the job was
    // given back by the orphan sweep, its attempt uncounted, and run again beside it.
    it('is left to the rescuer when its handler never stops, and no orphan sweep gives it back', async () => {
      const { id, a, tracker } = await ignoringItsSignal(() => HOUR);
      await vi.advanceTimersByTimeAsync(35_000); // past the wait for the handler
      expect(a.errors.map((e) => (e as Error).message)).toContainEqual(expect.stringMatching(/left processing for the rescuer/));
      // However late the rescue (outside review 114: a second outage put it off).
      await vi.advanceTimersByTimeAsync(60_000);
      // A claim whose reply is lost makes the orphan sweep due.
      db.loseNextReply('cycle');
      db.add('t');
      await vi.advanceTimersByTimeAsync(5_000);
      expect(db.log.some((e) => e.op === 'releaseOrphans')).toBe(true);
      expect(db.job(id)).toMatchObject({ status: 'processing', locked_by: 'A', attempts: 1 });
      expect(tracker.overlaps).toBe(0);
      expect(tracker.runs.get(id)).toBe(1);
    });

    // Outside review 111: a handler that ignored its signal ran beside its re-run.
    it('is handed back only once its handler has stopped', async () => {
      // The first run ignores its signal for 10 s.
      const { id, a, tracker } = await ignoringItsSignal((run) => (run === 1 ? 10_000 : 0));
      await vi.advanceTimersByTimeAsync(3_000);
      expect(db.job(id)).toMatchObject({ status: 'processing', attempts: 1 }); // its handler still runs
      await vi.advanceTimersByTimeAsync(10_000);
      expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 1 });
      expect(tracker.overlaps).toBe(0);
      expect(tracker.runs.get(id)).toBe(2);
      expect(a.ids('jobs:handed-back')).toEqual([id]);
    });
  });

  it('a running job taken away is aborted as soon as the heartbeat sees it, and completed by its new owner', async () => {
    const id = db.add('t');
    let aSignal: AbortSignal | undefined;
    const a = await start('A', {
      tasks: {
        t: async (_p: unknown, { signal }: JobContext) => {
          aSignal = signal;
          await abortable(HOUR, signal);
        },
      },
      heartbeatIntervalMs: 1_000,
      pollIntervalMs: NO_POLL,
    });
    await vi.advanceTimersByTimeAsync(10);
    // Its lock expires as if A had paused, and B takes the job.
    db.job(id).locked_at = new Date(Date.now() - 10_000);
    db.rescue(5_000);
    const b = await start('B', { tasks: { t: async () => 'B' }, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(aSignal!.aborted).toBe(true);
    expect(a.ids('job:lock-lost')).toEqual([id]);
    expect(a.slots.runningCount).toBe(0);
    expect(db.job(id)).toMatchObject({ status: 'completed', result: 'B' });
    expect(b.ids('job:complete')).toEqual([id]);
  });

  it("a cancelled job's handler is aborted, nothing is written for it, and its slot takes the next job", async () => {
    const [cancelled, next] = db.addMany(2, 't');
    let signal: AbortSignal | undefined;
    const w = await start('A', {
      concurrency: 1,
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async (_p: unknown, ctx: JobContext) => {
          if (ctx.job.id === cancelled) signal = ctx.signal;
          await abortable(ctx.job.id === cancelled ? HOUR : 10, ctx.signal);
        },
      },
    });
    await vi.advanceTimersByTimeAsync(10);
    Object.assign(db.job(cancelled!), { status: 'cancelled', finished_at: new Date() }); // what cancel() writes
    w.dispatcher.cancel(cancelled!, db.job(cancelled!).attempts);
    w.loop.wake();
    await vi.advanceTimersByTimeAsync(100);
    expect(signal!.aborted).toBe(true);
    expect(w.ids('job:cancel')).toEqual([cancelled]);
    expect(db.job(cancelled!).status).toBe('cancelled');
    expect(db.job(next!).status).toBe('completed');
  });

  it('a cancel of a job claimed ahead drops it unstarted; one of another attempt leaves it alone (outside reviews 261, 263)', async () => {
    const first = db.addMany(5, 't'); // a backlog: the claims that follow take jobs ahead
    const running = db.add('t');
    const [ahead, other] = db.addMany(2, 't');
    const started: string[] = [];
    const w = await start('A', {
      concurrency: 1,
      prefetch: 10,
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async (_p: unknown, ctx: JobContext) => {
          started.push(ctx.job.id);
          await abortable(ctx.job.id === running ? 300 : 1, ctx.signal);
        },
      },
    });
    await vi.advanceTimersByTimeAsync(100);
    expect(started).toEqual([...first, running]);
    expect([ahead, other].every((id) => db.job(id!).locked_by === 'A')).toBe(true); // claimed ahead, waiting
    Object.assign(db.job(ahead!), { status: 'cancelled', finished_at: new Date() }); // what cancel() writes
    w.dispatcher.cancel(ahead!, db.job(ahead!).attempts);
    // A late notification of an earlier attempt of `other` (retried since).
    w.dispatcher.cancel(other!, db.job(other!).attempts - 1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(started).toEqual([...first, running, other]);
    expect(db.job(ahead!).status).toBe('cancelled');
    expect(db.job(other!).status).toBe('completed');
  });

  it("writes a handler's progress to its job", async () => {
    const id = db.add('t');
    await start('A', {
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async (_p: unknown, { progress }: JobContext) => {
          for (let pct = 10; pct <= 50; pct += 10) {
            progress({ pct });
            await sleep(100);
          }
          await sleep(HOUR);
        },
      },
    });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(db.job(id).progress).toEqual({ pct: 50 });
  });
});

describe('runtime: retries and snoozes', () => {
  it('runs a failed job again at its due time, not before, as its next attempt', async () => {
    const id = db.add('t', { max_attempts: 3 });
    const tracker = new Tracker();
    const started: number[] = [];
    const w = await start('A', {
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async (_p: unknown, ctx: JobContext) => {
          tracker.begin(ctx);
          started.push(Date.now());
          tracker.end(ctx.job);
          if (ctx.attempt === 1) throw new Error('flaky');
          return 'ok';
        },
      },
      backoff: { baseMs: 1_000, maxMs: 1_000, shape: 'fixed' },
    });
    await vi.advanceTimersByTimeAsync(20);
    const job = db.job(id);
    expect(job.status).toBe('pending');
    const dueAt = job.run_at.getTime();
    expect(dueAt - started[0]!).toBeGreaterThanOrEqual(500);
    await vi.advanceTimersByTimeAsync(dueAt - Date.now() - 1);
    expect(started).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(10);
    expect(started).toHaveLength(2);
    expect(started[1]! - dueAt).toBeLessThanOrEqual(5);
    expect(tracker.attempts.get(id)).toEqual([1, 2]);
    expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 2, result: 'ok' });
    expect(w.events.map((e) => e.event).filter((e) => e.startsWith('job:'))).toEqual([
      'job:start',
      'job:fail',
      'job:retry',
      'job:start',
      'job:complete',
    ]);
  });

  it('runs every retry of several failing jobs on time (each due time is kept, not only the earliest)', async () => {
    const ids = db.addMany(5, 't');
    const failedOnce = new Set<string>();
    const startedAt = new Map<string, number>();
    await start('A', {
      pollIntervalMs: NO_POLL,
      concurrency: 5,
      tasks: {
        t: async (_p: unknown, { job }: JobContext) => {
          // Each job fails once after a different time, so their retries fall due apart.
          if (!failedOnce.has(job.id)) {
            failedOnce.add(job.id);
            await sleep(Number(job.id) * 300);
            throw new Error('once');
          }
          startedAt.set(job.id, Date.now());
        },
      },
      backoff: { baseMs: 200, maxMs: 200, shape: 'fixed' },
    });
    const dueAt = new Map<string, number>();
    for (let t = 0; t < 3_000; t += 10) {
      await vi.advanceTimersByTimeAsync(10);
      for (const id of ids) {
        const job = db.job(id);
        if (job.status === 'pending' && job.attempts === 1 && !dueAt.has(id)) dueAt.set(id, job.run_at.getTime());
      }
    }
    expect(db.count('completed')).toBe(5);
    for (const id of ids) expect(startedAt.get(id)! - dueAt.get(id)!).toBeLessThanOrEqual(15);
  });

  it('runs a snoozed job again after the snooze, without spending an attempt', async () => {
    const id = db.add('t', { max_attempts: 1 });
    const tracker = new Tracker();
    let snoozed = false;
    const w = await start('A', {
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async (_p: unknown, ctx: JobContext) => {
          tracker.begin(ctx);
          tracker.end(ctx.job);
          if (!snoozed) {
            snoozed = true;
            throw new Snooze(300);
          }
          return 'later';
        },
      },
    });
    await vi.advanceTimersByTimeAsync(10);
    expect(db.job(id)).toMatchObject({ status: 'pending', attempts: 0 });
    await vi.advanceTimersByTimeAsync(280);
    expect(tracker.runs.get(id)).toBe(1);
    await vi.advanceTimersByTimeAsync(30);
    expect(db.job(id)).toMatchObject({ status: 'completed', attempts: 1, result: 'later' });
    expect(tracker.attempts.get(id)).toEqual([1, 1]);
    expect(w.ids('job:snooze')).toEqual([id]);
  });

  // DueTimes hands setTimeout a delay over 2^31-1 ms, which fires after 1 ms; each
  // firing wakes the fetch loop, which claims again: the worker spins.
  it('does not spin after a snooze of a month', async () => {
    db.add('t');
    await start('A', {
      pollIntervalMs: NO_POLL,
      tasks: {
        t: async () => {
          throw new Snooze(new Date(Date.now() + 30 * 86_400_000));
        },
      },
    });
    await vi.advanceTimersByTimeAsync(50);
    const before = cycles();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(cycles() - before, 'cycles sent in one idle second').toBeLessThanOrEqual(1);
  });
});

describe('runtime: the fetch loop under load and failure', () => {
  it('an idle worker sends nothing until woken; jobs enqueued without a wake wait for one', async () => {
    const tracker = new Tracker();
    const w = await start('A', { tasks: { t: tracker.handler(() => 1) }, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(10);
    const idle = cycles();
    db.addMany(3, 't');
    await vi.advanceTimersByTimeAsync(60_000);
    expect(cycles()).toBe(idle);
    expect(db.count('pending')).toBe(3);
    w.loop.wake();
    await vi.advanceTimersByTimeAsync(100);
    expect(db.count('completed')).toBe(3);
  });

  it('batches: jobs that finish together share one cycle with the next claim', async () => {
    db.addMany(80, 't');
    const w = await start('A', { tasks: { t: async () => sleep(10) }, concurrency: 8, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(db.count('completed')).toBe(80);
    // 10 rounds of 8 jobs: one cycle each (+ the first claim and the last write), not one per job.
    expect(cycles()).toBeLessThanOrEqual(12);
    expect(w.loop.stats.claimed).toBe(80);
  });

  it('survives failing cycles: results are restored, retried with backoff, each job completed once', async () => {
    const ids = db.addMany(40, 't');
    const w = await start('A', { tasks: { t: async () => sleep(5) }, concurrency: 4, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(12);
    for (let i = 0; i < 3; i++) db.failNext('cycle', new Error('connection reset'));
    await vi.advanceTimersByTimeAsync(5_000);
    expect(w.errors).toHaveLength(3);
    expect(db.count('completed')).toBe(40);
    expect(w.ids('job:complete').sort()).toEqual([...ids].sort());
    expect(w.ids('job:lock-lost')).toEqual([]);
  });

  // With concurrency 8 the claim threshold is 2: a single free slot is filled only
  // along with a result write. A worker whose other slots run long jobs then never
  // takes a newly enqueued job: neither the wake nor the polls claim.
  it('takes a new job into its one free slot while its other slots run long jobs', async () => {
    db.addMany(7, 'long');
    await start('A', {
      tasks: { long: async () => sleep(HOUR), quick: async () => 'done' },
      concurrency: 8,
      pollIntervalMs: 1_000,
    });
    await vi.advanceTimersByTimeAsync(10);
    expect(db.count('processing')).toBe(7);
    const quick = db.add('quick');
    workers[0]!.loop.wake(); // the enqueue's notification
    await vi.advanceTimersByTimeAsync(10_000);
    expect(db.job(quick).status, 'the quick job, 10 s after it was enqueued').toBe('completed');
  });
});

describe('runtime: limited queues', () => {
  it('a global limit of 1 runs the queue one job at a time across workers, in order', async () => {
    db.setQueue('serial', { limit: 1 });
    const ids = db.addMany(10, 't', { queue: 'serial' });
    db.addMany(20, 't');
    const tracker = new Tracker();
    const options = {
      tasks: { t: tracker.handler(() => 20) },
      queues: ['default', 'serial'],
      concurrency: 4,
      pollIntervalMs: 50,
    };
    await start('A', options);
    await start('B', options);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(db.count('completed')).toBe(30);
    expect(tracker.maxPerQueue.get('serial')).toBe(1);
    expect(tracker.order.filter((id) => ids.includes(id))).toEqual(ids);
  });

  it('a local limit caps the queue in this worker while other queues fill the slots', async () => {
    db.addMany(12, 't', { queue: 'heavy' });
    db.addMany(30, 't');
    const tracker = new Tracker();
    await start('A', {
      tasks: { t: tracker.handler(() => 20) },
      queues: ['default', 'heavy'],
      queueConcurrency: { heavy: 2 },
      concurrency: 6,
      pollIntervalMs: 50,
    });
    await vi.advanceTimersByTimeAsync(3_000);
    expect(db.count('completed')).toBe(42);
    expect(tracker.maxPerQueue.get('heavy')).toBe(2);
    expect(tracker.maxPerQueue.get('default')).toBeGreaterThan(2);
  });

  it('claims nothing from a paused queue, and resumes after the refresh', async () => {
    db.setQueue('default', { paused: true });
    db.addMany(3, 't');
    const tracker = new Tracker();
    const w = await start('A', { tasks: { t: tracker.handler(() => 1) }, pollIntervalMs: 100 });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(db.count('pending')).toBe(3);
    db.setQueue('default', { paused: false });
    await w.queueState.refresh(); // a control notification
    await vi.advanceTimersByTimeAsync(50);
    expect(db.count('completed')).toBe(3);
  });
});

describe('runtime: hand-back and stop', () => {
  it('hands back jobs claimed ahead that wait behind a slow job; another worker runs them', async () => {
    db.addMany(5, 'fast');
    const slow = db.add('slow');
    const behind = db.addMany(5, 'fast');
    const tasks = { fast: async () => sleep(1), slow: async () => sleep(10_000) };
    const a = await start('A', { tasks, concurrency: 1, prefetch: 10, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(100);
    expect(db.job(slow)).toMatchObject({ status: 'processing', locked_by: 'A' });
    expect(behind.every((id) => db.job(id).locked_by === 'A')).toBe(true); // claimed ahead, waiting
    const b = await start('B', { tasks, concurrency: 1, pollIntervalMs: 100 });
    await vi.advanceTimersByTimeAsync(1_000);

    expect(a.ids('jobs:handed-back')).toEqual(behind);
    expect(behind.map((id) => db.job(id))).toEqual(
      behind.map(() =>
        expect.objectContaining({
          status: 'completed',
          locked_by: 'B',
          attempts: 1,
        }),
      ),
    );
    expect(b.ids('job:complete')).toEqual(behind);
    expect(db.job(slow).status).toBe('processing');
  });

  // Review 47: after a Postgres crash, a hand-back that had committed but whose
  // reply was lost left its jobs to start here while other workers ran them too.
  it('never starts jobs whose hand-back failed: it may have committed; the hand-back is tried again', async () => {
    db.addMany(5, 'fast');
    const slow = db.add('slow');
    const behind = db.addMany(5, 'fast');
    const runs = new Map<string, string[]>();
    const record = (worker: string) => async (_: unknown, ctx: { job: { id: string } }) => {
      runs.set(ctx.job.id, [...(runs.get(ctx.job.id) ?? []), worker]);
      await sleep(1);
    };
    // The slow job ends soon after the hand-back: A's slot is free while the jobs it failed to hand back are still its own.
    const tasks = (worker: string) => ({ fast: record(worker), slow: async () => sleep(700) });
    const a = await start('A', { tasks: tasks('A'), concurrency: 1, prefetch: 10, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(100);
    expect(behind.every((id) => db.job(id).locked_by === 'A')).toBe(true); // claimed ahead, waiting
    db.loseNextReply('release');
    const b = await start('B', { tasks: tasks('B'), concurrency: 1, pollIntervalMs: 100 });
    await vi.advanceTimersByTimeAsync(500); // the hand-back commits, its reply is lost
    expect(a.errors.length).toBeGreaterThan(0);
    await vi.advanceTimersByTimeAsync(3_000); // A's slow job has ended: its slot is free
    expect(behind.map((id) => runs.get(id))).toEqual(behind.map(() => ['B']));
    expect(db.job(slow).status).toBe('completed');
    expect(db.count('completed')).toBe(11);
    expect(b.ids('job:complete')).toEqual(expect.arrayContaining(behind));
  });

  // Review 49: a hand-back that committed with its reply lost was tried again after
  // the same worker had claimed its jobs anew, and handed back jobs it was running
  // or had run (their results not written yet): they ran again at the same attempt.
  it('a job claimed again after a hand-back whose reply was lost is not handed back by its retry', async () => {
    db.addMany(5, 'fast');
    const slow = db.add('slow');
    const behind = db.addMany(5, 'fast');
    const runs = new Map<string, number>();
    let fastMs = 1;
    const tasks = {
      fast: async (_: unknown, ctx: { job: { id: string } }) => {
        runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1);
        await sleep(fastMs);
      },
      slow: async () => sleep(700),
    };
    const a = await start('A', { tasks, concurrency: 1, prefetch: 10, pollIntervalMs: 100 });
    await vi.advanceTimersByTimeAsync(100);
    expect(behind.every((id) => db.job(id).locked_by === 'A')).toBe(true); // claimed ahead, waiting
    db.loseNextReply('release');
    await vi.advanceTimersByTimeAsync(500); // the hand-back commits, its reply is lost
    expect(a.errors.length).toBeGreaterThan(0);
    // The slow job ends and A claims the jobs again: they run while the hand-back is tried again.
    fastMs = 400;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(behind.map((id) => runs.get(id))).toEqual(behind.map(() => 1));
    expect(behind.map((id) => db.job(id))).toEqual(
      behind.map(() => expect.objectContaining({ status: 'completed', attempts: 1, locked_by: 'A' })),
    );
    expect(db.job(slow).status).toBe('completed');
  });

  // Review 49: a claim whose reply was lost left its jobs locked to the worker until
  // the rescuer took them, counting the attempt of those the claim had started.
  it('gives back, attempts unspent, the jobs a claim whose reply was lost locked to it', async () => {
    const jobs = db.addMany(3, 'once', { max_attempts: 1 });
    const runs: string[] = [];
    db.loseNextReply('cycle');
    const a = await start('A', {
      tasks: { once: async (_: unknown, ctx: { job: { id: string } }) => void runs.push(ctx.job.id) },
      concurrency: 4,
      pollIntervalMs: 500,
    });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(a.errors.length).toBeGreaterThan(0); // the lost reply
    expect(runs.sort()).toEqual([...jobs].sort());
    expect(jobs.map((id) => db.job(id))).toEqual(jobs.map(() => expect.objectContaining({ status: 'completed', attempts: 1 })));
    expect(a.loop.stats.orphansReleased).toBe(3);
  });

  // Outside review 119: a claim that timed out in a stalled network reached Postgres
  // and committed once the network carried again, just after the sweep had run: its
  // jobs stayed locked to the worker, never run, until the rescuer failed them.
  it('sweeps again after the first sweep, for a claim that commits late', async () => {
    const deliver = db.strandNext('cycle');
    const runs: string[] = [];
    const a = await start('A', {
      tasks: { once: async (_: unknown, ctx: { job: { id: string } }) => void runs.push(ctx.job.id) },
      heartbeatIntervalMs: 1_000,
      pollIntervalMs: NO_POLL,
    });
    await vi.advanceTimersByTimeAsync(200); // the claim failed; the sweep found nothing
    expect(a.errors.length).toBeGreaterThan(0);
    const jobs = db.addMany(3, 'once', { max_attempts: 1 });
    deliver(); // the stalled claim commits now: three jobs locked to A, which never hears of them
    await vi.advanceTimersByTimeAsync(50);
    expect(jobs.map((id) => db.job(id).status)).toEqual(['processing', 'processing', 'processing']);
    expect(runs).toEqual([]);
    await vi.advanceTimersByTimeAsync(3_000); // the follow-up sweeps, a heartbeat interval apart
    expect(a.loop.stats.orphansReleased).toBe(3);
    expect(runs.sort()).toEqual([...jobs].sort());
    expect(jobs.map((id) => db.job(id))).toEqual(jobs.map(() => expect.objectContaining({ status: 'completed', attempts: 1 })));
  });

  // Review 49: a result whose write committed with its reply lost was sent again,
  // found the row no longer 'processing', and was reported as job:lock-lost.
  it('reports a result whose write committed with its reply lost as written, not as a lost lock', async () => {
    const [done, retried] = db.addMany(2, 't');
    const w = await start('A', {
      tasks: {
        t: async (_: unknown, ctx: { job: { id: string } }) => {
          await sleep(50);
          if (ctx.job.id === retried) throw new Error('again later');
        },
      },
      concurrency: 2,
      pollIntervalMs: NO_POLL,
      backoff: { baseMs: 60_000, maxMs: 60_000, shape: 'fixed' },
    });
    await vi.advanceTimersByTimeAsync(10); // claimed
    db.loseNextReply('cycle');
    await vi.advanceTimersByTimeAsync(2_000);
    expect(w.errors.length).toBeGreaterThan(0); // the lost reply
    expect(db.job(done!)).toMatchObject({ status: 'completed', attempts: 1 });
    expect(db.job(retried!)).toMatchObject({ status: 'pending', attempts: 1 });
    expect(w.ids('job:lock-lost')).toEqual([]);
    expect(w.ids('job:complete')).toEqual([done]);
    expect(w.ids('job:fail')).toEqual([retried]);
  });

  // Review 50: a hand-back whose reply came after the worker had claimed its jobs
  // again and started them was reported ('jobs:handed-back') after their start.
  it('reports a hand-back before the jobs it gave back start again here', async () => {
    db.addMany(5, 'fast');
    db.add('slow');
    const behind = db.addMany(5, 'fast');
    const tasks = { fast: async () => sleep(1), slow: async () => sleep(700) };
    const a = await start('A', { tasks, concurrency: 1, prefetch: 10, pollIntervalMs: 100 });
    await vi.advanceTimersByTimeAsync(100);
    expect(behind.every((id) => db.job(id).locked_by === 'A')).toBe(true); // claimed ahead, waiting
    const reply = db.holdNext('release', 'reply'); // the hand-back commits; its reply is slow
    await vi.advanceTimersByTimeAsync(1_500); // the slow job ends; A claims the jobs again and runs them
    expect(behind.map((id) => db.job(id).status)).toEqual(behind.map(() => 'completed'));
    reply();
    await vi.advanceTimersByTimeAsync(100);
    expect(a.ids('jobs:handed-back').sort()).toEqual([...behind].sort());
    const at = (event: 'jobs:handed-back' | 'job:start', id: string) =>
      a.events.findIndex((e) => e.event === event && [e.args[0]].flat().some((j) => (j as { id: string }).id === id));
    for (const id of behind) expect(at('jobs:handed-back', id)).toBeLessThan(at('job:start', id));
  });

  it('a hand-back that failed before it ran is tried again; its jobs never start here', async () => {
    db.addMany(5, 'fast');
    db.add('slow');
    const behind = db.addMany(3, 'fast');
    const started: string[] = [];
    const tasks = {
      fast: async (_: unknown, ctx: { job: { id: string } }) => void started.push(ctx.job.id),
      slow: async () => sleep(5_000),
    };
    const a = await start('A', { tasks, concurrency: 1, prefetch: 10, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(100);
    db.failNext('release', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    await vi.advanceTimersByTimeAsync(2_000);
    // Tried again: handed back with their attempts unspent, and never started here.
    expect(a.ids('jobs:handed-back')).toEqual(behind);
    expect(behind.map((id) => db.job(id))).toEqual(
      behind.map(() => expect.objectContaining({ status: 'pending', attempts: 0, locked_by: null })),
    );
    expect(started.filter((id) => behind.includes(id))).toEqual([]);
  });

  it('stop() waits for a claim in flight and gives back what it brought, attempts unspent', async () => {
    db.addMany(10, 't');
    let ran = 0;
    const open = db.holdNext('cycle');
    const w = await start('A', { tasks: { t: async () => void ran++ }, concurrency: 4, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(10);
    let stopped = false;
    void w.stop().then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(100);
    expect(stopped).toBe(false);
    open();
    await vi.advanceTimersByTimeAsync(100);
    expect(stopped).toBe(true);
    expect(ran).toBe(0);
    expect(db.count('processing')).toBe(0);
    expect([...db.jobs.values()].every((j) => j.status === 'pending' && j.attempts === 0)).toBe(true);
  });

  it('stop() lets running jobs finish within the timeout, releases what did not start and writes every result', async () => {
    const quick = db.add('t', { payload: { ms: 200 } });
    const stuck = db.add('t', { payload: { ms: HOUR } });
    const waiting = db.addMany(2, 't', { payload: { ms: 1 } });
    const w = await start('A', {
      tasks: { t: async ({ ms }: { ms: number }) => sleep(ms) },
      concurrency: 2,
      prefetch: 0,
      pollIntervalMs: NO_POLL,
      completionFlushMs: 5_000,
    });
    await vi.advanceTimersByTimeAsync(10);
    expect(w.slots.runningIds()).toEqual([quick, stuck]);
    let stopped = false;
    void w.stop(1_000).then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(1_100);
    expect(stopped).toBe(true);
    expect(db.job(quick).status).toBe('completed');
    // Its handler ignores the abort and may still run: left to the rescuer, not handed back.
    expect(db.job(stuck)).toMatchObject({ status: 'processing', attempts: 1 });
    expect(waiting.map((id) => db.job(id).status)).toEqual(['pending', 'pending']);
  });

  // FetchLoop.drain() stops once Completer.size is 0, which leaves out results
  // deferred because another session held their row: stop() resolves with the job
  // still processing, and the rescuer later runs it a second time.
  it('stop() writes a result whose row another session held for a moment', async () => {
    const id = db.add('t');
    const w = await start('A', { tasks: { t: async () => sleep(100) }, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(10);
    const unlock = db.lockJob(id); // an admin's transaction reads the job FOR UPDATE
    setTimeout(unlock, 300);
    let stopped = false;
    void w.stop(1_000).then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(3_000);
    expect(stopped).toBe(true);
    expect(db.job(id).status, 'the job after stop() resolved').toBe('completed');
  });

  it('keeps a job it could not hand back (row locked by another session) and hands it back on a later try', async () => {
    db.addMany(5, 'fast');
    const slow = db.add('slow');
    const behind = db.addMany(2, 'fast');
    const tasks = { fast: async () => sleep(1), slow: async () => sleep(2_000) };
    const a = await start('A', { tasks, concurrency: 1, prefetch: 10, pollIntervalMs: NO_POLL });
    await vi.advanceTimersByTimeAsync(100);
    expect(db.job(slow).locked_by).toBe('A');
    const unlock = db.lockJob(behind[0]!);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(a.ids('jobs:handed-back')).toEqual([behind[1]]);
    expect(db.job(behind[0]!)).toMatchObject({ status: 'processing', locked_by: 'A' });
    unlock();
    await vi.advanceTimersByTimeAsync(600);
    expect(a.ids('jobs:handed-back')).toEqual([behind[1], behind[0]]);
    expect(db.job(behind[0]!)).toMatchObject({ status: 'pending', locked_by: null, attempts: 0 });
  });
});
