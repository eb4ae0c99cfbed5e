import { quoteSchema } from '../identifiers.js';
import { findJobStatement } from './job-columns.js';
import { perSchema } from './per-schema.js';

/**
 * What a Queue sends: the enqueue statements, the wake-ups it sends after a
 * COMMIT, waitFor's watch, and getJob. Values are always `$n` parameters; the
 * schema is the only text spliced in, quoted once.
 */
export interface EnqueueStatements extends InsertStatements {
  readonly schema: string;
  /** The inserts of jobs flagged for waitFor() (JobOptions.waitable). */
  readonly waitable: InsertStatements;
  readonly wake: string;
  readonly enqueueKeyed: string;
  readonly enqueueManyKeyed: string;
  readonly watchJob: string;
  readonly jobWatched: string;
  readonly getJob: string;
}

/** The plain INSERTs of jobs without a key, each in one form per InsertStatements object. */
interface InsertStatements {
  readonly enqueue: string;
  readonly enqueueDeferred: string;
  readonly enqueueMany: string;
  readonly enqueueManyUniform: string;
}

const ENQUEUE_COLUMNS = 'queue, task, payload, run_at, max_attempts, priority, group_key, trace_context';
/** $1..$9 of a single enqueue ($8 the group key), typed so that they also work in INSERT ... SELECT. */
const ENQUEUE_VALUES = `$1::text, $2::text, $3::text::jsonb,
  coalesce($4::timestamptz, clock_timestamp()) + $5::float8 * interval '1 millisecond', $6::int, $7::int, $8::text,
  $9::text::jsonb`;

/** The statements of a Queue for one schema, built once per schema. */
export const enqueueStatements = perSchema((schema: string): EnqueueStatements => ({
  schema,
  ...insertStatements(schema, 'plain'),
  waitable: insertStatements(schema, 'waitable'),
  ...otherStatements(schema),
}));

// What the waitable form adds: the column, and its value for every row or per row of a batch.
const FLAG_COLUMN = ', notify_on_finish';
const FLAG_SET = ', true';
const FLAG_OF_ROW = ', coalesce(j.waitable, false)';

/** `fragment` in the waitable form of a statement, nothing in the plain one. */
function flagged(kind: 'plain' | 'waitable', fragment: string): string {
  return kind === 'waitable' ? fragment : '';
}

/**
 * The plain INSERTs into `jobs`. 'waitable': the form that also writes
 * notify_on_finish, true for a batch's waitable jobs; the usual form leaves the
 * column out, so a role whose column grants predate it (roles.sql before
 * migration 0045) still enqueues.
 */
