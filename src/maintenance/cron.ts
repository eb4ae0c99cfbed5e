import type { Driver } from '../db/driver.js';
import { cronStatements, type CronStatements } from '../db/statements/cron.js';
import { rows, type Queryable } from '../db/executor.js';
import { dueTicks, nextTick, parseCron, type ResolvedSchedule } from './cron-schedule.js';

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

/**
 * Enqueues the ticks of recurring schedules. Every worker that has schedules runs
 * one; they need no leader: a tick is enqueued only in the transaction that moves
 * the schedule's last_tick past it, with the row locked, so it becomes exactly one
 * job however many workers pass at once (see cron_schedules in 0002). Sleeps until
 * the next tick, measured on the database clock.
 */
export class CronRunner {
  private readonly queries: CronStatements;
  private timer: NodeJS.Timeout | undefined;
  private stopped = true;
  private passing: Promise<void> | undefined;
  /** Database clock minus local clock, learnt on every pass. */
  private skewMs = 0;

  constructor(
    private readonly db: Driver,
    schema: string,
    private readonly schedules: readonly ResolvedSchedule[],
    private readonly enqueued: (ticks: CronTick[]) => void,
    private readonly error: (err: unknown) => void,
  ) {
    this.queries = cronStatements(schema);
  }

  /** Publishes the definitions, then enqueues what is due (including missed ticks) and keeps going. */
  async start(): Promise<void> {
    this.stopped = false;
    try {
      await this.register();
    } catch (err) {
      this.error(err);
    }
    this.pass();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.passing;
  }

  private async register(): Promise<void> {
    const defs = this.schedules.map((s) => ({
      name: s.name, cron: s.cron, timezone: s.timezone, task: s.task, queue: s.queue,
      payload: JSON.parse(s.payload) as unknown, priority: s.priority, max_attempts: s.maxAttempts, backfill: s.backfill,
    }));
    await this.db.query(this.queries.register, [JSON.stringify(defs)]);
  }

  private pass(): void {
    if (this.stopped) return;
    this.passing = (async () => {
      let next = Infinity;
      for (const schedule of this.schedules) {
        if (this.stopped) break;
        try {
          const at = await this.runSchedule(schedule);
          if (at) next = Math.min(next, at.getTime());
        } catch (err) {
          // Try this schedule again soon; the others are unaffected.
          next = Math.min(next, Date.now() + this.skewMs + 1_000);
          this.error(err);
        }
      }
      if (this.stopped) return;
      const sleep = Math.min(MAX_SLEEP_MS, Math.max(MIN_SLEEP_MS, next - (Date.now() + this.skewMs)));
      this.timer = setTimeout(() => this.pass(), sleep);
      this.timer.unref();
    })();
  }

  /** Enqueues one schedule's due ticks; returns its next tick. */
  private async runSchedule(schedule: ResolvedSchedule): Promise<Date | null> {
    const outcome = await this.db.transaction(async (tx) => {
      const { rows } = await tx.query(this.queries.lockSchedule, [schedule.name]);
      const row = rows[0] as { last_tick: Date; now: Date } | undefined;
      // Deleted under us (or registration failed): nothing to commit.
      if (!row) return undefined;
      this.skewMs = row.now.getTime() - Date.now();
      const ticks = dueTicks(schedule.pattern, row.last_tick, row.now, schedule.backfill);
      const next = nextTick(schedule.pattern, row.now);
      let ids: string[] = [];
      if (ticks.length > 0) {
        const result = await tx.query(this.queries.enqueueTicks, [
          schedule.name, schedule.queue, schedule.payload, schedule.maxAttempts, schedule.task, schedule.priority,
          ticks.map((t) => t.toISOString()),
        ]);
        ids = result.rows.map((r: { id: string }) => r.id);
        await tx.query(this.queries.advance, [schedule.name, ticks.at(-1), next]);
      }
      return { ticks, next, ids };
    });
    if (!outcome) {
      // Publish again, and come back soon.
      await this.register();
      return new Date(Date.now() + this.skewMs + 1_000);
    }
    const { ticks, next, ids } = outcome;
    if (ids.length > 0) {
      this.enqueued(ticks.map((tick, i) => ({ schedule: schedule.name, tick, jobId: ids[i]! })));
    }
    return next;
  }
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
  /** The newest tick enqueued (or when the schedule was first registered). */
  lastTick: Date;
  /** The next tick after now; null if the pattern has no more (or no longer parses). */
  nextRun: Date | null;
  /** When a worker last published this definition. */
  updatedAt: Date;
}

interface ScheduleRow {
  name: string; cron: string; timezone: string; task: string; queue: string; payload: unknown;
  priority: number; max_attempts: number; backfill: number; last_tick: Date; updated_at: Date;
}

/**
 * Every schedule any worker has registered in `schema`, with its next run
 * (computed from the stored definition, on the database clock).
 *
 * @example
 *   for (const s of await listSchedules(pool, 'sluice')) console.log(s.name, s.nextRun);
 */
export async function listSchedules(db: Queryable, schema: string): Promise<ScheduleInfo[]> {
  const q = cronStatements(schema);
  const [{ now }] = (await rows<{ now: Date }>(db, q.now)) as [{ now: Date }];
  const list = await rows<ScheduleRow>(db, q.list);
  return list.map((r) => {
    let next: Date | null = null;
    try {
      next = nextTick(parseCron(r.name, r.cron, r.timezone), now);
    } catch {
      // Written by a newer or older Sluice with a pattern this one cannot read.
    }
    return {
      name: r.name, cron: r.cron, timezone: r.timezone, task: r.task, queue: r.queue, payload: r.payload,
      priority: r.priority, maxAttempts: r.max_attempts, backfill: r.backfill, lastTick: r.last_tick,
      nextRun: next, updatedAt: r.updated_at,
    };
  });
}
