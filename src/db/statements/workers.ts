import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * The statements of the workers registry (migration 0017, src/worker/registry.ts)
 * and of its readers (src/admin/workers.ts: the dashboard, `sluice doctor`, the
 * unknown-tasks warning), for one schema.
 *
 * A row is alive while its last_seen_at is within `$n` of its own intervals:
 * every reader passes that factor, so they all agree on who is alive.
 */
export interface WorkerRegistryStatements {
  /**
   * $1 id, $2 host, $3 pid, $4 queues, $5 tasks, $6 concurrency, $7 version, $8 interval_ms,
   * $9 visibility_timeout_ms, $10 row_held.
   */
  readonly upsert: string;
  /** $1 id. */
  readonly remove: string;
  /** $1 id, $2 the jobs it leaves whose rows another session holds: kept, stopped, for the rescuer. */
  readonly stopHolding: string;
  /** $1 missed intervals after which a row is deleted. */
  readonly prune: string;
  /** $1 missed intervals after which a row counts as dead; $2 running jobs listed per worker. */
  readonly list: string;
  /** $1 missed intervals after which a row counts as dead. */
  readonly unknownTasks: string;
  /** Queues with due jobs and no live worker ($1 as above): what unknownTasks cannot judge. */
  readonly unwatchedQueues: string;
}

/** SQL: the registry row `row` was refreshed within `factor` of its own intervals. */
const refreshedWithin = (row: string, factor: string): string =>
  `${row}.last_seen_at > now() - ${factor}::float8 * ${row}.interval_ms * interval '1 millisecond'`;

/** SQL: ... and its worker has not stopped: it counts as alive. */
export const alive = (row: string, factor: string): string => `(${refreshedWithin(row, factor)} AND ${row}.stopped_at IS NULL)`;

export const workerRegistryStatements = perSchema((schema: string): WorkerRegistryStatements => {
  const s = quoteSchema(schema);
  return {
    // The same statement at start and on every interval: a row the leader pruned
    // (the worker was cut off for a while) comes back on the next pass by itself.
    // started_at stays what the first insert set.
    // visibility_timeout_ms: after how long without a heartbeat the rescuer may take
    // this worker's jobs (migration 0034). row_held: its jobs whose rows another
    // session holds, which the rescuer leaves to it while the row is alive (0036).
    upsert: `INSERT INTO ${s}.workers (id, host, pid, queues, tasks, concurrency, version, interval_ms, visibility_timeout_ms, row_held)
      VALUES ($1, $2, $3, $4::text[], $5::text[], $6, $7, $8, $9, $10::bigint[])
      ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), host = EXCLUDED.host, pid = EXCLUDED.pid,
        queues = EXCLUDED.queues, tasks = EXCLUDED.tasks, concurrency = EXCLUDED.concurrency,
        version = EXCLUDED.version, interval_ms = EXCLUDED.interval_ms,
        visibility_timeout_ms = EXCLUDED.visibility_timeout_ms, row_held = EXCLUDED.row_held, stopped_at = NULL`,

    remove: `DELETE FROM ${s}.workers WHERE id = $1`,

    stopHolding: `UPDATE ${s}.workers SET row_held = $2::bigint[], stopped_at = now(), last_seen_at = now() WHERE id = $1`,

    // A stopped row (kept for the jobs it lists, see stopHolding) goes like a dead one,
    // and neither before its visibility timeout has passed: the rescuer reads the
    // timeout from it, and without it gave the jobs of a worker at 10 minutes its own
    // (a row refreshed every 15 s went after 20 intervals, 5 minutes).
    prune: `DELETE FROM ${s}.workers w WHERE NOT (${refreshedWithin('w', '$1')})
      AND w.last_seen_at < now() - coalesce(w.visibility_timeout_ms, 0) * 2 * interval '1 millisecond'`,

    // Every registered worker with the jobs it runs now (status processing,
    // locked_by = its id), the first $2 of each. One pass over the processing
    // rows (jobs_processing_idx: a few per worker), not one per worker. Jobs
    // claimed ahead and not started yet have no started_at: listed last.
    list: `WITH held AS (
        SELECT j.locked_by, j.id, j.queue, j.task, j.started_at, j.progress,
          row_number() OVER (PARTITION BY j.locked_by ORDER BY j.started_at NULLS LAST, j.id) AS n
        FROM ${s}.jobs j WHERE j.status = 'processing'
      ), running AS (
        SELECT locked_by, count(*)::int AS count,
          jsonb_agg(jsonb_build_object('id', id::text, 'queue', queue, 'task', task,
            'startedAt', started_at, 'progress', progress) ORDER BY n) FILTER (WHERE n <= $2) AS jobs
        FROM held GROUP BY locked_by
      )
      SELECT w.id, w.host, w.pid, w.queues, w.tasks, w.concurrency, w.version, w.interval_ms AS "intervalMs",
        w.started_at AS "startedAt", w.last_seen_at AS "lastSeenAt", ${alive('w', '$1')} AS alive, w.stopped_at AS "stoppedAt",
        coalesce(r.count, 0) AS "runningCount", coalesce(r.jobs, '[]'::jsonb) AS running
      FROM ${s}.workers w LEFT JOIN running r ON r.locked_by = w.id
      ORDER BY alive DESC, w.started_at, w.id`,

    // Due pending jobs, by queue and task, whose queue has a live worker but
    // whose task none of that queue's live workers handles: nothing will ever
    // claim them. A queue without any live worker is not listed here (its whole
    // backlog waits, which the backlog check reports by age).
    unknownTasks: `WITH live AS (
        SELECT w.queues, w.tasks FROM ${s}.workers w WHERE ${alive('w', '$1')}
      ), due AS (
        SELECT queue, task, count(*)::int AS jobs,
          (extract(epoch FROM now() - min(run_at)) * 1000)::float8 AS "oldestMs"
        FROM ${s}.jobs WHERE status = 'pending' AND run_at <= now()
        GROUP BY queue, task
      )
      SELECT d.queue, d.task, d.jobs, d."oldestMs" FROM due d
      WHERE EXISTS (SELECT FROM live l WHERE d.queue = ANY(l.queues))
        AND NOT EXISTS (SELECT FROM live l WHERE d.queue = ANY(l.queues) AND d.task = ANY(l.tasks))
      ORDER BY d.jobs DESC, d.queue, d.task`,

    unwatchedQueues: `SELECT d.queue FROM (
        SELECT DISTINCT queue FROM ${s}.jobs WHERE status = 'pending' AND run_at <= now()
      ) d
      WHERE NOT EXISTS (SELECT FROM ${s}.workers w WHERE ${alive('w', '$1')} AND d.queue = ANY(w.queues))
      ORDER BY d.queue`,
  };
});
