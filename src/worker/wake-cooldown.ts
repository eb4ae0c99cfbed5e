/**
 * Damps wake-up storms. Every idle worker hears every notification, and all but
 * one find the job gone: with 50 idle workers, 49 empty claims per job, each a
 * statement Postgres pays for. So a worker whose last claim came back empty (it
 * lost such a race, or the job was taken already) merges the notifications of
 * the next `cooldownMs` into one claim at its end. A worker whose last claim got
 * jobs is not cooling and answers at once: a steady trickle is picked up by the
 * last worker to win, without delay, and a burst beyond its free slots waits at
 * most the cooldown for the others. Polls, due times and rescues are not
 * notifications and never wait.
 */
export class WakeCooldown {
  private until = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly cooldownMs: number,
    /** Claim now. */
    private readonly wake: () => void,
    /** Claim when `at` (ms since epoch) comes. */
    private readonly wakeAt: (at: number) => void,
  ) {}

  /** A claim came back with `count` jobs: none starts the cooldown, any ends it. */
  claimed(count: number): void {
    this.until = count === 0 && this.cooldownMs > 0 ? Date.now() + this.cooldownMs : 0;
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
  }
}
