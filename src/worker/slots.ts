import type { JobRow } from '../job.js';
import type { HandBackReason } from './events.js';
import type { Run } from './run.js';

/** Smallest time window a prefetch covers, however fast the round trip. */
const MIN_HORIZON_MS = 10;
/** Weight of the newest sample in the moving averages. */
const ALPHA = 0.2;
/** Run times below this count as this: a 0 ms average would mean an infinite rate. */
const MIN_RUN_MS = 0.05;

export interface SlotsConfig {
  concurrency: number;
  /** Most jobs held beyond the slots (0: never claim ahead). */
  prefetch: number;
  /** Local per-queue limits. Queues with a local limit are never claimed ahead. */
  queueLimits: ReadonlyMap<string, number>;
}

/** A job being handed back, and why (for the 'jobs:handed-back' event). */
export interface Releasing {
  job: JobRow;
  reason: HandBackReason;
}

interface Waiting {
  job: JobRow;
  /** Date.now() when it was claimed. */
  since: number;
}

/**
 * The worker's jobs: running (a handler holds a slot) and waiting (claimed ahead,
 * locked and heartbeated, not started). It decides how many jobs a claim may ask
 * for.
 *
 * Claiming ahead saves round trips only while a held job starts soon, so the
 * prefetch is sized to the expected rate at which slots free up over the next
 * round trip or two, per task: each running job frees its slot at the rate of its
 * own task's average run time (or of its own run so far, when that is longer), and
 * a job of a task that never finished here yet counts as never freeing one. Free slots about to be filled are assumed to take
 * as long as the slowest task seen. So a worker whose slots hold slow jobs claims
 * nothing ahead, however fast its other tasks are; and a held job that still
 * waits too long (the estimate was wrong) is handed back by the worker.
 */
export class Slots {
  private readonly running = new Map<string, Run>();
  /**
   * Jobs whose aborted handler ignored its signal past the grace period: their slot
   * was given up, but no attempt of the job starts here until that handler returns.
   */
  private readonly stillRunning = new Set<string>();
  private readonly waiting = new Map<string, Waiting>();
  /** Handed back, the release statement in flight: still this worker's (heartbeated) until it commits. */
  private readonly releasing = new Map<string, Releasing>();
  /**
   * Handed back, the release in flight, but the lock expired meanwhile
   * (expireReleasing): no longer held, never to wait again, yet told as handed
   * back if the release lands (a late claim's jobs: their locks date from its send).
   */
  private readonly expired = new Map<string, Releasing>();
  /** Per task: moving average of the run time (ms). */
  private readonly runMs = new Map<string, number>();
  /** Moving average of a cycle's round trip (ms), as the fetch loop measured it. */
  private roundTripMs = 0;
  /** The last prefetch allowance and when (performance.now()) it was computed. */
  private allowance = { at: -Infinity, value: 0 };

  constructor(private readonly config: SlotsConfig) {}

  get runningCount(): number {
    return this.running.size;
  }

  get waitingCount(): number {
    return this.waiting.size;
  }

  runningJobs(): IterableIterator<Run> {
    return this.running.values();
  }

  runningIds(): string[] {
    return [...this.running.keys()];
  }

  waitingIds(): string[] {
    return [...this.waiting.keys()];
  }

  /** Every job whose lock this worker must keep fresh. */
  heldIds(): string[] {
    return [...this.running.keys(), ...this.waiting.keys(), ...this.releasing.keys()];
  }

  /** True while `id` is running or waiting here. */
  holds(id: string): boolean {
    return this.running.has(id) || this.waiting.has(id);
  }

  runOf(id: string): Run | undefined {
    return this.running.get(id);
  }

  /** Slots plus the jobs that may be held ahead right now (none when `ahead` is false). */
  capacity(ahead = true): number {
    return this.config.concurrency + (ahead ? this.prefetchAllowance() : 0);
  }

  /** Slots not taken by a running or waiting job. */
  free(): number {
    return Math.max(0, this.config.concurrency - this.running.size - this.waiting.size);
  }

  /** Jobs a claim may ask for now: capacity minus every job held. */
  wanted(ahead = true): number {
    return Math.max(0, this.capacity(ahead) - this.running.size - this.waiting.size);
  }

