import { quoteSchema } from '../identifiers.js';

/**
 * The shape of a job row in SQL, shared by the statement modules: the columns
 * read back, the error history's cap, and the read of one job in full.
 *
 * The columns a worker reads back are listed explicitly, so a later migration
 * that adds a column does not change what the hot path transfers.
 */
const JOB_FIELDS = [
  'queue',
  'task',
  'payload',
  'status',
  'priority',
  'run_at',
  'attempts',
  'max_attempts',
  'locked_at',
  'locked_by',
  'last_error',
  'created_at',
  'updated_at',
  'finished_at',
  'job_key',
  'trace_context',
  'started_at',
  'group_key',
];

/**
 * The columns of a claimed row that differ from job to job. The others are the
 * claim's own (status 'processing', this worker as locked_by, the statement's
 * now() as locked_at, updated_at and, for a job that starts at once, started_at;
 * no finished_at): the worker fills them in (claimedJob in db/store.ts) instead of
 * reading five more columns per job, four of them timestamps (server CPU of a
 * claim of 200: ~17 → ~14 µs per job; the client parsed them too).
 */
const CLAIMED_FIELDS = [
  'queue',
  'task',
  'payload',
  'priority',
  'run_at',
  'attempts',
  'max_attempts',
  'last_error',
  'created_at',
  'job_key',
  'trace_context',
  'group_key',
];

/** Read by getJob and the admin views, not by the claim: they can be large. */
const DETAIL_FIELDS = ['key_scope', 'errors', 'result', 'progress'];

/** Most entries kept in a job's error history (`errors`). */
export const MAX_ERROR_HISTORY = 100;

/**
 * The error history without its oldest entry once it is full, ready to take one
 * more: every failure rewrites the whole array, so it must not grow without bound.
 */
export function keepRecent(column: string): string {
  return `(CASE WHEN jsonb_array_length(${column}) >= ${MAX_ERROR_HISTORY} THEN ${column} - 0 ELSE ${column} END)`;
}

/** The detail columns (migration 0002) of one job, for single-job reads. */
export function detailColumns(alias?: string): string {
  return DETAIL_FIELDS.map((f) => (alias ? `${alias}.${f}` : f)).join(', ');
}

/** What a claim's RETURNING keeps for claimedColumns() to read. */
export function claimReturning(alias: string): string {
  return ['id', ...CLAIMED_FIELDS, 'started_at'].map((f) => `${alias}.${f}`).join(', ');
}

/**
 * The select list of claimed rows (alias: the claim's CTE, from claimReturning):
 * the fields of CLAIMED_FIELDS, whether the job started at once, and the claim's
 * time (`time`, the one it stamped) on the row where `first` holds (one row per
 * statement, not one per job).
 */
export function claimedColumns(alias: string, first: string, time: string): string {
  return [
    `${alias}.id::text AS id`,
    ...CLAIMED_FIELDS.map((f) => `${alias}.${f}`),
    `${alias}.started_at IS NOT NULL AS started`,
    `CASE WHEN ${first} THEN ${time} END AS claimed_at`,
  ].join(', ');
}

/** The select list of a job row; ids travel as text (bigint does not fit a JS number). */
export function jobColumns(alias?: string): string {
  const p = alias ? `${alias}.` : '';
  return [`${p}id::text AS id`, ...JOB_FIELDS.map((f) => p + f)].join(', ');
}

/**
 * The columns of a page of listed jobs, read from its rows `page` (id as text
 * already, with `archived`) and their payload length `c.chars` (payloadLength). A
 * payload over `$chars` characters of JSON text (as Postgres prints it,
 * `payload::text`) is left out, NULL, and its length read as payload_chars; with
 * `$chars` NULL every payload is read. Trimmed here, not in Node: a page of 1,000
 * jobs of 1 MiB payloads was a gigabyte read into the process only to be dropped
 * (outside review 162).
 */
export function pageColumns(chars: '$8'): string {
  const large = `c.chars > ${chars}::int`;
  const fields = JOB_FIELDS.map((f) =>
    f === 'payload'
      ? `CASE WHEN ${large} THEN NULL ELSE page.payload END AS payload, CASE WHEN ${large} THEN c.chars END AS payload_chars`
      : `page.${f}`,
  );
  return ['page.id', ...fields, 'page.archived'].join(', ');
}

/**
 * The lateral join that measures each payload of a page (`page`) once, as `c.chars`
 * (NULL when `$chars` is NULL). Joined after the page's limit, and OFFSET 0 keeps
 * the planner from copying the length into each use: taken three times per row,
 * before the limit, a page of 50 jobs of 1 MiB took 4.2 s instead of 0.9 (outside
 * review 164).
 */
export function payloadLength(chars: '$8'): string {
  return `CROSS JOIN LATERAL (SELECT CASE WHEN ${chars}::int IS NULL THEN NULL ELSE length(page.payload::text) END AS chars OFFSET 0) c`;
}

/**
 * One job in full, by id ($1): the hot table first, then the history the pruner
 * moved it to. Both branches read one snapshot and the pruner moves a row in one
 * statement, so a job is found exactly once even while it is being moved.
 * jsonb_populate_record turns the archived jsonb back into a jobs row, whatever
 * columns jobs has today. Built for one schema.
 */
export function findJobStatement(schema: string): string {
  const s = quoteSchema(schema);
  return `SELECT ${jobColumns()}, ${detailColumns()} FROM ${s}.jobs WHERE id = $1::bigint
      UNION ALL
      SELECT ${jobColumns('h')}, ${detailColumns('h')} FROM ${s}.jobs_history x
        CROSS JOIN LATERAL jsonb_populate_record(NULL::${s}.jobs, x.job) h
      WHERE x.id = $1::bigint
      LIMIT 1`;
}
