import { quoteSchema } from './identifiers.js';

/**
 * Every statement the runtime sends, in one place, for one schema. Values are
 * always `$n` parameters; the schema is the only text spliced in, quoted once.
 *
 * The columns a worker reads back are listed explicitly, so a later migration
 * that adds a column does not change what the hot path transfers.
 */
const JOB_FIELDS = [
  'queue', 'task', 'payload', 'status', 'priority', 'run_at', 'attempts', 'max_attempts',
  'locked_at', 'locked_by', 'last_error', 'created_at', 'updated_at', 'finished_at', 'job_key',
  'trace_context',
];

/** Read by getJob and the admin views, not by the claim: they can be large. */
const DETAIL_FIELDS = ['key_scope', 'errors', 'result', 'progress'];

/** Most entries kept in a job's error history (`errors`). */
export const MAX_ERROR_HISTORY = 100;

/**
 * The error history without its oldest entry once it is full, ready to take one
 * more: every failure rewrites the whole array, so it must not grow without bound.
 */
function keepRecent(column: string): string {
  return `(CASE WHEN jsonb_array_length(${column}) >= ${MAX_ERROR_HISTORY} THEN ${column} - 0 ELSE ${column} END)`;
}

/** The detail columns (migration 0002) of one job, for single-job reads. */
export function detailColumns(alias?: string): string {
  return DETAIL_FIELDS.map((f) => (alias ? `${alias}.${f}` : f)).join(', ');
}

/** The select list of a job row; ids travel as text (bigint does not fit a JS number). */
export function jobColumns(alias?: string): string {
  const p = alias ? `${alias}.` : '';
  return [`${p}id::text AS id`, ...JOB_FIELDS.map((f) => p + f)].join(', ');
}

/**
 * One job in full, by id ($1): the hot table first, then the history the pruner
 * moved it to. Both branches read one snapshot and the pruner moves a row in one
 * statement, so a job is found exactly once even while it is being moved.
 * jsonb_populate_record turns the archived jsonb back into a jobs row, whatever
 * columns jobs has today. `s` is the quoted schema.
 */
export function findJobQuery(s: string): string {
  return `SELECT ${jobColumns()}, ${detailColumns()} FROM ${s}.jobs WHERE id = $1::bigint
      UNION ALL
      SELECT ${jobColumns('h')}, ${detailColumns('h')} FROM ${s}.jobs_history x
        CROSS JOIN LATERAL jsonb_populate_record(NULL::${s}.jobs, x.job) h
      WHERE x.id = $1::bigint
      LIMIT 1`;
}

export interface Queries {
  readonly schema: string;
  readonly enqueue: string;
  readonly enqueueDeferred: string;
  readonly wake: string;
  readonly enqueueMany: string;
  /** The worker cycle for a worker of one queue. */
  readonly cycle: string;
  /** The worker cycle for a worker of several queues. */
  readonly cycleManyQueues: string;
  readonly heartbeat: string;
  readonly release: string;
  readonly rescue: string;
  readonly notify: string;
  readonly getJob: string;
  readonly enqueueKeyed: string;
  readonly enqueueManyKeyed: string;
  readonly watchJob: string;
  readonly progress: string;
  readonly countByStatus: string;
  readonly claimLimited: string;
  readonly snooze: string;
  readonly queueState: string;
}

/**
 * One round trip per worker cycle: record the results of finished jobs and claim
 * the next batch. Data-modifying CTEs all run, referenced or not, in one
 * snapshot; they touch disjoint rows (processing vs pending), so they never see or
 * block each other.
 *
 * A result counts only while the row is still 'processing', still held by this
 * worker instance ($1) and still on the same attempt: a job rescued from this
 * worker (and maybe claimed again elsewhere), or cancelled while it ran, cannot be
 * finished by it. Whether a failure is final ($8) is decided by the worker, which
 * knows the task's retry policy (maxAttempts may override the row's).
 *
 * The claim takes its rows with SELECT ... FOR UPDATE SKIP LOCKED: workers skip
 * rows another claim holds instead of waiting on them.
 *
 * This is a named prepared statement, so Postgres soon switches to a generic plan
 * that cannot see $9 or $11. It is written so that plan is still the right one
 * (measured with EXPLAIN on 100,000 pending jobs, where the earlier form got a seq
 * scan, a sort and a hash join: ~100 ms per claim instead of ~1 ms):
 * - a worker of one queue filters on queue = $9[1], an equality on the leading
 *   column of jobs_dequeue_idx, so the index returns rows already in claim order
 *   and the scan stops after $11 of them. queue = ANY($9) cannot do that (the index
 *   is not ordered across queues): workers of several queues use cycleManyQueues.
 * - the claimed ids reach the UPDATE as an array (id = ANY(ARRAY(...))), so the
 *   update is primary-key lookups whatever LIMIT $11 is guessed to be.
 *
 * Paused queues are never claimed, and queues with a global concurrency limit only
 * through claimLimited. The worker already leaves them out of $9 (it caches the
 * queues table), so the `<> ALL` line only guards against a stale cache. It sits on
 * the outer UPDATE, not in the inner SELECT, on purpose: the planner estimates
 * `queue <> ALL (<InitPlan>)` as matching ~0.1% of rows, and inside the SELECT that
 * made it drop the in-order index scan for a sequential scan and a sort of every
 * due job (so did a NOT EXISTS anti-join). Out here it is checked once per
 * candidate row (at most $11). A stale worker may lock such rows for the length of
 * its statement and leave them pending. `node --import tsx bench/claim-guard.ts`.
 */
