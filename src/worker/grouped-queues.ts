import type { WorkerStore } from '../db/worker-store.js';
import type { JobRow } from '../job.js';
import type { Grouping } from './queue-state.js';

/** After a failed call (say, a role without the grant of roles.sql), the next try waits this long. */
const RETRY_AFTER_MS = 60_000;

/**
 * Flags a queue grouped when this worker first claims one of its grouped jobs
 * (migration 0021: nothing is written at enqueue, so a caller's long transaction
 * never holds the queue's row). Once per queue per process; for a queue already
 * flagged the call changes nothing.
 *
 * `found` runs for a queue whose grouped jobs were claimed first come, first
 * served: claimed by the common cycle (the plan had it as a plain queue), or
 * before this call flagged it. The worker then re-reads its claim plan (also
 * where no notification reaches it) and hands back what it claimed ahead there,
 * so that only the jobs it started were taken out of turn.
 */
export class GroupedQueues {
  /** Per queue, when a grouped job may next lead to a call (Date.now()): Infinity once called. */
  private readonly nextCallAt = new Map<string, number>();

  constructor(
    private readonly store: WorkerStore,
    private readonly isPlain: (queue: string) => boolean,
    private readonly found: (queue: string) => void,
    private readonly onError: (err: unknown) => void,
    /** What the claims should take the queue for until the queues table says (QueueState.assumeGrouped). */
    private readonly assume: (queue: string, grouping: Grouping) => void = () => {},
  ) {}

  claimed(jobs: readonly JobRow[]): void {
    for (const job of jobs) {
      const queue = job.queue;
      if (job.group_key === null || (this.nextCallAt.get(queue) ?? 0) > Date.now()) continue;
      this.nextCallAt.set(queue, Infinity);
      const plain = this.isPlain(queue);
      // Not claimed in common order any more: nothing until the call returns.
      if (plain) this.assume(queue, 'flagging');
      this.store.markGrouped(queue).then(
        (flagged) => {
          if (plain) this.assume(queue, 'grouped');
          if (flagged || plain) this.found(queue);
        },
        (err: unknown) => {
          // Tried again with a grouped job this worker claims a minute from now, not
          // with every claim: a missing grant would otherwise report once per claim.
          this.nextCallAt.set(queue, Date.now() + RETRY_AFTER_MS);
          // Not flagged: claimed in common order as before (see roles.sql).
          if (plain) this.assume(queue, 'plain');
          this.onError(err);
        },
      );
    }
  }
}
