import type { WorkerStore } from '../db/store.js';

export interface HeartbeatConfig {
  /** How often the locks are renewed. */
  intervalMs: number;
  /** A job whose lock could not be renewed for this long is given up (see `unrenewed`). */
  renewalTimeoutMs: number;
}

/** What the heartbeat tells the worker. */
export interface HeartbeatSignals {
  /** Every job whose lock this worker must keep fresh. */
  held(): string[];
  /** These were taken away (rescued, cancelled): stop their handlers. */
  lost(ids: string[]): void;
  /**
   * These could not be renewed for renewalTimeoutMs (the database unreachable, or
   * their rows locked by another session): abort their handlers now, before the
   * visibility timeout lets the rescuer give them to another worker.
   */
  unrenewed(ids: string[]): void;
  error(err: unknown): void;
}

/**
 * Keeps the locks of this worker's jobs fresh: one statement per interval for all
 * of them (running, waiting for a slot, or finished with the result not yet
 * written), and watches how long ago each was last renewed.
 *
 * A renewal counts from the moment its statement was sent (the server stamps a
 * later time), so the worker's view of a lock's age is never younger than the
 * rescuer's. A worker cut off from Postgres therefore aborts its handlers
 * (renewalTimeoutMs) before any other worker can be handed their jobs
 * (visibilityTimeoutMs): handlers that honour their signal never overlap.
 */
export class Heartbeat {
  private beatTimer: NodeJS.Timeout | undefined;
  private watchTimer: NodeJS.Timeout | undefined;
  private soonTimer: NodeJS.Timeout | undefined;
  private beating = false;
  private stopped = false;
  /** performance.now() when each held job's lock was last known to be renewed (or claimed). */
  private readonly renewedAt = new Map<string, number>();
  /** Reported as unrenewed already: told once. */
  private readonly given = new Set<string>();

  constructor(
    private readonly store: WorkerStore,
    private readonly config: HeartbeatConfig,
    private readonly signals: HeartbeatSignals,
  ) {}

  /** Jobs claimed by a statement sent at `sentAt` (performance.now()). */
  claimed(ids: readonly string[], sentAt: number): void {
    for (const id of ids) this.renewedAt.set(id, sentAt);
  }

  start(): void {
    this.beatTimer = setInterval(() => void this.beat(), this.config.intervalMs);
    this.beatTimer.unref();
    this.watchTimer = setInterval(() => this.watch(), Math.min(1_000, this.config.intervalMs / 2));
    this.watchTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.beatTimer);
    clearInterval(this.watchTimer);
    clearTimeout(this.soonTimer);
  }

  async beat(): Promise<void> {
    const ids = this.signals.held();
    if (ids.length === 0 || this.beating || this.stopped) return;
    this.beating = true;
    const sentAt = performance.now();
    try {
      const { done, skipped } = await this.store.heartbeat(ids);
      for (const id of done) this.renewedAt.set(id, sentAt);
      // A job may have finished while the statement ran; only those still held count.
      const still = new Set(this.signals.held());
      const gone = ids.filter((id) => !done.has(id) && !skipped.has(id) && still.has(id));
      if (gone.length > 0) this.signals.lost(gone);
      // Rows another session holds were not renewed: ask again well before the next beat.
      if (skipped.size > 0 && !this.soonTimer && !this.stopped) {
        this.soonTimer = setTimeout(() => {
          this.soonTimer = undefined;
          void this.beat();
        }, this.config.intervalMs / 4);
        this.soonTimer.unref();
      }
    } catch (err) {
      this.signals.error(err);
    } finally {
      this.beating = false;
    }
  }

  /** Reports held jobs whose lock is older than renewalTimeoutMs; forgets jobs no longer held. */
  private watch(): void {
    const held = new Set(this.signals.held());
    const now = performance.now();
    const expired: string[] = [];
    for (const [id, at] of this.renewedAt) {
      if (!held.has(id)) {
        this.renewedAt.delete(id);
        this.given.delete(id);
      } else if (now - at > this.config.renewalTimeoutMs && !this.given.has(id)) {
        this.given.add(id);
        expired.push(id);
      }
    }
    if (expired.length > 0) this.signals.unrenewed(expired);
  }
}