function insertStatements(schema: string, kind: 'plain' | 'waitable'): InsertStatements {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  // JSON parameters of the enqueue statements are cast from text ($n::text::jsonb):
  // they can run on a caller's postgres.js connection (a transaction adapter),
  // which would otherwise JSON.stringify the already-encoded text a second time.
  return {
    // A plain INSERT: the cheapest possible enqueue (the statement trigger adds one
    // NOTIFY per statement). run_at is computed by the server so client clocks do
    // not matter for delays.
    // $9: the enqueuing span's trace context (migration 0005), NULL without tracing.
    enqueue: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS}${flagged(kind, FLAG_COLUMN)}) VALUES (${ENQUEUE_VALUES}${flagged(kind, FLAG_SET)})
      RETURNING id::text AS id`,

    // The same INSERT with the trigger's NOTIFY turned off for this statement only
    // (set_config(..., true) lasts until the end of the implicit transaction); the
    // Queue sends the wake-up after the COMMIT instead (see migration 0004 and
    // src/wake-ups.ts). Only for statements that are their own transaction.
    enqueueDeferred: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS}${flagged(kind, FLAG_COLUMN)})
      SELECT ${ENQUEUE_VALUES}${flagged(kind, FLAG_SET)} FROM (SELECT set_config('sluice.wake', 'deferred', true)) AS deferred
      RETURNING id::text AS id, floor(extract(epoch FROM run_at) * 1000)::float8 AS run_at_ms`,

    // Many jobs in one statement and one round trip: the rows travel as one JSON
    // array, so 10,000 jobs are a single parameter. One statement also means one
    // trigger call, so one wake-up per queue instead of one per row. The array is
    // read as json, not jsonb: jsonb would first build the whole batch as a binary
    // document only to take it apart again, which doubled the server CPU of a bulk
    // enqueue (~19 vs ~11 µs per job in batches of 1,000, measured back to back).
    // Each payload still becomes jsonb as it is stored.
    // A payload that is JSON null comes out of json_to_recordset as SQL NULL: put back.
    enqueueMany: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS}${flagged(kind, FLAG_COLUMN)})
      SELECT j.queue, j.task, coalesce(j.payload, 'null'::jsonb),
             coalesce(j.run_at, clock_timestamp()) + coalesce(j.delay_ms, 0) * interval '1 millisecond',
             j.max_attempts, j.priority, j.group_key, $2::text::jsonb${flagged(kind, FLAG_OF_ROW)}
      FROM ROWS FROM (json_to_recordset($1::text::json) AS (queue text, task text, payload jsonb,
             run_at timestamptz, delay_ms float8, max_attempts int, priority int, group_key text, waitable bool))
        WITH ORDINALITY AS j(queue, task, payload, run_at, delay_ms, max_attempts, priority, group_key, waitable, ord)
      ORDER BY j.ord
      RETURNING id::text AS id`,

    // A batch whose jobs differ only in task and payload (one queue, one attempts
    // limit, priority and group, all due now, no key: the usual bulk enqueue): the
    // tasks and the payloads as two JSON arrays, zipped by ROWS FROM, and the rest
    // once. The payloads are JSON text already, so the client joins them without
    // escaping a character, and each comes out of the array as a jsonb value, parsed
    // once. As text[] and jsonb[] parameters (the earlier form) every quote of every
    // payload was escaped into an array literal that the server parsed before each
    // element's JSON: queue.enqueueMany went from 81-83% of a plain unnest INSERT's
    // rate to 92%, measured batch by batch as npm run bench:bulk does. Text
    // parameters only, so a caller's transaction (any driver or query builder)
    // takes this form too.
    enqueueManyUniform: `INSERT INTO ${jobs} (${ENQUEUE_COLUMNS}${flagged(kind, FLAG_COLUMN)})
      SELECT $1::text, j.task, j.payload, clock_timestamp(), $4::int, $5::int, $6::text, $7::text::jsonb${flagged(kind, FLAG_SET)}
      FROM ROWS FROM (jsonb_array_elements_text($2::text::jsonb), jsonb_array_elements($3::text::jsonb))
        WITH ORDINALITY AS j(task, payload, ord)
      ORDER BY j.ord
      RETURNING id::text AS id`,
  };
}

/** The statements other than the plain INSERTs: wake-ups, keyed enqueues, waitFor's. */
function otherStatements(schema: string): Omit<EnqueueStatements, 'schema' | 'waitable' | keyof InsertStatements> {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  return {
    // Wake-ups sent after the COMMIT of deferred enqueues: the payload the trigger
    // would have sent (wake_payload(), migration 0009), one per queue; $3: the
    // earliest run_at of each. This statement writes nothing.
    wake: `SELECT pg_notify($1, ${s}.wake_payload(w.q, w.t))
      FROM unnest($2::text[], $3::timestamptz[]) AS w(q, t)`,

    // With a job key the insert goes through enqueue_job() (migration 0002), which
    // does the INSERT ... ON CONFLICT on jobs_job_key_idx and the keep / replace /
    // error choice in one place for SQL and JS callers alike. Plain jobs keep the
    // cheaper statements above.
    enqueueKeyed: `SELECT ${s}.enqueue_job($1, $3::text::jsonb,
        coalesce($4::timestamptz, clock_timestamp()) + $5::float8 * interval '1 millisecond',
        $6, $2, $7, $9, $10, $11, $8)::text AS id`,

    // The keys are taken in key order, whatever the order of the batch: two batches
    // that share keys then wait for each other instead of deadlocking. (Postgres
    // evaluates a volatile function in the select list after the ORDER BY's sort.)
    // The ids come back in the order of the batch.
    enqueueManyKeyed: `SELECT x.id::text AS id FROM (
        SELECT j.ord, ${s}.enqueue_job(j.queue, coalesce(j.payload, 'null'::jsonb),
               coalesce(j.run_at, clock_timestamp()) + coalesce(j.delay_ms, 0) * interval '1 millisecond',
               j.max_attempts, j.task, j.priority, j.job_key, j.job_key_mode, j.while_processing, j.group_key) AS id
        FROM ROWS FROM (json_to_recordset($1::text::json) AS (queue text, task text, payload jsonb,
               run_at timestamptz, delay_ms float8, max_attempts int, priority int,
               job_key text, job_key_mode text, while_processing bool, group_key text))
          WITH ORDINALITY AS j(queue, task, payload, run_at, delay_ms, max_attempts, priority,
               job_key, job_key_mode, while_processing, group_key, ord)
        ORDER BY j.job_key, j.ord
      ) x
      ORDER BY x.ord`,

    // Queue.waitFor(): ask for a NOTIFY when the job finishes, in the same statement
    // that reads its status. The finishing UPDATE waits for this row lock and then
    // sees the flag; if the job finished first, the status says so. Either way no
    // outcome slips between the check and the wait.
    //
    // The flag waits at most $3 ms for a row lock another session holds (a worker's
    // statement holds one for milliseconds; an open transaction, an admin in psql,
    // for as long as it likes), then fails with lock_not_available (55P03) and the
    // caller reads the job and tries again later. Waited for without a bound, a 3 s
    // waitFor waited 30 s and failed as a lost connection, holding a pooled
    // connection all along; a dozen stalled every enqueue (outside review 91).
    // Skipped at once (SKIP LOCKED), the flag missed the jobs a worker was claiming
    // right then, whose outcomes then went unannounced. set_config(..., true) lasts
    // for this statement's own transaction only; the InitPlan runs before any row is
    // locked.
    //
    // The UPDATE locks a pending row for a moment, and a claim running right then
    // skips it (SKIP LOCKED), comes back short and lets its worker sleep until the
    // next poll. So a pending job's queue is woken again ($2: the workers' channel).
    watchJob: `WITH watched AS (
        UPDATE ${jobs} SET notify_on_finish = true
        WHERE id = $1 AND status IN ('pending', 'processing')
          AND (SELECT set_config('lock_timeout', $3::text, true)) IS NOT NULL
        RETURNING id, queue, status, run_at
      )
      SELECT id::text AS id, CASE WHEN status = 'pending' THEN pg_notify($2, ${s}.wake_payload(queue, run_at)) END AS woke
      FROM watched`,

    // Whether a job is flagged already (enqueued waitable): for a role that may not
    // flag it (watchJob), which then needs only to read it.
    jobWatched: `SELECT notify_on_finish AS watched FROM ${jobs} WHERE id = $1`,

    getJob: findJobStatement(schema),
  };
}
