import { OneShotTimer } from '../lifecycle/one-shot-timer.js';
import type { Recorded } from './outcome-records.js';
import { SKIPPED_RETRY_MS } from './single-writes.js';

/**
 * Results whose row another session held when their write ran (SKIP LOCKED), kept
 * out of the buffer until they may go out again; `back` returns them to it. Their
 * jobs stay this worker's meanwhile (ids(): heartbeated).
 */
export class LockedResults {
  private readonly waiting = new Map<string, Recorded>();
  private readonly timer = new OneShotTimer(() => this.releaseAll());

  constructor(private readonly back: (results: Recorded[]) => void) {}

  get size(): number {
    return this.waiting.size;
  }

  ids(): IterableIterator<string> {
    return this.waiting.keys();
  }

  /**
   * A result whose write was skipped. The first time it goes out again once the
   * cycles that were out beside its write are back (`othersBack`), or with the
   * next cycle: the usual holder is a claim that ran at the same time, this
   * worker's own other cycle or another worker's, and such a claim keeps the row
   * locked only until it commits. Its scan, reading an older snapshot, met the row
   * just claimed (committed since) and locked it to recheck it; Postgres keeps a
   * lock taken for a recheck that failed until the statement's transaction ends.
   * Deferred by SKIPPED_RETRY_MS every time, such results were written ~250 ms late
   * (200 of a 3,000-job drain, the drain's last quarter of a second). A row still
   * held the second time is held by something else (an open transaction): it
   * waits SKIPPED_RETRY_MS, as does a result Postgres refused before.
   */
  skipped(result: Recorded, othersBack: Promise<void> | undefined): void {
    if (result.skippedBefore || result.held) {
      this.defer(result);
      return;
    }
    result.skippedBefore = true;
    if (!othersBack) {
      this.back([result]);
      return;
    }
    // Back at the latest with the deferred ones.
    this.waiting.set(result.id, result);
    void othersBack.then(() => {
      if (this.waiting.get(result.id) !== result) return; // back already (releaseAll)
      this.waiting.delete(result.id);
      this.back([result]);
    });
  }

  /** Back to the buffer after SKIPPED_RETRY_MS (with every other result waiting then). */
  defer(result: Recorded): void {
    this.waiting.set(result.id, result);
    this.timer.arm(SKIPPED_RETRY_MS);
  }

  /** Every result waiting goes back now. */
  releaseAll(): void {
    this.timer.clear();
    if (this.waiting.size === 0) return;
    const results = [...this.waiting.values()];
    this.waiting.clear();
    this.back(results);
  }
}
