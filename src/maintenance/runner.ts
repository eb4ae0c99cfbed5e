import { EventEmitter } from 'node:events';
import type { Lease } from './lease.js';

/**
 * A piece of cluster-wide maintenance (rescue, pruning, cron ticks, ...). Runs only
 * on the elected leader, every `intervalMs` (jittered ±25%), first right after the
 * election. `signal` fires when leadership is lost or the worker stops; a task
 * that runs long should pass it on. Tasks must tolerate a short overlap with a
 * previous leader (use SKIP LOCKED or idempotent statements): a lease handover
 * can leave the old leader's last run in flight.
 */
export interface PeriodicTask {
  name: string;
  intervalMs: number;
  run(signal: AbortSignal): Promise<void>;
}

export interface MaintenanceEvents {
  'leader:elected': [];
  'leader:lost': [];
  /** A task threw; it runs again at its next interval. */
  'task:error': [name: string, error: unknown];
  /** Renewing or taking the lease failed (database trouble). */
  'lease:error': [error: unknown];
}

/**
 * Competes for the lease every third of its length; while it holds it, runs the
 * periodic tasks. A worker that loses the lease (or cannot renew it before it
 * runs out) stops its tasks; a worker whose leader died takes over once the
 * lease has expired, so fail-over takes at most about 4/3 of the lease.
 */
export class MaintenanceRunner extends EventEmitter<MaintenanceEvents> {
  private leading = false;
  private stopped = true;
  private leaseTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private readonly taskTimers = new Map<string, NodeJS.Timeout>();
  private abort = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly lease: Lease,
    private readonly tasks: readonly PeriodicTask[],
  ) {
    super();
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    this.stopped = false;
    void this.campaign();
  }

  /** Stops the tasks, waits for running ones, and hands the lease over. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.leaseTimer);
    clearTimeout(this.expiryTimer);
    const wasLeading = this.leading;
    this.demote();
    await Promise.allSettled([...this.inFlight]);
    if (wasLeading) await this.lease.resign().catch((err) => this.emit('lease:error', err));
  }

  private async campaign(): Promise<void> {
    if (this.stopped) return;
    try {
      const held = await this.lease.tryAcquire();
      if (this.stopped) return;
      if (held && !this.leading) this.promote();
      if (!held && this.leading) this.demote();
    } catch (err) {
      this.emit('lease:error', err);
      // Keep leading only while the last renewal is still valid.
      if (this.leading && !this.lease.held) this.demote();
    }
    if (this.stopped) return;
    const interval = this.lease.leaseMs / 3;
    this.leaseTimer = setTimeout(() => void this.campaign(), interval * (0.75 + Math.random() / 4));
    this.leaseTimer.unref();
    // If renewals keep failing (or hang), step down the moment the lease runs out locally.
    clearTimeout(this.expiryTimer);
    if (this.leading) {
      this.expiryTimer = setTimeout(() => {
        if (this.leading && !this.lease.held) this.demote();
      }, this.lease.leaseMs);
      this.expiryTimer.unref();
    }
  }

  private promote(): void {
    this.leading = true;
    this.abort = new AbortController();
    this.emit('leader:elected');
    for (const task of this.tasks) this.runTask(task);
  }

  private demote(): void {
    if (!this.leading) return;
    this.leading = false;
    this.abort.abort();
    for (const timer of this.taskTimers.values()) clearTimeout(timer);
    this.taskTimers.clear();
    this.emit('leader:lost');
  }

  private runTask(task: PeriodicTask): void {
    if (!this.leading || this.stopped) return;
    const signal = this.abort.signal;
    const run = task
      .run(signal)
      .catch((err) => {
        if (!signal.aborted) this.emit('task:error', task.name, err);
      })
      .finally(() => {
        this.inFlight.delete(run);
        if (signal.aborted) return;
        const timer = setTimeout(() => this.runTask(task), task.intervalMs * (0.75 + Math.random() / 2));
        timer.unref();
        this.taskTimers.set(task.name, timer);
      });
    this.inFlight.add(run);
  }
}
