import type { Queryable } from './db/executor.js';

/** Future due times kept per queue for the next statement; past this the poll finds them. */
const MAX_TIMES_PER_QUEUE = 32;

/**
 * Sends the wake-up NOTIFYs of enqueues that ran as their own transaction, after
 * their COMMIT (migration 0004 explains why not inside it). At most one NOTIFY
 * statement is in flight: wake-ups that arrive meanwhile are merged into the next
 * one, so ten concurrent enqueues of due jobs cost one or two notifications, not
 * ten. Jobs already due merge into one wake-up per queue; each distinct future
 * run_at is sent as well (workers keep every due time they are told).
 *
 * A wake-up is only a latency hint: if it fails (connection lost), workers still
 * find the jobs on their next poll, so the error is not the caller's problem.
 */
export class WakeUps {
  /** queue → the run_at values (ms since epoch) not sent yet. */
  private pending = new Map<string, Set<number>>();
  private sending: Promise<void> | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly statement: string,
    private readonly channel: string,
  ) {}

  add(queue: string, runAtMs: number): void {
    let times = this.pending.get(queue);
    if (!times) this.pending.set(queue, (times = new Set()));
    times.add(runAtMs);
    this.sending ??= this.send();
  }

  /** Resolves once every wake-up added so far has been sent (or failed). */
  async settled(): Promise<void> {
    while (this.sending) await this.sending;
  }

  private async send(): Promise<void> {
    while (this.pending.size > 0) {
      const batch = wakeList(this.pending, Date.now());
      this.pending = new Map();
      try {
        // Dates keep the millisecond exactly; the statement turns them into the payload.
        await this.db.query(this.statement, [this.channel, batch.map((w) => w.queue), batch.map((w) => new Date(w.at))]);
      } catch {
        // A hint lost: the workers' poll picks the jobs up.
      }
    }
    this.sending = undefined;
  }
}

/** Per queue: one wake-up for everything due by `now` (the earliest), and each future time (the earliest few). */
function wakeList(pending: ReadonlyMap<string, ReadonlySet<number>>, now: number): { queue: string; at: number }[] {
  const list: { queue: string; at: number }[] = [];
  for (const [queue, times] of pending) {
    const sorted = [...times].sort((a, b) => a - b);
    const due = sorted.filter((t) => t <= now);
    if (due.length > 0) list.push({ queue, at: due[0]! });
    for (const at of sorted.filter((t) => t > now).slice(0, MAX_TIMES_PER_QUEUE)) list.push({ queue, at });
  }
  return list;
}