function cycleStatement(jobs: string, queues: string, queueFilter: 'queue = ($9::text[])[1]' | 'queue = ANY($9::text[])'): string {
  return `WITH completed AS (
        UPDATE ${jobs} j
        SET status = 'completed', locked_at = NULL, finished_at = now(), updated_at = now(),
            result = d.result -- $12: what each handler returned (JSON text or NULL)
        FROM unnest($2::bigint[], $3::int[], $12::jsonb[]) AS d(id, attempt, result)
        WHERE j.id = d.id AND j.attempts = d.attempt AND j.status = 'processing' AND j.locked_by = $1
        RETURNING j.id, j.notify_on_finish
      ), failed AS (
        UPDATE ${jobs} j
        SET status = CASE WHEN f.final THEN 'failed' ELSE 'pending' END,
            run_at = CASE WHEN f.final THEN j.run_at ELSE now() + f.delay_ms * interval '1 millisecond' END,
            finished_at = CASE WHEN f.final THEN now() END,
            last_error = f.error, locked_at = NULL, updated_at = now(),
            -- The history stays on the row for dead-letter inspection. The error
            -- text is the stack, whose first line is "Name: message". Capped: see keepRecent.
            errors = ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', f.attempt, 'at', now(),
              'message', split_part(f.error, chr(10), 1), 'stack', f.error))
        FROM unnest($4::bigint[], $5::int[], $6::text[], $7::float8[], $8::bool[])
          AS f(id, attempt, error, delay_ms, final)
        WHERE j.id = f.id AND j.attempts = f.attempt AND j.status = 'processing' AND j.locked_by = $1
        RETURNING j.id, j.status, j.notify_on_finish
      ), claimed AS (
        UPDATE ${jobs} j
        SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = $1,
            updated_at = now(),
            -- A key held only while pending is given up when the job starts, so it
            -- is never taken back when the job returns to pending (see 0002).
            key_scope = CASE WHEN j.key_scope = 'pending' THEN 'released' ELSE j.key_scope END
        WHERE j.id = ANY(ARRAY(
          SELECT id FROM ${jobs}
          WHERE status = 'pending' AND ${queueFilter} AND task = ANY($10::text[]) AND run_at <= now()
          ORDER BY priority DESC, run_at, id
          LIMIT $11
          FOR UPDATE SKIP LOCKED))
          AND j.queue <> ALL (ARRAY(SELECT name FROM ${queues} WHERE paused OR concurrency_limit IS NOT NULL))
        RETURNING j.*
      ), notified AS (
        -- Outcome notifications ($13 = 'sluice:<schema>:done'), only for jobs that
        -- Queue.waitFor() flagged and that are finished for good: the common case
        -- sends nothing. A plain SELECT CTE runs only when something needs its
        -- value, so applied filters on it (an unused output column would be dropped).
        SELECT count(pg_notify($13, w.id::text)) AS n FROM (
          SELECT id FROM completed WHERE notify_on_finish
          UNION ALL SELECT id FROM failed WHERE notify_on_finish AND status = 'failed'
        ) w
      ), applied AS (
        SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM completed) AS completed_ids,
               (SELECT coalesce(array_agg(id::text), '{}') FROM failed) AS failed_ids
        WHERE (SELECT n FROM notified) >= 0
      )
      SELECT a.completed_ids, a.failed_ids, ${jobColumns('c')}
      FROM applied a LEFT JOIN claimed c ON true`;
}

const ENQUEUE_COLUMNS = 'queue, task, payload, run_at, max_attempts, priority, trace_context';
/** $1..$8 of a single enqueue, typed so that they also work in INSERT ... SELECT. */
const ENQUEUE_VALUES = `$1::text, $2::text, $3::text::jsonb,
  coalesce($4::timestamptz, clock_timestamp()) + $5::float8 * interval '1 millisecond', $6::int, $7::int, $8::text::jsonb`;

