import type { WorkerStore } from '../db/store.js';

/**
 * Writes handlers' progress reports. A handler may report thousands of times a
 * second; only the newest value per job is kept, and all jobs' values go out in
 * one statement at most once per interval. Best effort: a report that arrives
 * after its job finished (or was taken back) is ignored by the guarded UPDATE.
 */
export class ProgressWriter {
  private pending = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private lastWrite = 0;
  private stopped = false;

  constructor(
    private readonly store: WorkerStore,
    private readonly intervalMs: number,
    private readonly error: (err: unknown) => void,
  ) {}

  /** Records `json` as job `id`'s progress, written within intervalMs. */
  report(id: string, json: string): void {
    if (this.stopped) return;
    this.pending.set(id, json);
    if (this.timer) return;
    const wait = Math.max(0, this.lastWrite + this.intervalMs - Date.now());
    this.timer = setTimeout(() => void this.write(), wait);
    this.timer.unref();
  }

  /** Writes what is pending, then accepts no more. */
  async stop(): Promise<void> {
    // Refuse reports first: one made during the final write must not go out after it.
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.write();
  }

  private async write(): Promise<void> {
    this.timer = undefined;
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    this.lastWrite = Date.now();
    try {
      await this.store.progress([...batch.keys()], [...batch.values()]);
    } catch (err) {
      this.error(err);
    }
  }
}
