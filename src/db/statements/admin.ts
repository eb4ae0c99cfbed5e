import { quoteSchema } from '../identifiers.js';
import { findJobStatement, jobColumns, pageColumns, payloadLength } from './job-columns.js';
import { perSchema } from './per-schema.js';

/**
 * The statements of the admin API (src/admin/*: the CLI's `jobs` and `stats`
 * commands, the dashboard), for one schema. Values are always `$n` parameters;
 * the schema is the only text spliced in, quoted once.
 *
 * Optional filters are written `($n IS NULL OR ...)`. node-postgres sends
 * unnamed statements, which Postgres plans with the actual values, so a NULL
 * filter folds away and the plan is the one for the filters really given.
 */
export interface AdminStatements {
  readonly schema: string;
  /** Newest first, ids below the `before` cursor ($4, may be NULL). */
  readonly listOlder: string;
  /** Oldest first, ids above the `after` cursor ($4): the page just newer than a cursor. */
  readonly listNewer: string;
  readonly statusOf: string;
  readonly retry: string;
  readonly retryFailed: string;
  readonly cancel: string;
  /** cancelJobs: $1 queue or NULL, $2 statuses, $3 actor, $4 channel, $5 outcome channel, $6 task or NULL. */
  readonly cancelMany: string;
  readonly deleteJob: string;
  readonly deleteFinishedBatch: string;
  readonly stats: string;
  readonly throughput: string;
  readonly auditOfJob: string;
  readonly getJob: string;
}

