/**
 * Cancels heard for jobs this worker did not hold, by when they were heard. A
 * claim out at that moment may have committed before the cancel, and its reply
 * then brings the job after it: that job must not start (outside review 259: a
 * handler began 43 ms after its cancel had returned). Only a cancel heard after a
 * claim was sent can concern that claim, and a claim answered later than `keepMs`
 * starts nothing anyway (Dispatcher.claimed), so older ones are forgotten.
 */
export class CancelsHeard {
  private readonly heard = new Map<string, number>();

  constructor(private readonly keepMs: number) {}

  add(id: string): void {
    const now = performance.now();
    // In the order heard: the oldest first.
    for (const [old, at] of this.heard) {
      if (now - at <= this.keepMs) break;
      this.heard.delete(old);
    }
    this.heard.delete(id);
    this.heard.set(id, now);
  }

  /** Whether `id`'s cancel was heard within the last `withinMs` (a claim's round trip); forgets it. */
  take(id: string, withinMs: number): boolean {
    if (this.heard.size === 0) return false;
    const at = this.heard.get(id);
    if (at === undefined) return false;
    this.heard.delete(id);
    return performance.now() - at <= withinMs;
  }
}