  /**
   * Jobs of a queue on the limited path this worker may still take. With a local
   * limit: its free slots within that limit, never more (a job held ahead would
   * hold one of the queue's local slots without running). Otherwise as many as any
   * claim (wanted()): the claim starts the free slots' worth and claims the rest
   * ahead only where no global, group or rate limit counts them (claim_queue() in
   * migration 0019), so a grouped queue is claimed ahead like a plain one.
   */
  wantedIn(queue: string, ahead = true): number {
    const limit = this.config.queueLimits.get(queue);
    if (limit === undefined) return this.wanted(ahead);
    const free = this.config.concurrency - this.running.size - this.waiting.size;
    let held = 0;
    for (const r of this.running.values()) if (r.job.queue === queue) held++;
    for (const w of this.waiting.values()) if (w.job.queue === queue) held++;
    return Math.max(0, Math.min(free, limit - held));
  }

  /**
   * How many jobs may wait for a slot: the slots expected to free up within the
   * horizon. Kept for up to a millisecond while no run starts or ends: it walks
   * every running job, and the fetch loop asks for it several times per finished job.
   */
  prefetchAllowance(): number {
    if (this.config.prefetch === 0) return 0;
    const now = performance.now();
    if (now - this.allowance.at < 1) return this.allowance.value;
    let rate = 0; // slots freed per ms
    for (const run of this.running.values()) {
      const ms = this.runMs.get(run.job.task);
      // A run already longer than its task's average will take at least that long:
      // a task fast for some payloads and slow for others must not look fast.
      if (ms !== undefined) rate += 1 / Math.max(ms, now - run.startedAt);
    }
    const free = this.config.concurrency - this.running.size;
    const slowest = Math.max(0, ...this.runMs.values());
    if (free > 0 && slowest > 0) rate += free / slowest;
    const horizon = Math.max(MIN_HORIZON_MS, 2 * this.roundTripMs);
    const value = Math.min(this.config.prefetch, Math.floor(rate * horizon));
    this.allowance = { at: now, value };
    return value;
  }

  /**
   * Claimed jobs wait here until started. Those the claim marked as started
   * (started_at set: it gave them free slots) go first, so they are the ones that
   * start now.
   */
  hold(jobs: readonly JobRow[], now = Date.now()): void {
    for (const job of jobs) if (job.started_at) this.waiting.set(job.id, { job, since: now });
    for (const job of jobs) if (!job.started_at) this.waiting.set(job.id, { job, since: now });
  }

  /**
   * Those of `jobs` (just claimed) that were being handed back, taken out: they
   * were pending in between, so the hand-back committed, though its reply may
   * have been lost. A retry of that hand-back must leave them alone (review 49: a
   * retry released jobs this worker had claimed anew and was running).
   */
  takeReclaimed(jobs: readonly JobRow[]): Releasing[] {
    const reclaimed: Releasing[] = [];
    for (const job of jobs) {
      const r = this.releasing.get(job.id) ?? this.expired.get(job.id);
      if (!r) continue;
      this.releasing.delete(job.id);
      this.expired.delete(job.id);
      reclaimed.push(r);
    }
    return reclaimed;
  }

  /**
   * The next waiting job when a slot is free (claim order), taken out of the
   * waiting list. Not one whose earlier attempt still runs here (its lock was lost,
   * see Dispatcher.claimed), even past its slot (outlived): it waits for that
   * handler to stop, or is handed back as overdue for another worker to run.
   */
  nextToStart(): JobRow | undefined {
    if (this.running.size >= this.config.concurrency) return undefined;
    for (const [id, w] of this.waiting) {
      if (this.running.has(id) || this.stillRunning.has(id)) continue;
      this.waiting.delete(id);
      return w.job;
    }
    return undefined;
  }

  start(run: Run): void {
    this.allowance.at = -Infinity;
    this.running.set(run.job.id, run);
  }

  /** The run ended: frees its slot and learns its task's run time. False when it was not running here. */
  finish(run: Run, durationMs: number): boolean {
    if (this.running.get(run.job.id) !== run) return false;
    this.allowance.at = -Infinity;
    this.running.delete(run.job.id);
    const sample = Math.max(MIN_RUN_MS, durationMs);
    const previous = this.runMs.get(run.job.task);
    this.runMs.set(run.job.task, previous === undefined ? sample : previous + ALPHA * (sample - previous));
    return true;
  }

  /**
   * The aborted run's handler still runs past its grace period, its slot given up:
   * until it returns, or for `maxMs`, no attempt of its job starts here. Resolves then.
   */
  async outlived(run: Run, maxMs: number): Promise<void> {
    const id = run.job.id;
    this.stillRunning.add(id);
    // A stopped worker's process need not stay open for it.
    await run.handlerStopped(maxMs, { keepAlive: false });
    this.stillRunning.delete(id);
  }

