import { rows, type Queryable } from '../db/executor.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import {
  CANCELLABLE,
  DELETABLE,
  FINISHED,
  JOB_STATUSES,
  RETRYABLE,
  isFinished,
  type JobRow,
  type JobStatus,
  type UnfinishedStatus,
} from '../job.js';
import { checks } from '../validate.js';
import { channelFor, doneChannelFor } from '../db/identifiers.js';
import { adminStatements } from '../db/statements/admin.js';
import { runNowStatements } from '../db/statements/run-now.js';
import { searchStatements } from '../db/statements/search.js';
import { encodeControl } from '../notify/codec.js';
import { wakeQueues } from '../notify/wake-queues.js';

/**
 * The admin API: inspect and repair jobs. Used by `sluice jobs` and by the
 * dashboard. Every function takes any `Queryable` (a pg Pool, a client inside
 * your transaction) and the schema; none of them opens connections itself.
 */

// Call-time arguments are the caller's input: ValidationError.
const { checkName, intOption } = checks(ValidationError);

export const DEFAULT_LIST_LIMIT = 50;
export const MAX_LIST_LIMIT = 1000;

export interface ListJobsOptions {
  status?: JobStatus | readonly JobStatus[];
  queue?: string | readonly string[];
  task?: string | readonly string[];
  /** Jobs per page, 1 to 1000. Default 50. */
  limit?: number;
  /** Cursor: jobs with a smaller id (older), newest first. */
  before?: string | number;
  /** Cursor: jobs with a larger id (newer). The page is still returned newest first. */
  after?: string | number;
  /** Only jobs created at or after this time. */
  createdFrom?: Date;
  /** Only jobs created before this time. */
  createdUntil?: Date;
}

export interface JobPage {
  /** Newest first. */
  jobs: JobRow[];
  /** Pass as `before` to get the next, older page; null when there is none. */
  nextBefore: string | null;
  /** Pass as `after` to get the previous, newer page; null when there is none. */
  nextAfter: string | null;
}

/**
 * What a single-job action did: the job as it is now, or why nothing changed.
 * A result, not an exception, because "already finished" is a normal answer for
 * a dashboard button or a script.
 */
export type JobActionResult =
  | { ok: true; job: JobRow }
  | { ok: false; reason: 'not_found' }
  // archived: the pruner moved the job to jobs_history, which is read-only.
  | { ok: false; reason: 'wrong_status'; status: JobStatus; archived?: true };

/**
 * Lists jobs with keyset pagination by id: fast on any page of a large table.
 *
 * @example
 *   let page = await listJobs(pool, 'sluice', { status: 'failed', limit: 100 });
 *   while (page.nextBefore) page = await listJobs(pool, 'sluice', { status: 'failed', before: page.nextBefore });
 */
export async function listJobs(db: Queryable, schema: string, options: ListJobsOptions = {}): Promise<JobPage> {
  const admin = adminStatements(schema);
  const limit = intOption('limit', options.limit, DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT);
  if (options.before !== undefined && options.after !== undefined) {
    throw new ValidationError('listJobs: give before or after, not both');
  }
  const filters = [
    listOf('status', options.status, checkStatus),
    listOf('queue', options.queue, (q) => checkName('queue', q)),
    listOf('task', options.task, (t) => checkName('task', t)),
  ];
  const window = [dateOption('createdFrom', options.createdFrom), dateOption('createdUntil', options.createdUntil)];
  // One row more than asked tells whether another page exists in that direction.
  if (options.after !== undefined) {
    const after = jobId(options.after);
    const found = await query<JobRow>(db, admin.listNewer, [...filters, after, limit + 1, ...window], 'listJobs');
    const more = found.length > limit;
    const jobs = found.slice(0, limit).reverse();
    return { jobs, nextBefore: jobs.at(-1)?.id ?? null, nextAfter: more ? jobs[0]!.id : null };
  }
  const before = options.before === undefined ? null : jobId(options.before);
  const found = await query<JobRow>(db, admin.listOlder, [...filters, before, limit + 1, ...window], 'listJobs');
  const more = found.length > limit;
  const jobs = found.slice(0, limit);
  return {
    jobs,
    nextBefore: more ? jobs.at(-1)!.id : null,
    // Coming from a cursor, newer jobs exist (at least the ones paged through).
    nextAfter: before !== null && jobs.length > 0 ? jobs[0]!.id : null,
  };
}

/** Options of every action: who is asking, for the audit log. */
export interface ActionOptions {
  /**
   * Who asked, stored with the action in the audit log (migration 0007), e.g.
   * 'cli', 'dashboard token 10.0.0.7'. 1 to 256 characters. Default 'api'.
   */
  actor?: string;
}

