import type { WorkerStore } from '../db/store.js';

/**
 * Keeps the locks of this worker's jobs fresh: one statement per interval for all
 * of them (running, waiting for a slot, or finished with the result not yet
 * written). Ids the statement does not return were taken away (their lock expired
 * and the rescuer gave them to someone else); `lost` is told so the handlers can
 * be aborted.
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating = false;

  constructor(
    private readonly store: WorkerStore,
    private readonly intervalMs: number,
    private readonly heldIds: () => string[],
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
    const ids = this.heldIds();
    if (ids.length === 0 || this.beating) return;
    this.beating = true;
    try {
      const kept = await this.store.heartbeat(ids);
      // A job may have finished while the statement ran; only those still held count.
      const still = new Set(this.heldIds());
      const gone = ids.filter((id) => !kept.has(id) && still.has(id));
      if (gone.length > 0) this.lost(gone);
    } catch (err) {
      this.error(err);
    } finally {
      this.beating = false;
    }
  }
}