  /** A cycle's measured round trip. */
  recordRoundTrip(ms: number): void {
    this.allowance.at = -Infinity;
    this.roundTripMs = this.roundTripMs === 0 ? ms : this.roundTripMs + ALPHA * (ms - this.roundTripMs);
  }

  /**
   * Waiting jobs claimed more than `maxWaitMs` ago, to be handed back: out of the
   * waiting list, but still held (and so heartbeated and watched) until handedBack().
   */
  takeOverdue(maxWaitMs: number, now = Date.now()): JobRow[] {
    const overdue: JobRow[] = [];
    for (const [id, w] of this.waiting) {
      if (now - w.since < maxWaitMs) break; // claim order is time order
      overdue.push(this.toReleasing(id, w.job, 'overdue'));
    }
    return overdue;
  }

  /**
   * Every waiting job of `queue`, to be handed back (a queue found grouped after
   * they were claimed first come, first served, or paused or limited since): like
   * takeOverdue. A job key goes back with its job: a job claimed ahead gives its
   * key up only when its start is written (migration 0024).
   */
  takeWaitingIn(queue: string, reason: HandBackReason): JobRow[] {
    return this.takeWaitingWhere((job) => job.queue === queue, reason);
  }

  /** The waiting jobs among `ids`, to be handed back (as takeWaitingIn). */
  takeWaitingIds(ids: ReadonlySet<string>, reason: HandBackReason): JobRow[] {
    return this.takeWaitingWhere((job) => ids.has(job.id), reason);
  }

  private takeWaitingWhere(taken: (job: JobRow) => boolean, reason: HandBackReason): JobRow[] {
    const jobs: JobRow[] = [];
    for (const [id, w] of this.waiting) if (taken(w.job)) jobs.push(this.toReleasing(id, w.job, reason));
    return jobs;
  }

  /** Out of the waiting list into the hand-back, still held. */
  private toReleasing(id: string, job: JobRow, reason: HandBackReason): JobRow {
    this.waiting.delete(id);
    this.releasing.set(id, { job, reason });
    return job;
  }

  /**
   * The hand-back of `released` committed; `kept` are still ours and wait again,
   * unless their lock expired meanwhile (expireReleasing): those are given up.
   */
  handedBack(released: readonly JobRow[], kept: readonly JobRow[]): void {
    for (const job of released) this.releasing.delete(job.id);
    this.forgetExpired([...released, ...kept]);
    this.hold(kept.filter((job) => this.releasing.delete(job.id)));
  }

  /** Those of `jobs` still being handed back (not given up since). */
  stillReleasing(jobs: readonly JobRow[]): JobRow[] {
    return jobs.filter((job) => this.releasing.has(job.id));
  }

  /** Those of `released` (their hand-back landed) not told yet: not claimed again meanwhile, nor taken away. */
  untold(released: readonly JobRow[]): JobRow[] {
    return released.filter((job) => this.releasing.has(job.id) || this.expired.has(job.id));
  }

  /**
   * A job being handed back whose lock expired or went (the hand-back itself may
   * have landed first): not to wait again nor to be tried again, but told if its
   * hand-back lands. False when it was not being handed back.
   */
  expireReleasing(id: string): boolean {
    const r = this.releasing.get(id);
    if (!r) return false;
    this.releasing.delete(id);
    this.expired.set(id, r);
    return true;
  }

  /** Hand-backs that will not be told (they landed, or are no longer tried). */
  forgetExpired(jobs: readonly JobRow[]): void {
    if (this.expired.size > 0) for (const job of jobs) this.expired.delete(job.id);
  }

  /** Those of `jobs` still being handed back, taken out (stop hands them back itself). */
  takeReleasing(jobs: readonly JobRow[]): JobRow[] {
    return jobs.filter((job) => this.releasing.delete(job.id));
  }

  /** When the oldest waiting job was claimed, or undefined when none waits. */
  oldestWaitingSince(): number | undefined {
    return this.waiting.values().next().value?.since;
  }

  /** The job waiting for a slot under `id`, if any. */
  waitingJob(id: string): JobRow | undefined {
    return this.waiting.get(id)?.job;
  }

  /** Removes one waiting job (its lock was lost, or it was cancelled). */
  dropWaiting(id: string): JobRow | undefined {
    const w = this.waiting.get(id);
    this.waiting.delete(id);
    return w?.job;
  }

  /** Every waiting job, taken out (stop: they go back to pending). */
  takeWaiting(): JobRow[] {
    const jobs = [...this.waiting.values()].map((w) => w.job);
    this.waiting.clear();
    return jobs;
  }
}
