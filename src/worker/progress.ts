import type { WorkerStore } from '../db/worker-store.js';
import { Loop } from '../lifecycle/loop.js';

/**
 * Writes handlers' progress reports. A handler may report thousands of times a
 * second; only the newest value per job is kept, and all jobs' values go out in
 * one statement at most once per interval. Best effort: a report that arrives
 * after its job finished (or was taken back) is ignored by the guarded UPDATE.
 */
export class ProgressWriter {
  private pending = new Map<string, string>();
  /** The newest report of each running job that made one, written or not: its outcome carries it. */
  private readonly latest = new Map<string, string>();
  /** Writes only when a report asks for it (runSoon), never on a timer of its own. */
  private readonly writes: Loop;
  private lastWrite = -Infinity;

  constructor(
    private readonly store: WorkerStore,
    private readonly intervalMs: number,
    private readonly error: (err: unknown) => void,
  ) {
    this.writes = new Loop({ pass: () => this.write(), intervalMs: Infinity, onError: error });
  }

  /** Records `json` as job `id`'s progress, written within intervalMs. */
  report(id: string, json: string): void {
    if (this.writes.isStopped) return;
    this.pending.set(id, json);
    this.latest.set(id, json);
    this.writes.runSoon(this.lastWrite + this.intervalMs - Date.now());
  }

  /**
   * The run of job `id` ended: its newest report, to go out with its outcome, and
   * none of its own. Written apart, it could land after the outcome, whose
   * write ends the job, and be dropped by the guarded UPDATE: a handler that
   * reported and returned at once lost its last report (a test saw it in CI).
   */
  ended(id: string): string | undefined {
    this.pending.delete(id);
    const json = this.latest.get(id);
    this.latest.delete(id);
    return json;
  }

  /** Writes what is pending, then accepts no more. */
  async stop(): Promise<void> {
    // Refuse reports first: one made during the final write must not go out after it.
    // The write in flight goes out before the last one, so no value is overwritten by an older one.
    await this.writes.stop();
    await this.write().catch(this.error);
  }

  private async write(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    this.lastWrite = Date.now();
    const written = await this.store.progress([...batch.keys()], [...batch.values()]);
    // Not written but still running here: its row was held by another session (or by
    // this worker's own cycle) for that moment. Sent again unless a newer report came.
    let again = false;
    for (const [id, json] of batch) {
      if (written.has(id) || this.pending.has(id) || this.latest.get(id) !== json) continue;
      this.pending.set(id, json);
      again = true;
    }
    if (again && !this.writes.isStopped) this.writes.runSoon(this.intervalMs);
  }
}
