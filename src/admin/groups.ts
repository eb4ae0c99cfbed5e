import { rows, type Queryable } from '../db/executor.js';
import { groupStatements } from '../db/statements/groups.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { listQueueLimits } from '../groups/settings.js';
import { checks } from '../validate.js';
import { knownOptions } from './input.js';

const { checkName, intOption } = checks(ValidationError);

/** One group of a queue, as stats and the dashboard show it. */
export interface GroupStats {
  /** null: the queue's jobs without a group. */
  group: string | null;
  /** Pending jobs that are due. */
  due: number;
  /** Pending jobs not due yet. */
  scheduled: number;
  running: number;
  weight: number;
  /** The group's concurrency limit in effect (its own or the queue's default), null for none. */
  concurrencyLimit: number | null;
  /** Has due jobs that its concurrency or rate limit holds back right now. */
  throttled: boolean;
}

/** The groups of one queue: totals over all of them, and the busiest in full. */
export interface QueueGroupStats {
  queue: string;
  /** Groups with pending or running jobs. */
  groups: number;
  /** Groups with due jobs. */
  groupsDue: number;
  /** Groups with running jobs. */
  groupsRunning: number;
  due: number;
  running: number;
  /** Groups whose due jobs are held back by their limits now. */
  throttled: number;
  /** Due jobs wait, all of them, for the queue's own concurrency or rate limit now (whatever their groups' limits). */
  queueThrottled: boolean;
  /** The busiest groups (most due jobs first), at most `limit` of them. */
  top: GroupStats[];
}

type Row = GroupStats & {
  groupCount: number;
  dueGroupCount: number;
  runningGroupCount: number;
  dueTotal: number;
  runningTotal: number;
  throttledCount: number;
  queueThrottled: boolean;
};

/**
 * Per-group backlog, running jobs and throttling of one queue, in one snapshot.
 * It reads every pending job of the queue once: meant for people and scrapes,
 * not for a hot loop.
 *
 * @example
 *   const { groups, throttled, top } = await getGroupStats(pool, 'sluice', 'emails', { limit: 10 });
 */
export async function getGroupStats(
  db: Queryable,
  schema: string,
  queue: string,
  options: { limit?: number } = {},
): Promise<QueueGroupStats> {
  options = knownOptions(options, new Set(['limit']), 'getGroupStats');
  const name = checkName('queue', queue);
  const limit = intOption('limit', options.limit, 50, 1, 10_000);
  let found: Row[];
  try {
    found = await rows<Row>(db, groupStatements(schema).groupStats, [name, limit]);
  } catch (err) {
    throw wrapDatabaseError(err, `group stats of queue ${JSON.stringify(name)} failed`);
  }
  const first = found[0];
  return {
    queue: name,
    groups: first?.groupCount ?? 0,
    groupsDue: first?.dueGroupCount ?? 0,
    groupsRunning: first?.runningGroupCount ?? 0,
    due: first?.dueTotal ?? 0,
    running: first?.runningTotal ?? 0,
    throttled: first?.throttledCount ?? 0,
    queueThrottled: first?.queueThrottled ?? false,
    top: found.map(
      ({
        groupCount: _g,
        dueGroupCount: _gd,
        runningGroupCount: _gr,
        dueTotal: _d,
        runningTotal: _r,
        throttledCount: _t,
        queueThrottled: _q,
        ...group
      }) => group,
    ),
  };
}

/**
 * Which queues have groups to show: those marked grouped (or, with
 * `rateLimited`, rate-limited) and those with grouped pending jobs that no worker
 * has claimed yet (a queue is marked grouped only at its first grouped claim or
 * group setting, and stats and metrics left out the groups of a backlog enqueued
 * before that: outside review 94). Only queues in `among`, when given.
 */
export async function queuesWithGroups(
  db: Queryable,
  schema: string,
  options: { among?: ReadonlySet<string>; rateLimited?: boolean } = {},
): Promise<string[]> {
  const { among, rateLimited = false } = options;
  const known = (await listQueueLimits(db, schema)).filter((q) => !among || among.has(q.name));
  const marked = known.filter((q) => q.grouped || (rateLimited && q.rateLimit !== null)).map((q) => q.name);
  const statements = groupStatements(schema);
  const found = among
    ? await rows<{ name: string }>(db, statements.queuesWithGroupedJobs, [[...among].filter((n) => !marked.includes(n))])
    : await rows<{ name: string }>(db, statements.allQueuesWithGroupedJobs);
  return [...marked, ...found.map((r) => r.name).filter((name) => !marked.includes(name))];
}
