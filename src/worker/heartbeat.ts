import type { Driver } from '../db/driver.js';
import type { WorkerStatements } from '../db/statements/worker.js';

/**
 * Keeps the locks of running jobs fresh: one statement per interval for all of
 * this worker's jobs. Ids the statement does not return were taken away (their
 * lock expired and the rescuer gave them to someone else); `lost` is told so the
 * handlers can be aborted.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating = false;

  constructor(
    private readonly db: Driver,
    private readonly queries: WorkerStatements,
    private readonly workerId: string,
    private readonly intervalMs: number,
    /** Name of the prepared statement, or undefined to send it unnamed. */
    private readonly statementName: string | undefined,
    private readonly runningIds: () => string[],
    private readonly lost: (ids: string[]) => void,
    private readonly error: (err: unknown) => void,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.beat(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async beat(): Promise<void> {
    const ids = this.runningIds();
    if (ids.length === 0 || this.beating) return;
    this.beating = true;
    try {
      const { rows } = await this.db.query<{ id: string }>(this.queries.heartbeat, [this.workerId, ids], this.statementName);
      const kept = new Set(rows.map((r) => r.id));
      // A job may have finished while the statement ran; only still-running ones count.
      const still = new Set(this.runningIds());
      const gone = ids.filter((id) => !kept.has(id) && still.has(id));
      if (gone.length > 0) this.lost(gone);
    } catch (err) {
      this.error(err);
    } finally {
      this.beating = false;
    }
  }
}