/** One entry of a job's audit log: an action someone took on it. */
export interface AuditEntry {
  at: Date;
  action: 'retry' | 'cancel' | 'delete' | 'run_now' | 'run_schedule';
  actor: string;
}

/** The actor of an action, checked (1 to 256 characters); 'api' when none is given. */
export function actorOf(options: ActionOptions): string {
  const actor = options.actor ?? 'api';
  if (typeof actor !== 'string' || actor.length === 0 || actor.length > 256) {
    throw new ValidationError('actor must be a string of 1 to 256 characters');
  }
  return actor;
}

/** Every action taken on a job through this API (retry, cancel, delete), oldest first; also for deleted jobs. */
export async function getJobAudit(db: Queryable, schema: string, id: string | number): Promise<AuditEntry[]> {
  return query<AuditEntry>(db, adminStatements(schema).auditOfJob, [jobId(id)], 'getJobAudit');
}

/** One job, or undefined when there is none with that id. */
export async function getJob(db: Queryable, schema: string, id: string | number): Promise<JobRow | undefined> {
  // The runtime's statement: it also finds a job the pruner moved to jobs_history.
  const [job] = await query<JobRow>(db, adminStatements(schema).getJob, [jobId(id)], 'getJob');
  return job;
}

export type JobAction = 'retry' | 'cancel' | 'delete';

const ACTION_STATUSES: Record<JobAction, readonly JobStatus[]> = { retry: RETRYABLE, cancel: CANCELLABLE, delete: DELETABLE };

/**
 * True when the pruner moved the job to jobs_history (read-only, no action
 * applies); false for a job in the jobs table or none at all.
 */
export async function isArchived(db: Queryable, schema: string, id: string | number): Promise<boolean> {
  const admin = adminStatements(schema);
  const jobIdText = jobId(id);
  const [current] = await query<{ status: JobStatus }>(db, admin.statusOf, [jobIdText], 'isArchived');
  if (current) return false;
  return (await query<JobRow>(db, admin.getJob, [jobIdText], 'isArchived')).length > 0;
}

/**
 * The single-job actions this API would accept on the job right now (for a UI
 * that offers only buttons that work). None for a job the pruner moved to
 * jobs_history: the history is read-only.
 */
export async function allowedActions(db: Queryable, schema: string, id: string | number): Promise<JobAction[]> {
  const [current] = await query<{ status: JobStatus }>(db, adminStatements(schema).statusOf, [jobId(id)], 'allowedActions');
  if (!current) return [];
  return (Object.keys(ACTION_STATUSES) as JobAction[]).filter((a) => ACTION_STATUSES[a].includes(current.status));
}

/**
 * Puts a failed or cancelled job back to pending, due now. A job that used all
 * its attempts gets one more. Wakes the queue's workers.
 */
export async function retryJob(
  db: Queryable,
  schema: string,
  id: string | number,
  options: ActionOptions = {},
): Promise<JobActionResult> {
  const result = await act(db, schema, 'retry', id, RETRYABLE, options);
  if (result.ok) await wakeQueues(db, schema, [result.job.queue]);
  return result;
}

/** Retries every failed job (of one queue, or all). Returns how many, per queue. */
export async function retryFailed(
  db: Queryable,
  schema: string,
  options: { queue?: string } & ActionOptions = {},
): Promise<{ retried: number; queues: Record<string, number> }> {
  const queue = options.queue === undefined ? null : checkName('queue', options.queue);
  const counts = await query<{ queue: string; count: number }>(
    db,
    adminStatements(schema).retryFailed,
    [queue, actorOf(options)],
    'retryFailed',
  );
  await wakeQueues(
    db,
    schema,
    counts.map((c) => c.queue),
  );
  return {
    retried: counts.reduce((sum, c) => sum + c.count, 0),
    queues: Object.fromEntries(counts.map((c) => [c.queue, c.count])),
  };
}

/** What cancelJob did; `previousStatus` 'processing' means a worker was told to abort the handler. */
export type CancelJobResult =
  { ok: true; job: JobRow; previousStatus: UnfinishedStatus } | Exclude<JobActionResult, { ok: true }>;

/**
 * Cancels a job that has not finished; it becomes 'cancelled' and is not retried.
 * A pending job never runs. A running job's AbortSignal fires on whichever worker
 * runs it (NOTIFY, so at once when the cancel commits; the worker's heartbeat is
 * the fallback) and nothing that worker writes afterwards changes the status.
 * A finished job is refused with reason 'wrong_status'.
 *
 * @example
 *   const result = await cancelJob(pool, 'sluice', id);
 *   if (result.ok && result.previousStatus === 'processing') console.log('its worker was told to stop');
 */
