import type pg from 'pg';
import type { Queries } from '../db/queries.js';
import { channelFor } from '../db/identifiers.js';

export interface RescuedJob {
  id: string;
  queue: string;
  status: 'pending' | 'failed';
}

const BATCH = 1_000;

/**
 * Gives back jobs whose worker stopped heartbeating (crashed, hung, cut off): any
 * live worker may run it; SKIP LOCKED keeps several rescuers from colliding.
 * Rescued jobs that go back to pending wake the workers of their queues.
 */
export async function rescueExpired(
  pool: pg.Pool,
  queries: Queries,
  visibilityTimeoutMs: number,
): Promise<RescuedJob[]> {
  const { rows } = await pool.query<RescuedJob>(queries.rescue, [visibilityTimeoutMs, BATCH]);
  const queues = [...new Set(rows.filter((r) => r.status === 'pending').map((r) => r.queue))];
  if (queues.length > 0) await pool.query(queries.notify, [channelFor(queries.schema), queues]);
  return rows;
}

/** Runs rescueExpired on a jittered interval. */
export class Rescuer {
  private timer: NodeJS.Timeout | undefined;
  private stopped = true;

  constructor(
    private readonly pool: pg.Pool,
    private readonly queries: Queries,
    private readonly visibilityTimeoutMs: number,
    private readonly intervalMs: number,
    private readonly rescued: (jobs: RescuedJob[]) => void,
    private readonly error: (err: unknown) => void,
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(async () => {
      try {
        const jobs = await rescueExpired(this.pool, this.queries, this.visibilityTimeoutMs);
        if (jobs.length > 0) this.rescued(jobs);
      } catch (err) {
        this.error(err);
      }
      this.schedule();
    }, this.intervalMs * (0.75 + Math.random() / 2));
    this.timer.unref();
  }
}
