import type { Queryable } from './db/executor.js';

/**
 * Sends the wake-up NOTIFYs of enqueues that ran as their own transaction, after
 * their COMMIT (migration 0004 explains why not inside it). At most one NOTIFY
 * statement is in flight: wake-ups that arrive meanwhile are merged (per queue,
 * earliest run_at) into the next one, so ten concurrent enqueues cost one or two
 * notifications, not ten.
 *
 * A wake-up is only a latency hint: if it fails (connection lost), workers still
 * find the jobs on their next poll, so the error is not the caller's problem.
 */
export class WakeUps {
  /** queue → earliest run_at (ms since epoch) not sent yet. */
  private pending = new Map<string, number>();
  private sending: Promise<void> | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly statement: string,
    private readonly channel: string,
  ) {}

  add(queue: string, runAtMs: number): void {
    const earlier = this.pending.get(queue);
    if (earlier === undefined || runAtMs < earlier) this.pending.set(queue, runAtMs);
    this.sending ??= this.send();
  }

  /** Resolves once every wake-up added so far has been sent (or failed). */
  async settled(): Promise<void> {
    while (this.sending) await this.sending;
  }

  private async send(): Promise<void> {
    while (this.pending.size > 0) {
      const batch = this.pending;
      this.pending = new Map();
      try {
        // Dates keep the millisecond exactly; the statement turns them into the payload.
        await this.db.query(this.statement, [this.channel, [...batch.keys()], [...batch.values()].map((ms) => new Date(ms))]);
      } catch {
        // A hint lost: the workers' poll picks the jobs up.
      }
    }
    this.sending = undefined;
  }
}