export function buildQueries(schema: string): Queries {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  const queues = `${s}.queues`;
  // JSON parameters of the enqueue statements are cast from text ($n::text::jsonb):
  // they can run on a caller's postgres.js connection (a transaction adapter),
  // which would otherwise JSON.stringify the already-encoded text a second time.
  return {
    schema,

    // A plain INSERT: the cheapest possible enqueue (the statement trigger adds one
    // NOTIFY per statement). run_at is computed by the server so client clocks do
    // not matter for delays.
    // $8: the enqueuing span's trace context (migration 0005), NULL without tracing.
    enqueue: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS}) VALUES (${ENQUEUE_VALUES})
      RETURNING id::text AS id`,

    // The same INSERT with the trigger's NOTIFY turned off for this statement only
    // (set_config(..., true) lasts until the end of the implicit transaction); the
    // Queue sends the wake-up after the COMMIT instead (see migration 0004 and
    // src/wake-ups.ts). Only for statements that are their own transaction.
    enqueueDeferred: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS})
      SELECT ${ENQUEUE_VALUES} FROM (SELECT set_config('sluice.wake', 'deferred', true)) AS deferred
      RETURNING id::text AS id, floor(extract(epoch FROM run_at) * 1000)::float8 AS run_at_ms`,

    // Wake-ups sent after the COMMIT of deferred enqueues: the payload the trigger
    // would have sent, one per queue. This statement writes nothing.
    wake: `SELECT pg_notify($1, json_build_object('q', w.q, 't', w.t)::text)
      FROM unnest($2::text[], $3::float8[]) AS w(q, t)`,

    // Many jobs in one statement and one round trip: the rows travel as one JSON
    // array, so 10,000 jobs are a single parameter. One statement also means one
    // trigger call, so one wake-up per queue instead of one per row.
    enqueueMany: `INSERT INTO ${jobs} (queue, task, payload, run_at, max_attempts, priority, trace_context)
      SELECT j.queue, j.task, j.payload,
             coalesce(j.run_at, clock_timestamp()) + coalesce(j.delay_ms, 0) * interval '1 millisecond',
             j.max_attempts, j.priority, $2::text::jsonb
      FROM ROWS FROM (jsonb_to_recordset($1::text::jsonb) AS (queue text, task text, payload jsonb,
             run_at timestamptz, delay_ms float8, max_attempts int, priority int))
        WITH ORDINALITY AS j(queue, task, payload, run_at, delay_ms, max_attempts, priority, ord)
      ORDER BY j.ord
      RETURNING id::text AS id`,

    // With a job key the insert goes through enqueue_job() (migration 0002), which
    // does the INSERT ... ON CONFLICT on jobs_job_key_idx and the keep / replace /
    // error choice in one place for SQL and JS callers alike. Plain jobs keep the
    // cheaper statements above.
    enqueueKeyed: `SELECT ${s}.enqueue_job($1, $3::text::jsonb,
        coalesce($4::timestamptz, clock_timestamp()) + $5::float8 * interval '1 millisecond',
        $6, $2, $7, $8, $9, $10)::text AS id`,

    // The keys are taken in key order, whatever the order of the batch: two batches
    // that share keys then wait for each other instead of deadlocking. (Postgres
    // evaluates a volatile function in the select list after the ORDER BY's sort.)
    // The ids come back in the order of the batch.
    enqueueManyKeyed: `SELECT x.id::text AS id FROM (
        SELECT j.ord, ${s}.enqueue_job(j.queue, j.payload,
               coalesce(j.run_at, clock_timestamp()) + coalesce(j.delay_ms, 0) * interval '1 millisecond',
               j.max_attempts, j.task, j.priority, j.job_key, j.job_key_mode, j.while_processing) AS id
        FROM ROWS FROM (jsonb_to_recordset($1::text::jsonb) AS (queue text, task text, payload jsonb,
               run_at timestamptz, delay_ms float8, max_attempts int, priority int,
               job_key text, job_key_mode text, while_processing bool))
          WITH ORDINALITY AS j(queue, task, payload, run_at, delay_ms, max_attempts, priority,
               job_key, job_key_mode, while_processing, ord)
        ORDER BY j.job_key, j.ord
      ) x
      ORDER BY x.ord`,

    // Paused queues are never claimed, and queues with a global concurrency limit
    // only through claimLimited (see cycleStatement).
    cycle: cycleStatement(jobs, queues, `queue = ($9::text[])[1]`),
    cycleManyQueues: cycleStatement(jobs, queues, `queue = ANY($9::text[])`),

    // Refresh the heartbeat of every job this worker runs, in one statement. Rows
    // not returned were taken away (rescued): their handlers are told to stop.
    heartbeat: `UPDATE ${jobs} SET locked_at = now()
      WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1
      RETURNING id::text AS id`,

    // On stop, jobs that did not finish go back to pending without spending the
    // attempt the claim took: the worker, not the job, gave up.
    release: `UPDATE ${jobs}
      SET status = 'pending', attempts = attempts - 1, locked_at = NULL, locked_by = NULL,
          run_at = now(), updated_at = now()
      WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1
      RETURNING id::text AS id, queue`,

    // Jobs whose heartbeat is older than the visibility timeout: their worker died
    // or hung. Back to pending (the attempt stays spent), or failed when none are
    // left. SKIP LOCKED so that several rescuers never fight over the same rows.
    //
    // No heartbeat can land while Postgres is down, so right after a restart every
    // running job looks stale although its worker is alive and about to reconnect.
    // Heartbeats therefore count as no older than the server's start: workers get a
    // full visibility timeout after a restart to heartbeat again before anything
    // of theirs is rescued (the condition is a constant, so jobs_locked_idx still
    // serves the scan).
    rescue: `UPDATE ${jobs} j
      SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
          finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
          last_error = 'lock expired: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating',
          errors = ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', now(),
            'message', 'lock expired: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating')),
          locked_at = NULL, locked_by = NULL, run_at = now(), updated_at = now()
      FROM (
        SELECT id FROM ${jobs}
        WHERE status = 'processing' AND locked_at < now() - $1::float8 * interval '1 millisecond'
          AND pg_postmaster_start_time() < now() - $1::float8 * interval '1 millisecond'
        ORDER BY locked_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      ) stale
      WHERE j.id = stale.id
      RETURNING j.id::text AS id, j.queue, j.status`,

    // Wakes workers of a queue after jobs went back to pending outside an INSERT.
    notify: `SELECT pg_notify($1, json_build_object('q', q, 't', floor(extract(epoch FROM now()) * 1000))::text)
      FROM unnest($2::text[]) AS q`,

    // Claims from one queue with a concurrency limit: see claim_limited() in
    // sql/migrations/0003_queue_control.sql for why it is a function.
    claimLimited: `SELECT ${jobColumns()} FROM ${s}.claim_limited($2, $1, $3::text[], $4)`,

    // A handler asked to run again later: back to pending without spending the
    // attempt the claim took. Guarded like a result ($1 worker, $3 attempt).
    snooze: `UPDATE ${jobs}
      SET status = 'pending', attempts = attempts - 1, locked_at = NULL, locked_by = NULL, updated_at = now(),
          run_at = coalesce($4::timestamptz, now() + $5::float8 * interval '1 millisecond')
      WHERE id = $2 AND attempts = $3 AND status = 'processing' AND locked_by = $1
      RETURNING run_at`,

    // What a worker caches about its queues: which are paused or globally limited.
    queueState: `SELECT name, paused, concurrency_limit FROM ${queues}
      WHERE name = ANY($1::text[]) AND (paused OR concurrency_limit IS NOT NULL)`,

    getJob: findJobQuery(s),

    // Queue.waitFor(): ask for a NOTIFY when the job finishes, in the same statement
    // that reads its status. The finishing UPDATE waits for this row lock and then
    // sees the flag; if the job finished first, the status says so. Either way no
    // outcome slips between the check and the wait.
    //
    // The UPDATE locks a pending row for a moment, and a claim running right then
    // skips it (SKIP LOCKED), comes back short and lets its worker sleep until the
    // next poll. So a pending job's queue is woken again ($2: the workers' channel).
    watchJob: `WITH watched AS (
        UPDATE ${jobs} SET notify_on_finish = true
        WHERE id = $1 AND status IN ('pending', 'processing')
        RETURNING id, queue, status, run_at
      )
      SELECT id::text AS id, CASE WHEN status = 'pending' THEN pg_notify($2,
          json_build_object('q', queue, 't', floor(extract(epoch FROM run_at) * 1000))::text) END AS woke
      FROM watched`,

    // Latest progress of running jobs, one statement for all of a worker's reports.
    // Ignored once the job is no longer this worker's (finished, rescued).
    progress: `UPDATE ${jobs} j SET progress = p.progress
      FROM unnest($2::bigint[], $3::jsonb[]) AS p(id, progress)
      WHERE j.id = p.id AND j.status = 'processing' AND j.locked_by = $1`,

    countByStatus: `SELECT queue, status, count(*)::int AS count FROM ${jobs} GROUP BY queue, status ORDER BY queue, status`,
  };
}
