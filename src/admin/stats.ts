import { rows, type Queryable } from '../db/executor.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { checks } from '../validate.js';
import { adminStatements } from '../db/statements/admin.js';
import { getGroupStats, queuesWithGroups } from './groups.js';
import { knownOptions } from './input.js';

const { checkName, intOption } = checks(ValidationError);

/** One queue's numbers. Counts are exact, taken in one snapshot. */
export interface QueueStats {
  queue: string;
  /** All pending jobs, due or not. */
  pending: number;
  /** Pending jobs whose run_at is still in the future (a subset of `pending`). */
  scheduled: number;
  processing: number;
  /**
   * Finished jobs, in the jobs table and in jobs_history (where the pruner moves
   * them after a minute, by default), until their retention ends.
   */
  completed: number;
  failed: number;
  cancelled: number;
  /** How long the oldest due pending job has waited past its run_at; null when none is due. */
  oldestPendingMs: number | null;
  /** Jobs completed within the window. */
  completedInWindow: number;
  /** Jobs that failed for good within the window. */
  failedInWindow: number;
  /** Jobs cancelled within the window. */
  cancelledInWindow: number;
  /** completedInWindow per second of the window. */
  jobsPerSecond: number;
  /** The queue is paused: its pending jobs wait on purpose (`sluice queues resume`). */
  paused: boolean;
  /** A grouped queue's groups, when asked for (`groups: true`); absent for other queues. */
  groups?: QueueGroupCounts;
}

/** How many groups of a grouped queue are in which state (see getGroupStats). */
export interface QueueGroupCounts {
  /** Groups with pending or running jobs. */
  total: number;
  /** Groups with due jobs. */
  withDue: number;
  /** Groups with running jobs. */
  withRunning: number;
  /** Groups whose due jobs their concurrency or rate limit holds back now. */
  throttled: number;
}

export interface Stats {
  /** The window of the *InWindow numbers and jobsPerSecond, in ms. */
  windowMs: number;
  queues: QueueStats[];
}

/** What the statement returns: everything but the derived rate. */
type StatsRow = Omit<QueueStats, 'jobsPerSecond'>;

const STATS_KEYS = new Set(['windowMs', 'groups']);
const THROUGHPUT_KEYS = new Set(['minutes', 'queue']);

/**
 * Per-queue counts by status, the age of the oldest due job, throughput and
 * failures over the last `windowMs` (default one minute). One statement: a pass
 * over the jobs table and an index-only pass over jobs_history's
 * (queue, status, finished_at) index (migration 0018).
 *
 * With `groups: true`, each grouped queue also gets its group counts, one more
 * read per grouped queue (getGroupStats: a pass over its pending jobs), taken
 * after the counts above and so in a snapshot of its own.
 *
 * @example
 *   const { queues } = await getStats(pool, 'sluice', { groups: true });
 *   for (const q of queues) console.log(q.queue, q.pending, q.jobsPerSecond, q.groups?.throttled);
 */
export async function getStats(
  db: Queryable,
  schema: string,
  options: { windowMs?: number; groups?: boolean } = {},
): Promise<Stats> {
  options = knownOptions(options, STATS_KEYS, 'getStats');
  const windowMs = intOption('windowMs', options.windowMs, 60_000, 1_000, 86_400_000);
  let found: StatsRow[];
  try {
    found = await rows<StatsRow>(db, adminStatements(schema).stats, [windowMs]);
  } catch (err) {
    throw wrapDatabaseError(err, 'stats failed');
  }
  const groups = options.groups === true ? await groupCounts(db, schema, found) : new Map<string, QueueGroupCounts>();
  return {
    windowMs,
    queues: found.map((r) => {
      const counts = groups.get(r.queue);
      return {
        ...r,
        oldestPendingMs: r.oldestPendingMs === null ? null : Math.max(0, Math.round(r.oldestPendingMs)),
        jobsPerSecond: r.completedInWindow / (windowMs / 1000),
        ...(counts ? { groups: counts } : {}),
      };
    }),
  };
}

/** The group counts of those of `queues` that are grouped or have grouped jobs waiting, one read each. */
async function groupCounts(db: Queryable, schema: string, queues: StatsRow[]): Promise<Map<string, QueueGroupCounts>> {
  const grouped = await queuesWithGroups(db, schema, { among: new Set(queues.map((q) => q.queue)) });
  const counts = new Map<string, QueueGroupCounts>();
  for (const name of grouped) {
    // limit 1: only the totals are wanted, not the busiest groups.
    const g = await getGroupStats(db, schema, name, { limit: 1 });
    counts.set(name, { total: g.groups, withDue: g.groupsDue, withRunning: g.groupsRunning, throttled: g.throttled });
  }
  return counts;
}

/** Jobs finished in one minute. */
export interface ThroughputPoint {
  /** Start of the minute. */
  minute: Date;
  completed: number;
  /** Failed for good (no attempts left, or a permanent failure). */
  failed: number;
}

/**
 * Jobs finished per minute over the last `minutes` (default 60, the current
 * minute last), of one queue or all: the dashboard's throughput chart.
 *
 * @example
 *   const points = await getThroughput(pool, 'sluice', { minutes: 60 });
 *   const lastHour = points.reduce((n, p) => n + p.completed, 0);
 */
export async function getThroughput(
  db: Queryable,
  schema: string,
  options: { minutes?: number; queue?: string } = {},
): Promise<ThroughputPoint[]> {
  options = knownOptions(options, THROUGHPUT_KEYS, 'getThroughput');
  const minutes = intOption('minutes', options.minutes, 60, 1, 1440);
  const queue = options.queue === undefined ? null : checkName('queue', options.queue);
  try {
    return await rows<ThroughputPoint>(db, adminStatements(schema).throughput, [minutes, queue]);
  } catch (err) {
    throw wrapDatabaseError(err, 'throughput failed');
  }
}