export async function cancelJob(
  db: Queryable,
  schema: string,
  id: string | number,
  options: ActionOptions = {},
): Promise<CancelJobResult> {
  const result = await act<JobRow & { previous_status: UnfinishedStatus }>(db, schema, 'cancel', id, CANCELLABLE, options, [
    channelFor(schema),
    doneChannelFor(schema),
    encodeControl({ c: 'cancel', id: jobId(id) }),
  ]);
  if (!result.ok) return result;
  const { previous_status: previousStatus, ...job } = result.job;
  return { ok: true, job, previousStatus };
}

/** Deletes one job that no worker is running. */
export async function deleteJob(
  db: Queryable,
  schema: string,
  id: string | number,
  options: ActionOptions = {},
): Promise<JobActionResult> {
  return act(db, schema, 'deleteJob', id, DELETABLE, options);
}

export interface DeleteFinishedOptions {
  /** Only jobs that finished at least this long ago. */
  olderThanMs: number;
  /** Which finished statuses to delete. Default ['completed']. */
  statuses?: readonly JobStatus[];
  /** Rows per DELETE statement. Default 5000. */
  batchSize?: number;
}

/**
 * Deletes finished jobs older than `olderThanMs`, in batches (each its own
 * statement, so on a pool each commits on its own and locks stay short).
 * Returns how many rows went.
 */
export async function deleteFinished(
  db: Queryable,
  schema: string,
  options: DeleteFinishedOptions,
): Promise<{ deleted: number }> {
  if (!options || typeof options.olderThanMs !== 'number' || !Number.isFinite(options.olderThanMs) || options.olderThanMs < 0) {
    throw new ValidationError('deleteFinished: olderThanMs must be a number of milliseconds >= 0');
  }
  const statuses = [...(options.statuses ?? ['completed'])];
  if (statuses.length === 0) throw new ValidationError('deleteFinished: statuses is empty');
  for (const status of statuses) {
    if (!isFinished(status)) {
      throw new ValidationError(`deleteFinished: can only delete ${FINISHED.join(', ')} jobs, not ${JSON.stringify(status)}`);
    }
  }
  const batchSize = intOption('batchSize', options.batchSize, 5000, 1, 100_000);
  const admin = adminStatements(schema);
  let cursor = '0';
  let deleted = 0;
  for (;;) {
    const [batch] = await query<{ count: number; last_id: string | null }>(
      db,
      admin.deleteFinishedBatch,
      [cursor, statuses, options.olderThanMs, batchSize],
      'deleteFinished',
    );
    deleted += batch!.count;
    if (batch!.count < batchSize || batch!.last_id === null) return { deleted };
    cursor = batch!.last_id;
  }
}

/**
 * Makes a waiting job due now (a delayed or retrying job runs at the next claim
 * instead of at its run_at). Only pending jobs; one already due is left as it
 * is. Recorded in the audit log as 'run_now'; wakes the queue's workers.
 *
 * @example
 *   const result = await runJobNow(pool, 'sluice', id, { actor: 'cli' });
 */
export async function runJobNow(
  db: Queryable,
  schema: string,
  id: string | number,
  options: ActionOptions = {},
): Promise<JobActionResult> {
  const jobIdText = jobId(id);
  const [job] = await query<JobRow>(db, runNowStatements(schema).job, [jobIdText, actorOf(options)], 'runJobNow');
  if (job) {
    await wakeQueues(db, schema, [job.queue]);
    return { ok: true, job };
  }
  const [current] = await query<{ status: JobStatus }>(db, adminStatements(schema).statusOf, [jobIdText], 'runJobNow');
  return current ? { ok: false, reason: 'wrong_status', status: current.status } : { ok: false, reason: 'not_found' };
}

/** Path segments of a payload field, at most this many ('customer.address.city' is 3). */
const MAX_FIELD_DEPTH = 8;
const MAX_SEARCH_VALUE = 1000;

export interface SearchJobsOptions {
  /** A payload field as a dotted path: 'userId', 'customer.email', 'items.0.sku'. */
  field: string;
  /** The field's value as text: 42 and "42" both match '42'. */
  value: string;
  status?: JobStatus;
  queue?: string;
  task?: string;
  /** Cursor: jobs with a smaller id (older). */
  before?: string | number;
  /** Jobs per page, 1 to 1000. Default 50. */
  limit?: number;
}

/**
 * Jobs whose payload has `field` equal to `value`, newest first, from the jobs
 * table and the history, pages going back with `before` (nextAfter is always
 * null). No index covers arbitrary fields: narrow by queue, task or status on
 * a large table.
 *
 * @example
 *   const page = await searchJobs(pool, 'sluice', { field: 'user.id', value: '42', task: 'send_welcome' });
 */
