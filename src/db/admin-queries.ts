import { quoteSchema } from './identifiers.js';
import { jobColumns } from './queries.js';

/**
 * The statements of the admin API (src/admin/*: the CLI's `jobs` and `stats`
 * commands, the dashboard), for one schema. Values are always `$n` parameters;
 * the schema is the only text spliced in, quoted once.
 *
 * Optional filters are written `($n IS NULL OR ...)`. node-postgres sends
 * unnamed statements, which Postgres plans with the actual values, so a NULL
 * filter folds away and the plan is the one for the filters really given.
 */
export interface AdminQueries {
  readonly schema: string;
  /** Newest first, ids below the `before` cursor ($4, may be NULL). */
  readonly listOlder: string;
  /** Oldest first, ids above the `after` cursor ($4): the page just newer than a cursor. */
  readonly listNewer: string;
  readonly statusOf: string;
  readonly retry: string;
  readonly retryFailed: string;
  readonly cancel: string;
  readonly deleteJob: string;
  readonly deleteFinishedBatch: string;
  readonly stats: string;
  readonly throughput: string;
  readonly auditOfJob: string;
}

export function buildAdminQueries(schema: string): AdminQueries {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  // $1 statuses, $2 queues, $3 tasks (text[] or NULL for "any"); $6, $7 a window
  // of created_at (NULL: open). There is no index on created_at: the time window
  // is checked along the id walk, which is cheap for recent windows (ids grow
  // with created_at) and reads the newer rows first for a window far back.
  const filters = `($1::text[] IS NULL OR status = ANY($1::text[]))
      AND ($2::text[] IS NULL OR queue = ANY($2::text[]))
      AND ($3::text[] IS NULL OR task = ANY($3::text[]))
      AND ($6::timestamptz IS NULL OR created_at >= $6::timestamptz)
      AND ($7::timestamptz IS NULL OR created_at < $7::timestamptz)`;

  // Back to pending now, lock fields cleared. A job that spent all its attempts
  // gets exactly one more (max_attempts is raised to attempts + 1): the attempt
  // count and last_error stay as history of what happened.
  // A retried job gives up its job key (migration 0002): another job may hold the
  // key by now, and taking it back here would violate jobs_job_key_idx.
  const requeue = `status = 'pending', run_at = now(), locked_at = NULL, locked_by = NULL, finished_at = NULL,
        max_attempts = least(1000, greatest(j.max_attempts, j.attempts + 1)), updated_at = now(),
        key_scope = CASE WHEN j.key_scope IS NULL THEN NULL ELSE 'released' END`;

  // The audit record of a single-job action ($3: actor), written by the same
  // statement from the rows the action changed (CTE "changed").
  // Both are spliced into the text, so their types admit only these constants.
  const audited = (action: 'retry' | 'cancel' | 'delete', extraColumns: '' | ', changed.previous_status' = '') => `logged AS (
        INSERT INTO ${s}.audit_log (job_id, queue, action, actor)
        SELECT id, queue, '${action}', $3::text FROM changed
      )
      SELECT ${jobColumns('changed')}${extraColumns} FROM changed`;

  return {
    schema,

    // Keyset pagination: "id < cursor ORDER BY id DESC LIMIT n" walks the primary
    // key backwards from the cursor, so page 1,000 costs what page 1 does
    // (OFFSET would read and discard every earlier row).
    // ORDER BY says j.id: a bare "id" would mean the output column, id::text,
    // and sort '10' before '9'.
    listOlder: `SELECT ${jobColumns('j')} FROM ${jobs} j
      WHERE ${filters} AND ($4::bigint IS NULL OR j.id < $4::bigint)
      ORDER BY j.id DESC LIMIT $5`,

    listNewer: `SELECT ${jobColumns('j')} FROM ${jobs} j
      WHERE ${filters} AND j.id > $4::bigint
      ORDER BY j.id ASC LIMIT $5`,

    statusOf: `SELECT status FROM ${jobs} WHERE id = $1::bigint`,

    // $2: the statuses a job may be retried from.
    retry: `WITH changed AS (
        UPDATE ${jobs} j SET ${requeue}
        WHERE j.id = $1::bigint AND j.status = ANY($2::text[])
        RETURNING j.*
      ), ${audited('retry')}`,

    // Counted per queue rather than returning every id: this may touch a million
    // rows, and the caller only needs to know which queues to wake.
    // $2: actor. Every retried job gets its own audit row.
    retryFailed: `WITH retried AS (
        UPDATE ${jobs} j SET ${requeue}
        WHERE j.status = 'failed' AND ($1::text IS NULL OR j.queue = $1::text)
        RETURNING j.id, j.queue
      ), logged AS (
        INSERT INTO ${s}.audit_log (job_id, queue, action, actor)
        SELECT id, queue, 'retry', $2::text FROM retried
      )
      SELECT queue, count(*)::int AS count FROM retried GROUP BY queue ORDER BY queue`,

    // $2: the statuses a job may be cancelled from (see CANCELLABLE in src/admin/jobs.ts),
    // $4: the schema's channel, $5: its outcome channel. A job that was
    // 'processing' gets a NOTIFY ({"c":"cancel","id":…}) in the same statement, so
    // the worker running it aborts its handler when this commits (never for a
    // rolled-back cancel); Queue.waitFor() callers are woken as for any outcome.
    // The NOTIFYs sit in RETURNING, which is computed for every changed row.
    // FOR UPDATE makes a cancel that races a claim wait for it and then see
    // 'processing'. The worker's late result cannot undo the cancel: results are
    // only written while the row is 'processing'.
    cancel: `WITH target AS (
        SELECT id, status FROM ${jobs} WHERE id = $1::bigint AND status = ANY($2::text[]) FOR UPDATE
      ), changed AS (
        UPDATE ${jobs} j
        SET status = 'cancelled', finished_at = now(), locked_at = NULL, updated_at = now()
        FROM target t
        WHERE j.id = t.id
        RETURNING j.*, t.status AS previous_status,
          (CASE WHEN t.status = 'processing'
                THEN pg_notify($4, json_build_object('c', 'cancel', 'id', j.id::text)::text) END) IS NULL AS told_worker,
          (CASE WHEN j.notify_on_finish THEN pg_notify($5, j.id::text) END) IS NULL AS told_waiters
      ), ${audited('cancel', ', changed.previous_status')}`,

    // $2: the statuses a job may be deleted in (never while a worker runs it).
    deleteJob: `WITH changed AS (
        DELETE FROM ${jobs} j
        WHERE j.id = $1::bigint AND j.status = ANY($2::text[])
        RETURNING j.*
      ), ${audited('delete')}`,

    // One batch of a bulk delete, walking the primary key upwards from $1 so that
    // every batch starts where the last stopped: the whole delete reads the table
    // once, and no single statement holds a million row locks or a huge WAL burst.
    // Returns how many rows went and the highest id seen (the next cursor).
    deleteFinishedBatch: `WITH doomed AS (
        SELECT id FROM ${jobs}
        WHERE id > $1::bigint AND status = ANY($2::text[])
          AND finished_at < now() - $3::float8 * interval '1 millisecond'
        ORDER BY id
        LIMIT $4
      ), deleted AS (
        DELETE FROM ${jobs} j USING doomed d WHERE j.id = d.id RETURNING j.id
      )
      SELECT count(*)::int AS count, max(id)::text AS last_id FROM deleted`,

    // Everything `sluice stats` shows, in one pass over the table, named as the
    // QueueStats fields (src/admin/stats.ts). Exact counts
    // cost a sequential scan (about 0.2 s per million rows); a queue that needs
    // cheaper numbers can prune finished jobs.
    stats: `SELECT queue,
        count(*) FILTER (WHERE status = 'pending')::int AS pending,
        count(*) FILTER (WHERE status = 'pending' AND run_at > now())::int AS scheduled,
        count(*) FILTER (WHERE status = 'processing')::int AS processing,
        count(*) FILTER (WHERE status = 'completed')::int AS completed,
        count(*) FILTER (WHERE status = 'failed')::int AS failed,
        count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled,
        (extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now())) * 1000)::float8
          AS "oldestPendingMs",
        count(*) FILTER (WHERE status = 'completed' AND finished_at > now() - $1::float8 * interval '1 millisecond')::int
          AS "completedInWindow",
        count(*) FILTER (WHERE status = 'failed' AND finished_at > now() - $1::float8 * interval '1 millisecond')::int
          AS "failedInWindow"
      FROM ${jobs}
      GROUP BY queue
      ORDER BY queue`,

    // Jobs finished per minute over the last $1 minutes (the current minute
    // included), of one queue ($2) or all (NULL); minutes without any are 0.
    // Aggregate first, then join the minutes: one pass over the table (like
    // stats, no index on finished_at: one would be rewritten by every completion
    // and cost the hot path its HOT updates).
    throughput: `WITH finished AS (
        SELECT date_trunc('minute', finished_at) AS minute,
               count(*) FILTER (WHERE status = 'completed')::int AS completed,
               count(*) FILTER (WHERE status = 'failed')::int AS failed
        FROM ${jobs}
        WHERE status IN ('completed', 'failed')
          AND finished_at >= date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute'
          AND ($2::text IS NULL OR queue = $2::text)
        GROUP BY 1
      )
      SELECT m.minute, coalesce(f.completed, 0) AS completed, coalesce(f.failed, 0) AS failed
      FROM generate_series(date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute',
                           date_trunc('minute', now()), interval '1 minute') AS m(minute)
      LEFT JOIN finished f USING (minute)
      ORDER BY m.minute`,

    // Who did what to one job, oldest first (audit_log: migration 0007).
    auditOfJob: `SELECT at, action, actor FROM ${s}.audit_log WHERE job_id = $1::bigint ORDER BY id`,
  };
}
