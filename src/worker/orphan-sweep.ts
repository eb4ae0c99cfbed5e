import type { WorkerStore } from '../db/store.js';
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

  constructor(
    private readonly store: WorkerStore,
    private readonly target: ClaimTarget,
    private readonly stats: CycleStats,
  ) {}

  /** How many rows went back to pending; rejects when the statement failed (the sweep stays due). */
  async run(): Promise<number> {
    this.running = true;
    try {
      const ids = await this.store.releaseOrphans(this.target.heldIds());
      this.due = false;
      this.stats.orphansReleased += ids.length;
      return ids.length;
    } finally {
      this.running = false;
    }
  }
}
