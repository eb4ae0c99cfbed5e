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
  'locked_at', 'locked_by', 'last_error', 'created_at', 'updated_at', 'finished_at',
];

/** The select list of a job row; ids travel as text (bigint does not fit a JS number). */
export function jobColumns(alias?: string): string {
  const p = alias ? `${alias}.` : '';
  return [`${p}id::text AS id`, ...JOB_FIELDS.map((f) => p + f)].join(', ');
}

export interface Queries {
  readonly schema: string;
  readonly enqueue: string;
  readonly enqueueMany: string;
  readonly cycle: string;
  readonly heartbeat: string;
  readonly release: string;
  readonly rescue: string;
  readonly notify: string;
  readonly getJob: string;
  readonly countByStatus: string;
}

export function buildQueries(schema: string): Queries {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  return {
    schema,

    // A plain INSERT: the cheapest possible enqueue (the statement trigger adds one
    // NOTIFY per statement). run_at is computed by the server so client clocks do
    // not matter for delays.
    enqueue: `INSERT INTO ${jobs} (queue, task, payload, run_at, max_attempts, priority)
      VALUES ($1, $2, $3::jsonb,
              coalesce($4::timestamptz, clock_timestamp()) + $5::float8 * interval '1 millisecond',
              $6, $7)
      RETURNING id::text AS id`,

    // Many jobs in one statement and one round trip: the rows travel as one JSON
    // array, so 10,000 jobs are a single parameter. One statement also means one
    // trigger call, so one wake-up per queue instead of one per row.
    enqueueMany: `INSERT INTO ${jobs} (queue, task, payload, run_at, max_attempts, priority)
      SELECT j.queue, j.task, j.payload,
             coalesce(j.run_at, clock_timestamp()) + coalesce(j.delay_ms, 0) * interval '1 millisecond',
             j.max_attempts, j.priority
      FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (queue text, task text, payload jsonb,
             run_at timestamptz, delay_ms float8, max_attempts int, priority int))
        WITH ORDINALITY AS j(queue, task, payload, run_at, delay_ms, max_attempts, priority, ord)
      ORDER BY j.ord
      RETURNING id::text AS id`,

    // One round trip per worker cycle: record the results of finished jobs and claim
    // the next batch. Data-modifying CTEs all run, referenced or not, in one
    // snapshot; they touch disjoint rows (processing vs pending), so they never
    // see or block each other.
    //
    // A result counts only while the row is still 'processing', still held by this
    // worker instance ($1) and still on the same attempt: a job rescued from this
    // worker (and maybe claimed again elsewhere) cannot be finished by it.
    //
    // The claim is UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED): workers
    // skip rows another claim holds instead of waiting on them, and the inner
    // SELECT walks jobs_dequeue_idx in order, stopping after $11 rows.
    cycle: `WITH completed AS (
        UPDATE ${jobs} j
        SET status = 'completed', locked_at = NULL, finished_at = now(), updated_at = now()
        FROM unnest($2::bigint[], $3::int[]) AS d(id, attempt)
        WHERE j.id = d.id AND j.attempts = d.attempt AND j.status = 'processing' AND j.locked_by = $1
        RETURNING j.id
      ), failed AS (
        UPDATE ${jobs} j
        SET status = CASE WHEN f.permanent OR j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
            run_at = CASE WHEN f.permanent OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + f.delay_ms * interval '1 millisecond' END,
            finished_at = CASE WHEN f.permanent OR j.attempts >= j.max_attempts THEN now() END,
            last_error = f.error, locked_at = NULL, updated_at = now()
        FROM unnest($4::bigint[], $5::int[], $6::text[], $7::float8[], $8::bool[])
          AS f(id, attempt, error, delay_ms, permanent)
        WHERE j.id = f.id AND j.attempts = f.attempt AND j.status = 'processing' AND j.locked_by = $1
        RETURNING j.id
      ), claimed AS (
        UPDATE ${jobs} j
        SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = $1,
            updated_at = now()
        FROM (
          SELECT id FROM ${jobs}
          WHERE status = 'pending' AND queue = ANY($9::text[]) AND task = ANY($10::text[]) AND run_at <= now()
          ORDER BY priority DESC, run_at, id
          LIMIT $11
          FOR UPDATE SKIP LOCKED
        ) c
        WHERE j.id = c.id
        RETURNING j.*
      ), applied AS (
        SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM completed) AS completed_ids,
               (SELECT coalesce(array_agg(id::text), '{}') FROM failed) AS failed_ids
      )
      SELECT a.completed_ids, a.failed_ids, ${jobColumns('c')}
      FROM applied a LEFT JOIN claimed c ON true`,

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
    rescue: `UPDATE ${jobs} j
      SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
          finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
          last_error = 'lock expired: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating',
          locked_at = NULL, locked_by = NULL, run_at = now(), updated_at = now()
      FROM (
        SELECT id FROM ${jobs}
        WHERE status = 'processing' AND locked_at < now() - $1::float8 * interval '1 millisecond'
        ORDER BY locked_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      ) stale
      WHERE j.id = stale.id
      RETURNING j.id::text AS id, j.queue, j.status`,

    // Wakes workers of a queue after jobs went back to pending outside an INSERT.
    notify: `SELECT pg_notify($1, json_build_object('q', q, 't', floor(extract(epoch FROM now()) * 1000))::text)
      FROM unnest($2::text[]) AS q`,

    // The hot table first, then the history the pruner moved it to. Both branches
    // read one snapshot and the pruner moves a row in one statement, so a job is
    // found exactly once even while it is being moved. jsonb_populate_record turns
    // the archived jsonb back into a jobs row, whatever columns jobs has today.
    getJob: `SELECT ${jobColumns()} FROM ${jobs} WHERE id = $1
      UNION ALL
      SELECT ${jobColumns('h')} FROM ${s}.jobs_history x
        CROSS JOIN LATERAL jsonb_populate_record(NULL::${jobs}, x.job) h
      WHERE x.id = $1
      LIMIT 1`,

    countByStatus: `SELECT queue, status, count(*)::int AS count FROM ${jobs} GROUP BY queue, status ORDER BY queue, status`,
  };
}
