import { getStats, getThroughput, type QueueStats, type ThroughputPoint } from '../admin/stats.js';
import { listQueueSettings } from '../control.js';
import { controlStatements } from '../db/statements/control.js';
import type { Queryable } from '../db/executor.js';

/** The window of the overview's rates: one hour, like the chart. */
export const OVERVIEW_WINDOW_MS = 3_600_000;

export interface QueueOverview extends QueueStats {
  /** Failed for good / (completed + failed for good) in the last hour; null without finished jobs. */
  failureRate: number | null;
  /** Cluster-wide limit of running jobs; null: none. */
  concurrencyLimit: number | null;
}

const NO_JOBS: Omit<QueueStats, 'queue'> = {
  pending: 0,
  scheduled: 0,
  processing: 0,
  completed: 0,
  failed: 0,
  cancelled: 0,
  oldestPendingMs: null,
  completedInWindow: 0,
  failedInWindow: 0,
  cancelledInWindow: 0,
  jobsPerSecond: 0,
  paused: false,
};

export interface Overview {
  windowMs: number;
  queues: QueueOverview[];
  /** All queues, one point per minute of the last hour, oldest first. */
  throughput: ThroughputPoint[];
}

/** What the overview page shows, and what the live feed pushes when it changes. */
export async function loadOverview(db: Queryable, schema: string): Promise<Overview> {
  const [stats, throughput, settings] = await Promise.all([
    getStats(db, schema, { windowMs: OVERVIEW_WINDOW_MS }),
    getThroughput(db, schema, { minutes: OVERVIEW_WINDOW_MS / 60_000 }),
    listQueueSettings(db, controlStatements(schema)),
  ]);
  // A paused queue without jobs is still a queue to show (and to resume).
  const byName = new Map(stats.queues.map((q) => [q.queue, q]));
  for (const s of settings) if (!byName.has(s.name)) byName.set(s.name, { queue: s.name, ...NO_JOBS });
  const settingsOf = new Map(settings.map((s) => [s.name, s]));
  return {
    throughput,
    windowMs: stats.windowMs,
    queues: [...byName.values()]
      .sort((a, b) => (a.queue < b.queue ? -1 : 1))
      .map((q) => {
        const finished = q.completedInWindow + q.failedInWindow;
        const setting = settingsOf.get(q.queue);
        return {
          ...q,
          failureRate: finished === 0 ? null : q.failedInWindow / finished,
          paused: setting?.paused ?? false,
          concurrencyLimit: setting?.concurrencyLimit ?? null,
        };
      }),
  };
}
