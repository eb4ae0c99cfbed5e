import { getStats, getThroughput, type QueueStats, type ThroughputPoint } from '../admin/stats.js';
import type { Queryable } from '../db/executor.js';

/** The window of the overview's rates: one hour, like the chart. */
export const OVERVIEW_WINDOW_MS = 3_600_000;

export interface QueueOverview extends QueueStats {
  /** Failed for good / (completed + failed for good) in the last hour; null without finished jobs. */
  failureRate: number | null;
}

export interface Overview {
  windowMs: number;
  queues: QueueOverview[];
  /** All queues, one point per minute of the last hour, oldest first. */
  throughput: ThroughputPoint[];
}

/** What the overview page shows, and what the live feed pushes when it changes. */
export async function loadOverview(db: Queryable, schema: string): Promise<Overview> {
  const [stats, throughput] = await Promise.all([
    getStats(db, schema, { windowMs: OVERVIEW_WINDOW_MS }),
    getThroughput(db, schema, { minutes: OVERVIEW_WINDOW_MS / 60_000 }),
  ]);
  return {
    throughput,
    windowMs: stats.windowMs,
    queues: stats.queues.map((q) => {
      const finished = q.completedInWindow + q.failedInWindow;
      return { ...q, failureRate: finished === 0 ? null : q.failedInWindow / finished };
    }),
  };
}
