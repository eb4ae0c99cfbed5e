import { EventEmitter } from 'node:events';
import { Loop } from '../lifecycle/loop.js';
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

/**
 * A maintenance service: the rescuer and the pruner (on the leader), cron (on
 * every worker with schedules), and every PeriodicTask. Each run gets a signal
 * that fires when the service is stopped (leadership lost, worker stopping).
 */
export interface MaintenanceService<R = void> {
  readonly name: string;
  /**
   * From the end of a run to the next: a number (jittered ±25%, so that services
   * started together spread out), or exactly what this returns for the last run's
   * result (cron sleeps until its next tick; `undefined` after a run that threw).
   */
  readonly intervalMs: number | ((result: R | undefined) => number);
  run(signal: AbortSignal): Promise<R>;
  /** Once, before the first run (cron publishes its definitions); start() waits for it. */
  setup?(): Promise<void>;
}

/** One service on the shared lifecycle: its setup, a first run at once, then one every interval. */
export class ServiceRunner {
  private readonly loop: Loop<unknown>;

  constructor(
    // Any result type: only the service's own intervalMs reads it.
    private readonly service: MaintenanceService<any>,
    private readonly report: (err: unknown) => void,
  ) {
    const { intervalMs } = service;
    this.loop = new Loop<unknown>({
      pass: (signal) => service.run(signal),
      intervalMs,
      jitter: typeof intervalMs === 'number' ? [0.75, 1.25] : undefined,
      // A run that threw is reported, and the service runs again at its next interval.
      onError: report,
    });
  }

  /** Resolves once the service is set up (a failed setup is reported: the runs go ahead). */
  async start(): Promise<void> {
    if (this.service.setup) await this.service.setup().catch(this.report);
    this.loop.start();
    void this.loop.trigger();
  }

  /** Fires the run's signal; resolves once the run in flight has ended. */
  stop(): Promise<void> {
    return this.loop.stop();
  }
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
 * leader's services. A worker that loses the lease (or cannot renew it before it
 * runs out) stops its services; a worker whose leader died takes over once the
 * lease has expired, so fail-over takes at most about 4/3 of the lease.
 */
export class MaintenanceRunner extends EventEmitter<MaintenanceEvents> {
  private leading = false;
  private readonly campaign: Loop;
  private readonly expiry: Loop;
  /** The services of this term of leadership: each term gets its own, stopped when it ends. */
  private term: ServiceRunner[] = [];
  /** Services of ended terms whose last run is still in flight. */
  private readonly ending = new Set<Promise<void>>();

  constructor(
    private readonly lease: Lease,
    private readonly services: readonly MaintenanceService<any>[],
  ) {
    super();
    // Never later than a third of the lease, so that a renewal that fails once is retried in time.
    this.campaign = new Loop({ pass: (signal) => this.renew(signal), intervalMs: lease.leaseMs / 3, jitter: [0.75, 1] });
    // If renewals keep failing (or hang), step down the moment the lease runs out locally.
    this.expiry = new Loop({
      pass: () => {
        if (this.leading && !this.lease.held) this.demote();
      },
      intervalMs: () => (this.leading ? this.lease.remainingMs : Infinity),
    });
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    this.expiry.start();
    this.campaign.start();
    void this.campaign.trigger();
  }

  /** Stops the services, waits for running ones, and hands the lease over. */
  async stop(): Promise<void> {
    const wasLeading = this.leading;
    const campaign = this.campaign.stop();
    void this.expiry.stop();
    this.demote();
    await Promise.all([campaign, ...this.ending]);
    // A renewal in flight at stop() may have taken the lease: give that up too.
    if (wasLeading || this.lease.held) await this.lease.resign().catch((err) => this.emit('lease:error', err));
  }

  private async renew(signal: AbortSignal): Promise<void> {
    try {
      const held = await this.lease.tryAcquire();
      if (signal.aborted) return;
      if (held && !this.leading) this.promote();
      if (!held && this.leading) this.demote();
    } catch (err) {
      this.emit('lease:error', err);
      // Keep leading only while the last renewal is still valid.
      if (this.leading && !this.lease.held) this.demote();
    }
  }

  private promote(): void {
    this.leading = true;
    this.emit('leader:elected');
    this.term = this.services.map((s) => new ServiceRunner(s, (err) => this.emit('task:error', s.name, err)));
    for (const service of this.term) void service.start();
    void this.expiry.trigger();
  }

  private demote(): void {
    if (!this.leading) return;
    this.leading = false;
    for (const service of this.term) {
      const stopped = service.stop();
      this.ending.add(stopped);
      void stopped.then(() => this.ending.delete(stopped));
    }
    this.term = [];
    this.emit('leader:lost');
  }
}