/** The admin statements for one schema, built once per schema: the dashboard asks for them per request. */
export const adminStatements = perSchema((schema: string): AdminStatements => {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  // $1 statuses, $2 queues, $3 tasks (text[] or NULL for "any"); $6, $7 a window
  // of created_at (NULL: open). `row` is the alias of the filtered columns and
  // `created` the created_at column (of the rebuilt row, for jobs_history).
  // There is no index on created_at: the time window is checked along the id
  // walk, which is cheap for recent windows (ids grow with created_at) and
  // reads the newer rows first for a window far back.
  const filtersOn = (row: string, created: string) => `($1::text[] IS NULL OR ${row}.status = ANY($1::text[]))
      AND ($2::text[] IS NULL OR ${row}.queue = ANY($2::text[]))
      AND ($3::text[] IS NULL OR ${row}.task = ANY($3::text[]))
      AND ($6::timestamptz IS NULL OR ${created} >= $6::timestamptz)
      AND ($7::timestamptz IS NULL OR ${created} < $7::timestamptz)`;

  // A page of jobs from the hot table and from jobs_history (where the pruner
  // moves finished jobs), merged by id. Each branch is its own keyset walk down
  // (or up) an id index and stops after $5 rows, so a page costs two short
  // index scans whatever the table sizes. One snapshot reads both and the pruner
  // moves a row in one statement: a job shows up exactly once. `op` compares
  // ids with the cursor $4 (NULL: from the newest), `dir` is the walk's order.
  const listPage = (op: '<' | '>', dir: 'ASC' | 'DESC') => `SELECT ${pageColumns('$8')}
    FROM (SELECT * FROM (
        (SELECT ${jobColumns('j')}, false AS archived FROM ${jobs} j
          WHERE ${filtersOn('j', 'j.created_at')} AND ($4::bigint IS NULL OR j.id ${op} $4::bigint)
          ORDER BY j.id ${dir} LIMIT $5)
        UNION ALL
        (SELECT ${jobColumns('h')}, true AS archived FROM ${s}.jobs_history x
          CROSS JOIN LATERAL jsonb_populate_record(NULL::${jobs}, x.job) h
          WHERE ${filtersOn('x', 'h.created_at')} AND ($4::bigint IS NULL OR x.id ${op} $4::bigint)
          ORDER BY x.id ${dir} LIMIT $5)
      ) page ORDER BY page.id::bigint ${dir} LIMIT $5) page
    ${payloadLength('$8')}
    ORDER BY page.id::bigint ${dir}`;

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

  // Cancels the rows of CTE "target" (id, status): the status, and in the same
  // statement the control message for the worker of each processing one
  // ({"c":"cancel","id":…,"attempt":n}, src/notify/codec.ts) on $4, and one on $5
  // for the waiters of each flagged one.
  const cancelTargets = `UPDATE ${jobs} j
        SET status = 'cancelled', finished_at = now(), locked_at = NULL, updated_at = now()
        FROM target t
        WHERE j.id = t.id
        RETURNING j.*, t.status AS previous_status,
          (CASE WHEN t.status = 'processing'
                THEN pg_notify($4, jsonb_build_object('c', 'cancel', 'id', j.id::text, 'attempt', j.attempts)::text) END) IS NULL
            AS told_worker,
          (CASE WHEN j.notify_on_finish THEN pg_notify($5, j.id::text) END) IS NULL AS told_waiters`;

  // "Within the last $n ms", and the first of the last $1 minutes.
  const since = (ms: string) => `now() - ${ms}::float8 * interval '1 millisecond'`;
  const minutesBack = `date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute'`;

  return {
    schema,

    // Keyset pagination: "id < cursor ORDER BY id DESC LIMIT n" walks the primary
    // key backwards from the cursor, so page 1,000 costs what page 1 does
    // (OFFSET would read and discard every earlier row). Sorting says id::bigint:
    // the output column id is text and would sort '10' before '9'.
    listOlder: listPage('<', 'DESC'),

    listNewer: listPage('>', 'ASC'),

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

    // $2: the statuses a job may be cancelled from (see CANCELLABLE in src/job.ts),
    // $4: the schema's channel, $5: its outcome channel. The control message
    // (cancelTargets) names the attempt it cancelled: a notification that reaches
    // a worker late must not abort a later attempt of the job, retried since
    // (outside review 261). A job that was 'processing' gets that NOTIFY in the
    // same statement, so the worker running it aborts its handler when this
    // commits (never for a rolled-back cancel); Queue.waitFor() callers are woken
    // as for any outcome.
    // The NOTIFYs sit in RETURNING, which is computed for every changed row.
    // FOR UPDATE makes a cancel that races a claim wait for it and then see
    // 'processing'. The worker's late result cannot undo the cancel: results are
    // only written while the row is 'processing'.
    cancel: `WITH target AS (
        SELECT id, status FROM ${jobs} WHERE id = $1::bigint AND status = ANY($2::text[]) FOR UPDATE
      ), changed AS (
        ${cancelTargets}
      ), ${audited('cancel', ', changed.previous_status')}`,

    // The same for every job of a queue and/or task, in one statement: its row locks
    // keep the claims (SKIP LOCKED) off all of them at once. Cancelled a batch at a
    // time, the slots the first batch's aborted handlers freed claimed jobs of the
    // next, which started and were aborted in turn: 14 handlers began for 4 running.
    // A row claimed meanwhile is waited for and seen 'processing', as by a single
    // cancel. Counted by the status each job had.
    cancelMany: `WITH target AS (
        SELECT id, status FROM ${jobs}
        WHERE status = ANY($2::text[]) AND ($1::text IS NULL OR queue = $1::text) AND ($6::text IS NULL OR task = $6::text)
        FOR UPDATE
      ), changed AS (
        ${cancelTargets}
      ), logged AS (
        INSERT INTO ${s}.audit_log (job_id, queue, action, actor)
        SELECT id, queue, 'cancel', $3::text FROM changed
      )
      SELECT count(*) FILTER (WHERE previous_status = 'pending')::int AS pending,
        count(*) FILTER (WHERE previous_status = 'processing')::int AS processing
      FROM changed`,

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

    // Everything `sluice stats` shows, named as the QueueStats fields
    // (src/admin/stats.ts). Counts by status are exact, one pass over the hot
    // table (about 0.2 s per million rows) plus the jobs the pruner moved to
    // jobs_history (after a minute, by default): without them a queue's finished
    // jobs would vanish from its counts, and a queue whose jobs all finished from
    // the list. One snapshot reads both tables and the pruner moves a row in one
    // statement, so no job is counted twice or missed.
    stats: `WITH hot AS (
        SELECT queue,
          count(*) FILTER (WHERE status = 'pending')::int AS pending,
          count(*) FILTER (WHERE status = 'pending' AND run_at > now())::int AS scheduled,
          count(*) FILTER (WHERE status = 'processing')::int AS processing,
          count(*) FILTER (WHERE status = 'completed')::int AS completed,
          count(*) FILTER (WHERE status = 'failed')::int AS failed,
          count(*) FILTER (WHERE status = 'cancelled')::int AS cancelled,
          (extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now())) * 1000)::float8
            AS oldest_pending_ms,
          count(*) FILTER (WHERE status = 'completed' AND finished_at > ${since('$1')})::int AS completed_in_window,
          count(*) FILTER (WHERE status = 'failed' AND finished_at > ${since('$1')})::int AS failed_in_window,
          count(*) FILTER (WHERE status = 'cancelled' AND finished_at > ${since('$1')})::int AS cancelled_in_window
        FROM ${jobs}
        GROUP BY queue
      ), archived_counts AS (
        -- All of the history, counted per queue and status with nothing to compute
        -- per row (an index-only scan of jobs_history_counts_idx, migration 0018),
        -- and the window's few rows through jobs_history_finished_idx.
        SELECT queue, status, count(*)::int AS total, 0 AS in_window
        FROM ${s}.jobs_history GROUP BY queue, status
        UNION ALL
        SELECT queue, status, 0, count(*)::int
        FROM ${s}.jobs_history WHERE finished_at > ${since('$1')} GROUP BY queue, status
      ), archived AS (
        SELECT queue,
          sum(total) FILTER (WHERE status = 'completed')::int AS completed,
          sum(total) FILTER (WHERE status = 'failed')::int AS failed,
          sum(total) FILTER (WHERE status = 'cancelled')::int AS cancelled,
          sum(in_window) FILTER (WHERE status = 'completed')::int AS completed_in_window,
          sum(in_window) FILTER (WHERE status = 'failed')::int AS failed_in_window,
          sum(in_window) FILTER (WHERE status = 'cancelled')::int AS cancelled_in_window
        FROM archived_counts
        GROUP BY queue
      )
      SELECT queue,
        coalesce(h.pending, 0) AS pending, coalesce(h.scheduled, 0) AS scheduled,
        coalesce(h.processing, 0) AS processing,
        coalesce(h.completed, 0) + coalesce(a.completed, 0) AS completed,
        coalesce(h.failed, 0) + coalesce(a.failed, 0) AS failed,
        coalesce(h.cancelled, 0) + coalesce(a.cancelled, 0) AS cancelled,
        h.oldest_pending_ms AS "oldestPendingMs",
        coalesce(h.completed_in_window, 0) + coalesce(a.completed_in_window, 0) AS "completedInWindow",
        coalesce(h.failed_in_window, 0) + coalesce(a.failed_in_window, 0) AS "failedInWindow",
        coalesce(h.cancelled_in_window, 0) + coalesce(a.cancelled_in_window, 0) AS "cancelledInWindow",
        coalesce(q.paused, false) AS paused
      FROM hot h FULL JOIN archived a USING (queue)
      LEFT JOIN ${s}.queues q ON q.name = queue
      ORDER BY queue`,

    // Jobs finished per minute over the last $1 minutes (the current minute
    // included), of one queue ($2) or all (NULL); minutes without any are 0.
    // From the hot table and jobs_history, as in stats. Aggregate first, then
    // join the minutes. The hot table holds few finished rows once the pruner
    // runs; jobs_history is read through jobs_history_finished_idx (migration 0008).
    throughput: `WITH finished AS (
        SELECT finished_at, status FROM ${jobs}
        WHERE status IN ('completed', 'failed') AND finished_at >= ${minutesBack}
          AND ($2::text IS NULL OR queue = $2::text)
        UNION ALL
        SELECT finished_at, status FROM ${s}.jobs_history
        WHERE status IN ('completed', 'failed') AND finished_at >= ${minutesBack}
          AND ($2::text IS NULL OR queue = $2::text)
      ), per_minute AS (
        SELECT date_trunc('minute', finished_at) AS minute,
               count(*) FILTER (WHERE status = 'completed')::int AS completed,
               count(*) FILTER (WHERE status = 'failed')::int AS failed
        FROM finished GROUP BY 1
      )
      SELECT m.minute, coalesce(f.completed, 0) AS completed, coalesce(f.failed, 0) AS failed
      FROM generate_series(${minutesBack}, date_trunc('minute', now()), interval '1 minute') AS m(minute)
      LEFT JOIN per_minute f USING (minute)
      ORDER BY m.minute`,

    // Who did what to one job, oldest first (audit_log: migration 0007).
    auditOfJob: `SELECT at, action, actor FROM ${s}.audit_log WHERE job_id = $1::bigint ORDER BY id`,

    getJob: findJobStatement(schema),
  };
});
