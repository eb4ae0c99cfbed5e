import type { WorkerStore } from '../db/worker-store.js';
import { OneShotTimer } from '../lifecycle/one-shot-timer.js';
import type { ClaimTarget } from './claim-target.js';
import type { CycleStats } from './cycle-stats.js';

/**
 * Gives back the rows a claim whose reply was lost locked to this worker: every
 * row locked to it but not held. The fetch loop sends it alone, with no claim in
 * flight: a claim beside it would bring rows this worker holds without the sweep
 * knowing. They never ran here, so their attempts are not spent; without the
 * sweep they waited for the rescuer, which counts the attempt of those the claim
 * started (with maxAttempts 1: failed without running).
 */
export class OrphanSweep {
  /**
   * A claim failed after it may have committed (its reply lost): rows may be
   * locked to this worker that it never heard of.
   */
  due = false;
  running = false;
  /** The follow-ups after an uncertain claim (ms after each sweep), and those still to come. */
  private readonly followUpsMs: readonly number[];
  private followUps: number[] = [];
  private readonly followUp = new OneShotTimer(() => {
    this.due = true;
    this.wake();
  });

  constructor(
    private readonly store: WorkerStore,
    private readonly target: ClaimTarget,
    private readonly stats: CycleStats,
    /** The sweep is due: the fetch loop sends it once no claim is out. */
    private readonly wake: () => void = () => {},
    /**
     * Paces the follow-ups: after the first sweep it runs again one and three
     * heartbeat intervals later, well within a visibility timeout. A claim that
     * failed for no answer (a stalled network) can still reach Postgres and commit
     * when the network carries again, after the first sweep: outside review 119
     * saw the sweep run 1 ms before such a claim committed, and the rescuer then
     * failed its jobs, which never ran, a visibility timeout later.
     */
    heartbeatIntervalMs = 0,
  ) {
    this.followUpsMs = heartbeatIntervalMs > 0 ? [heartbeatIntervalMs, 2 * heartbeatIntervalMs] : [];
  }

  /** A claim's outcome is unknown: sweep now, and again after each follow-up. */
  uncertain(): void {
    this.due = true;
    this.followUps = [...this.followUpsMs];
    this.followUp.clear();
  }

  /** How many rows went back to pending; rejects when the statement failed (the sweep stays due). */
  async run(): Promise<number> {
    this.running = true;
    try {
      const ids = await this.store.releaseOrphans(this.target.heldIds());
      this.due = false;
      this.stats.orphansReleased += ids.length;
      const next = this.followUps.shift();
      if (next !== undefined) this.followUp.arm(next);
      return ids.length;
    } finally {
      this.running = false;
    }
  }

  /** No follow-up after this (the worker is stopping). */
  stop(): void {
    this.followUps = [];
    this.followUp.clear();
  }
}
