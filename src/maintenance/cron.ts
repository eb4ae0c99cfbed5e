import type { Driver } from '../db/driver.js';
import { cronStatements, type CronStatements } from '../db/statements/cron.js';
import { rows, type Queryable } from '../db/executor.js';
import { wrapDatabaseError } from '../errors.js';
import { dueTicks, nextTick, parseCron, type ResolvedSchedule } from './cron-schedule.js';
import type { MaintenanceService } from './runner.js';

/** A tick that became a job. */
export interface CronTick {
  schedule: string;
  tick: Date;
  jobId: string;
}

/** Longest sleep between passes, so a changed clock or a missed timer heals quickly. */
const MAX_SLEEP_MS = 60_000;
/** Shortest sleep, so a client clock ahead of the server's cannot spin. */
const MIN_SLEEP_MS = 20;
/** After a failure, a schedule found missing, or its row held by another session: try again this soon. */
const RETRY_MS = 1_000;

/**
 * Enqueues the ticks of recurring schedules: a maintenance service like the
 * rescuer and the pruner, but run by every worker that has schedules. They need
 * no leader: a tick is enqueued only in the transaction that moves the schedule's
 * last_tick past it, with the row locked, so it becomes exactly one job however
 * many workers pass at once (see cron_schedules in 0002). setup() publishes the
 * definitions; each run enqueues what is due (including missed ticks) and returns
 * how long to sleep: until the next tick, measured on the database clock.
 */
export function cronTask(
  db: Driver,
  queries: CronStatements,
  schedules: readonly ResolvedSchedule[],
  enqueued: (ticks: CronTick[]) => void,
  error: (err: unknown, schedule: string) => void,
): MaintenanceService<number> {
  /** Database clock minus local clock, learnt on every run. */
  let skewMs = 0;
  const dbNow = () => Date.now() + skewMs;

  const register = async (): Promise<void> => {
    const defs = schedules.map((s) => ({
      name: s.name,
      cron: s.cron,
      timezone: s.timezone,
      task: s.task,
      queue: s.queue,
      payload: JSON.parse(s.payload) as unknown,
      priority: s.priority,
      max_attempts: s.maxAttempts,
      backfill: s.backfill,
      group_key: s.group,
    }));
    await db.query(queries.register, [JSON.stringify(defs)]);
  };

  /** Enqueues one schedule's due ticks; returns its next tick. */
  const runSchedule = async (schedule: ResolvedSchedule): Promise<Date | null> => {
    const outcome = await db.transaction(async (tx) => {
      const { rows } = await tx.query(queries.lockSchedule, [schedule.name]);
      const row = rows[0] as { last_tick: Date | null; now: Date; present: boolean };
      // Deleted under us (or registration failed): nothing to commit.
      if (!row.present) return undefined;
      skewMs = row.now.getTime() - Date.now();
      // Another session holds the row (another worker enqueueing its ticks): look again soon.
      if (row.last_tick === null) return { ticks: [], next: new Date(row.now.getTime() + RETRY_MS), ids: [] };
      const ticks = dueTicks(schedule.pattern, row.last_tick, row.now, schedule.backfill);
      const next = nextTick(schedule.pattern, row.now);
      let ids: string[] = [];
      if (ticks.length > 0) {
        const result = await tx.query(queries.enqueueTicks, [
          schedule.name,
          schedule.queue,
          schedule.payload,
          schedule.maxAttempts,
          schedule.task,
          schedule.priority,
          ticks.map((t) => t.toISOString()),
          schedule.group,
        ]);
        ids = result.rows.map((r: { id: string }) => r.id);
        await tx.query(queries.advance, [schedule.name, ticks.at(-1), next]);
      }
      return { ticks, next, ids };
    });
    if (!outcome) {
      // Publish again, and come back soon.
      await register();
      return new Date(dbNow() + RETRY_MS);
    }
    const { ticks, next, ids } = outcome;
    if (ids.length > 0) {
      enqueued(ticks.map((tick, i) => ({ schedule: schedule.name, tick, jobId: ids[i]! })));
    }
    return next;
  };

  return {
    name: 'cron',
    setup: register,
    intervalMs: (sleep) => sleep ?? RETRY_MS,
    run: async (signal) => {
      let next = Infinity;
      for (const schedule of schedules) {
        if (signal.aborted) break;
        try {
          const at = await runSchedule(schedule);
          if (at) next = Math.min(next, at.getTime());
        } catch (err) {
          // Try this schedule again soon; the others are unaffected.
          next = Math.min(next, dbNow() + RETRY_MS);
          error(err, schedule.name);
        }
      }
      return Math.min(MAX_SLEEP_MS, Math.max(MIN_SLEEP_MS, next - dbNow()));
    },
  };
}

