import type { JobRow } from '../job.js';

/**
 * Cancels heard for jobs this worker did not hold, by when they were heard and
 * the attempt they cancelled. A claim out at that moment may have committed
 * before the cancel, and its reply then brings the job after it: that job must
 * not start (outside review 259: a handler began 43 ms after its cancel had
 * returned). Only a cancel heard after a claim was sent can concern that claim,
 * only for the attempt it cancelled (a retry since claims a later one: outside
 * review 261), and a claim answered later than `keepMs` starts nothing anyway
 * (Dispatcher.claimed), so older ones are forgotten.
 */
export class CancelsHeard {
  private readonly heard = new Map<string, { at: number; attempt: number }>();

  constructor(private readonly keepMs: number) {}

  add(id: string, attempt: number): void {
    const now = performance.now();
    // In the order heard: the oldest first.
    for (const [old, { at }] of this.heard) {
      if (now - at <= this.keepMs) break;
      this.heard.delete(old);
    }
    this.heard.delete(id);
    this.heard.set(id, { at: now, attempt });
  }

  /** Whether a cancel of `job`'s attempt was heard within the last `withinMs` (a claim's round trip); forgets it. */
  take(job: JobRow, withinMs: number): boolean {
    if (this.heard.size === 0) return false;
    const cancel = this.heard.get(job.id);
    if (cancel === undefined) return false;
    this.heard.delete(job.id);
    return performance.now() - cancel.at <= withinMs && cancel.attempt === job.attempts;
  }
}
