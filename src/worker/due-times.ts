/** Due times remembered at most; past that the latest are dropped and the poll finds them. */
const MAX_ENTRIES = 1_000;
/** Node runs a longer setTimeout after 1 ms: wait in steps of at most this. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The moments when jobs this worker knows of fall due (delayed enqueues it was
 * told of, its own retries and snoozes). One timer, set for the earliest; when it
 * fires, every time that has come is dropped, `due` is called and the timer moves
 * to the next. Keeping them all (not only the earliest) is what lets a second
 * delayed job start on time instead of at the next poll.
 */
export class DueTimes {
  /** Ascending, no duplicates. */
  private readonly times: number[] = [];
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;

  /** `due(true)` when a timer fired, `due(false)` when a time added had already come. */
  constructor(private readonly due: (timer: boolean) => void) {}

  get size(): number {
    return this.times.length;
  }

  /** Remembers `at` (ms since epoch); a time already come calls `due` at once. */
  add(at: number, now = Date.now()): void {
    if (at <= now) {
      this.due(false);
      return;
    }
    let lo = 0;
    let hi = this.times.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.times[mid]! < at) lo = mid + 1;
      else hi = mid;
    }
    if (this.times[lo] === at) return;
    this.times.splice(lo, 0, at);
    if (this.times.length > MAX_ENTRIES) this.times.pop();
    this.arm(now);
  }

  clear(): void {
    this.times.length = 0;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedFor = Infinity;
  }

  private arm(now: number): void {
    const next = this.times[0];
    if (next === undefined || next === this.armedFor) return;
    clearTimeout(this.timer);
    this.armedFor = next;
    // +1: a timer may fire a little early, and a claim at exactly run_at must find the job due.
    this.timer = setTimeout(() => this.fire(), Math.min(MAX_TIMER_MS, next - now + 1));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = Date.now();
    let come = 0;
    while (come < this.times.length && this.times[come]! <= now) come++;
    this.times.splice(0, come);
    // Nothing has come: a time beyond the longest timer, waited for in steps.
    if (come > 0) this.due(true);
    this.arm(now);
  }
}
