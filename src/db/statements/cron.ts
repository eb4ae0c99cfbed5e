import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/** The statements of recurring schedules (src/maintenance/cron.ts), for one schema. */
export interface CronStatements {
  readonly register: string;
  readonly lockSchedule: string;
  readonly enqueueTicks: string;
  readonly advance: string;
  readonly list: string;
  /** $1 name, $2 actor: deletes the schedule, recorded in the audit log (migration 0033's detail). */
  readonly remove: string;
  /** The database clock, which schedules are computed on. */
  readonly now: string;
}

/** Longest a worker's schedule transaction may sit idle holding its row (see lockSchedule). */
export const CRON_IDLE_LIMIT = '5s';

/** The cron statements for one schema, built once per schema. */
export const cronStatements = perSchema((schema: string): CronStatements => {
  const s = quoteSchema(schema);
  return {
    // A worker publishes its definitions. A new schedule starts counting from now
    // (it does not run for ticks before it existed); an existing one keeps its
    // last_tick, which is what lets a restart carry on where it stopped.
    register: `INSERT INTO ${s}.cron_schedules
        (name, cron, timezone, task, queue, payload, priority, max_attempts, backfill, group_key, last_tick)
      SELECT d.name, d.cron, d.timezone, d.task, d.queue, d.payload, d.priority, d.max_attempts, d.backfill, d.group_key, now()
      FROM jsonb_to_recordset($1::jsonb) AS d(name text, cron text, timezone text, task text, queue text,
             payload jsonb, priority int, max_attempts int, backfill int, group_key text)
      ON CONFLICT (name) DO UPDATE SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
        task = EXCLUDED.task, queue = EXCLUDED.queue, payload = EXCLUDED.payload,
        priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        backfill = EXCLUDED.backfill, group_key = EXCLUDED.group_key, updated_at = now()`,

    // The worker that locks the row enqueues its due ticks; the others pass it by
    // (SKIP LOCKED: last_tick null, present true) and look again soon, when they
    // find last_tick moved on. A crashed holder's transaction rolls back, and the
    // next look enqueues the tick instead: exactly once either way. Waited for, a
    // row an admin's session held locked stopped every schedule of every worker
    // behind it, with no error, and held up their stop (outside review 200).
    // The row lock lasts at most CRON_IDLE_LIMIT idle in the transaction: a worker frozen
    // (SIGSTOP, a silent network) inside it held the schedule from every worker until its
    // TCP keepalive gave up, hours later (outside review 217); Postgres ends its session.
    lockSchedule: `WITH locked AS (
        SELECT last_tick FROM ${s}.cron_schedules WHERE name = $1 FOR UPDATE SKIP LOCKED
      )
      SELECT (SELECT last_tick FROM locked) AS last_tick, clock_timestamp() AS now,
        EXISTS (SELECT 1 FROM ${s}.cron_schedules WHERE name = $1) AS present,
        set_config('idle_in_transaction_session_timeout', '${CRON_IDLE_LIMIT}', true) AS idle_limit`,

    // One job per tick, keyed 'cron:<name>:<tick ISO>' so a tick's job can be found.
    // $7: the ticks as ISO strings; each job's run_at is its tick. $8: the group, or null.
    enqueueTicks: `SELECT ${s}.enqueue_job($2, $3::jsonb, u.tick::timestamptz, $4, $5, $6,
        'cron:' || $1 || ':' || u.tick, _group_key => $8::text)::text AS id
      FROM unnest($7::text[]) AS u(tick)`,

    advance: `UPDATE ${s}.cron_schedules SET last_tick = $2, next_tick = $3, updated_at = now() WHERE name = $1`,

    // register starts last_tick at now(), the same transaction time as created_at's
    // default, and only a tick moves it: equal means the schedule never ticked.
    // counted_from: the tick the next one follows (the registration before the first).
    list: `SELECT name, cron, timezone, task, queue, payload, priority, max_attempts, backfill, group_key,
        NULLIF(last_tick, created_at) AS last_tick, last_tick AS counted_from, updated_at
      FROM ${s}.cron_schedules ORDER BY name`,

    // A worker that still defines the schedule registers it again when it starts.
    remove: `WITH gone AS (
        DELETE FROM ${s}.cron_schedules WHERE name = $1 RETURNING name, cron, timezone, task, queue
      ), logged AS (
        INSERT INTO ${s}.audit_log (queue, action, actor, detail)
        SELECT queue, 'delete_schedule', $2::text,
          jsonb_build_object('name', name, 'cron', cron, 'timezone', timezone, 'task', task) FROM gone
      )
      SELECT name FROM gone`,

    now: 'SELECT now() AS now',
  };
});