/** A schedule as stored by the workers that run it, with its next tick. */
export interface ScheduleInfo {
  name: string;
  cron: string;
  timezone: string;
  task: string;
  queue: string;
  payload: unknown;
  priority: number;
  maxAttempts: number;
  backfill: number;
  /** The group of its jobs; null: no group. */
  group: string | null;
  /** The newest tick enqueued; null until the schedule's first tick. */
  lastTick: Date | null;
  /** The next tick after now; null if the pattern has no more (or no longer parses). */
  nextRun: Date | null;
  /**
   * The tick after the last one enqueued (or after the schedule was registered),
   * when it is more than a minute past: no worker is ticking this schedule (it was
   * taken out of the workers' `schedules`, or none of them runs). Null otherwise.
   * deleteSchedule removes a schedule for good.
   */
  overdueSince: Date | null;
  /**
   * The last tick enqueued when it is ahead of the database clock (the clock stepped
   * back, or the row was edited): no tick is enqueued until the clock passes it, and
   * `nextRun` is the tick after it. Null otherwise.
   */
  aheadOfClock: Date | null;
  /**
   * Why the stored pattern or time zone cannot be read (written by another version
   * of Sluice, or by hand), so no worker of this one ticks it; null when it can.
   */
  patternError: string | null;
  /** When a worker last published this definition. */
  updatedAt: Date;
}

interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string;
  task: string;
  queue: string;
  payload: unknown;
  priority: number;
  max_attempts: number;
  backfill: number;
  group_key: string | null;
  last_tick: Date | null;
  counted_from: Date;
  updated_at: Date;
}

/** How late a tick may be before its schedule counts as overdue: a leader's pass, a restart. */
const OVERDUE_AFTER_MS = 60_000;

/**
 * Every schedule any worker has registered in `schema`, with its next run
 * (computed from the stored definition, on the database clock).
 *
 * @example
 *   for (const s of await listSchedules(pool, 'sluice')) console.log(s.name, s.nextRun);
 */
export async function listSchedules(db: Queryable, schema: string): Promise<ScheduleInfo[]> {
  return (await schedulesNow(db, schema)).schedules;
}

/** listSchedules, with the database time they were read at (`sluice doctor` measures overdue ones on it). */
export async function schedulesNow(db: Queryable, schema: string): Promise<{ now: Date; schedules: ScheduleInfo[] }> {
  const q = cronStatements(schema);
  let now: Date;
  let list: ScheduleRow[];
  try {
    [{ now }] = (await rows<{ now: Date }>(db, q.now)) as [{ now: Date }];
    list = await rows<ScheduleRow>(db, q.list);
  } catch (err) {
    // As deleteSchedule and runScheduleNow say it (outside review 217: pg's bare 42P01).
    throw wrapDatabaseError(err, 'listSchedules failed');
  }
  const schedules = list.map((r): ScheduleInfo => {
    let next: Date | null = null;
    let overdueSince: Date | null = null;
    let patternError: string | null = null;
    // Workers enqueue only ticks after last_tick: one ahead of the clock holds the schedule till
    // then (outside review 248: a last_tick of 9999 stopped it, and NEXT RUN showed a time that never came).
    const aheadOfClock = r.counted_from.getTime() > now.getTime() ? r.counted_from : null;
    try {
      const pattern = parseCron(r.name, r.cron, r.timezone);
      next = nextTick(pattern, aheadOfClock ?? now);
      const due = nextTick(pattern, r.counted_from);
      if (due && now.getTime() - due.getTime() > OVERDUE_AFTER_MS) overdueSince = due;
    } catch (err) {
      // Written by a newer or older Sluice with a pattern this one cannot read, or by hand.
      patternError = err instanceof Error ? err.message : String(err);
    }
    return {
      name: r.name,
      cron: r.cron,
      timezone: r.timezone,
      task: r.task,
      queue: r.queue,
      payload: r.payload,
      priority: r.priority,
      maxAttempts: r.max_attempts,
      backfill: r.backfill,
      group: r.group_key,
      lastTick: r.last_tick,
      nextRun: next,
      overdueSince,
      aheadOfClock,
      patternError,
      updatedAt: r.updated_at,
    };
  });
  return { now, schedules };
}
