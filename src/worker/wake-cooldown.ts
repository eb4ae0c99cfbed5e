/**
 * Damps wake-up storms. Every idle worker hears every notification, and all but
 * one find the job gone: with 50 idle workers, 49 empty claims per job, each a
 * statement Postgres pays for. So a worker whose last two claims came back
 * empty (it keeps losing such races) merges the notifications of the next
 * `cooldownMs` (growing while it keeps finding nothing) into one claim at its end. One empty claim is not enough: a lone
 * worker gets one whenever a claim took the job of a notification still on its
 * way, and must not then sit out the next job. A worker whose last claim got
 * jobs is not cooling and answers at once: a steady trickle is picked up by the
 * last worker to win, without delay, and a burst beyond its free slots waits at
 * most the cooldown for the others. Polls, due times and rescues are not
 * notifications and never wait.
 */
/**
 * The cooldown doubles with each empty claim in a row, at most this many times
 * (16 × cooldownMs, 400 ms by default): 49 losing workers then ask ~120 times a
 * second in all, whatever the rate of notifications; a burst the winner has no
 * room for waits at most that long for the others.
 */
const MAX_DOUBLINGS = 4;

export class WakeCooldown {
  private until = 0;
  /** Claims in a row that came back empty. */
  private empty = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly cooldownMs: number,
    /** Claim now. */
    private readonly wake: () => void,
    /** Claim when `at` (ms since epoch) comes. */
    private readonly wakeAt: (at: number) => void,
  ) {}

  /**
   * A claim came back with `count` jobs: a second empty one in a row starts the
   * cooldown, each further one doubles it (up to MAX_DOUBLINGS), any job ends it.
   * A worker that keeps losing to a faster one thus asks about once per
   * 16 × cooldownMs, not once per job.
   */
  claimed(count: number): void {
    this.empty = count === 0 ? this.empty + 1 : 0;
    if (this.empty < 2 || this.cooldownMs === 0) {
      this.until = 0;
      return;
    }
    this.until = Date.now() + this.cooldownMs * 2 ** Math.min(this.empty - 2, MAX_DOUBLINGS);
  }

  /** A notification: a job is due at `runAt` (ms since epoch). */
  notified(runAt: number): void {
    const now = Date.now();
    if (runAt > now || now >= this.until) {
      this.wakeAt(runAt);
      return;
    }
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.wake();
    }, this.until - now);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.until = 0;
    this.empty = 0;
  }
}