export async function searchJobs(db: Queryable, schema: string, options: SearchJobsOptions): Promise<JobPage> {
  const limit = intOption('limit', options.limit, DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT);
  const path = fieldPath(options.field);
  if (typeof options.value !== 'string' || options.value.length > MAX_SEARCH_VALUE) {
    throw new ValidationError(`searchJobs: value must be a string of at most ${MAX_SEARCH_VALUE} characters`);
  }
  const values = [
    options.status === undefined ? null : [checkStatus(options.status)],
    options.queue === undefined ? null : [checkName('queue', options.queue)],
    options.task === undefined ? null : [checkName('task', options.task)],
    options.before === undefined ? null : jobId(options.before),
    limit + 1,
    path,
    options.value,
  ];
  const found = await query<JobRow>(db, searchStatements(schema).byPayloadField, values, 'searchJobs');
  const jobs = found.slice(0, limit);
  return { jobs, nextBefore: found.length > limit ? jobs.at(-1)!.id : null, nextAfter: null };
}

/** 'a.b.0' → ['a', 'b', '0'], or a ValidationError saying what a field looks like. */
function fieldPath(field: unknown): string[] {
  const parts = typeof field === 'string' ? field.split('.') : [];
  if (parts.length === 0 || parts.length > MAX_FIELD_DEPTH || parts.some((p) => p.length === 0 || p.length > 128)) {
    throw new ValidationError(
      `searchJobs: field must be a dotted path of 1 to ${MAX_FIELD_DEPTH} names, such as "user.id", got ${JSON.stringify(field)}`,
    );
  }
  return parts;
}

type ActionQuery = 'retry' | 'cancel' | 'deleteJob';

/**
 * Runs a single-job statement guarded by "status is one of `allowed`"; when it
 * changes nothing, reads the status to say why (gone, or in another state).
 */
async function act<R extends JobRow = JobRow>(
  db: Queryable,
  schema: string,
  action: ActionQuery,
  id: string | number,
  allowed: readonly JobStatus[],
  options: ActionOptions,
  extra: unknown[] = [],
): Promise<{ ok: true; job: R } | Exclude<JobActionResult, { ok: true }>> {
  const admin = adminStatements(schema);
  const jobIdText = jobId(id);
  const [job] = await query<R>(db, admin[action], [jobIdText, allowed, actorOf(options), ...extra], action);
  if (job) return { ok: true, job };
  const [current] = await query<{ status: JobStatus }>(db, admin.statusOf, [jobIdText], action);
  if (current) return { ok: false, reason: 'wrong_status', status: current.status };
  // Not in the jobs table: gone, or archived by the pruner (found, but read-only).
  const [archived] = await query<JobRow>(db, admin.getJob, [jobIdText], action);
  return archived
    ? { ok: false, reason: 'wrong_status', status: archived.status, archived: true }
    : { ok: false, reason: 'not_found' };
}

async function query<T>(db: Queryable, text: string, values: unknown[], context: string): Promise<T[]> {
  try {
    return await rows<T>(db, text, values);
  } catch (err) {
    throw wrapDatabaseError(err, `${context} failed`);
  }
}

const MAX_BIGINT = 2n ** 63n - 1n;

/** A job id as the text Postgres gets: a positive bigint, or a ValidationError. */
export function jobId(value: string | number): string {
  const text = typeof value === 'number' ? (Number.isSafeInteger(value) ? String(value) : '') : String(value).trim();
  if (!/^\d{1,19}$/.test(text) || BigInt(text) < 1n || BigInt(text) > MAX_BIGINT) {
    throw new ValidationError(`not a job id: ${JSON.stringify(value)}`);
  }
  return BigInt(text).toString();
}

function dateOption(name: string, value: Date | undefined): Date | null {
  if (value === undefined) return null;
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new ValidationError(`listJobs: ${name} must be a valid Date`);
  return value;
}

/** Checks a status name. */
export function checkStatus(value: unknown): JobStatus {
  if (!JOB_STATUSES.includes(value as JobStatus)) {
    throw new ValidationError(`unknown status ${JSON.stringify(value)} (one of ${JOB_STATUSES.join(', ')})`);
  }
  return value as JobStatus;
}

/** An optional one-or-many filter as a text[] parameter (null: no filter). */
function listOf<T>(name: string, value: T | readonly T[] | undefined, check: (v: T) => string): string[] | null {
  if (value === undefined) return null;
  const list = Array.isArray(value) ? (value as readonly T[]) : [value as T];
  if (list.length === 0) throw new ValidationError(`listJobs: ${name} filter is empty`);
  return list.map(check);
}
