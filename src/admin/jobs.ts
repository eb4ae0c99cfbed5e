import type { Queryable } from '../db/executor.js';
import { ValidationError } from '../errors.js';
import { CANCELLABLE, DELETABLE, RETRYABLE, type JobRow, type JobStatus, type UnfinishedStatus } from '../job.js';
import { checks, unstorableText } from '../validate.js';
import { checkStatus, jobId, knownOptions, listOf, listedRows, payloadCharsLimit, query, type ListedJobRow } from './input.js';
import { channelFor, doneChannelFor } from '../db/identifiers.js';
import { adminStatements } from '../db/statements/admin.js';
import { runNowStatements } from '../db/statements/run-now.js';
import { withJobDates } from '../job-values.js';
import { wakeQueues } from '../notify/wake-queues.js';

/**
 * The admin API: inspect and repair jobs. Used by `sluice jobs` and by the
 * dashboard. Every function takes any `Queryable` (a pg Pool, a client inside
 * your transaction) and the schema; none of them opens connections itself.
 */

export { checkStatus, jobId, type ListedJobRow } from './input.js';

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
  /**
   * Leave out payloads longer than this many characters of JSON text (as Postgres
   * prints it), giving their length in `omitted.payload`: a list of large jobs is
   * then not read whole. Default: every payload whole.
   */
  maxPayloadChars?: number;
}

export interface JobPage {
  /** Newest first. A payload left out (maxPayloadChars) is absent, its length in `omitted`. */
  jobs: ListedJobRow[];
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

/** The option names each admin function takes (see knownOptions). */
export const LIST_KEYS: ReadonlySet<string> = new Set([
  'status',
  'queue',
  'task',
  'limit',
  'before',
  'after',
  'createdFrom',
  'createdUntil',
  'maxPayloadChars',
]);
const ACTION_KEYS = new Set(['actor']);

/**
 * Lists jobs with keyset pagination by id: fast on any page of a large table.
 *
 * @example
 *   let page = await listJobs(pool, 'sluice', { status: 'failed', limit: 100 });
 *   while (page.nextBefore) page = await listJobs(pool, 'sluice', { status: 'failed', before: page.nextBefore });
 */
export async function listJobs(db: Queryable, schema: string, options: ListJobsOptions = {}): Promise<JobPage> {
  options = knownOptions(options, LIST_KEYS, 'listJobs');
  const admin = adminStatements(schema);
  const limit = intOption('limit', options.limit, DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT);
  if (options.before !== undefined && options.after !== undefined) {
    throw new ValidationError('listJobs: give before or after, not both');
  }
  const filters = [
    listOf('listJobs', 'status', options.status, checkStatus),
    listOf('listJobs', 'queue', options.queue, (q) => checkName('queue', q)),
    listOf('listJobs', 'task', options.task, (t) => checkName('task', t)),
  ];
  const window = [
    dateOption('createdFrom', options.createdFrom),
    dateOption('createdUntil', options.createdUntil),
    payloadCharsLimit(options.maxPayloadChars),
  ];
  // One row more than asked tells whether another page exists in that direction.
  if (options.after !== undefined) {
    const after = jobId(options.after);
    const found = listedRows(await query(db, admin.listNewer, [...filters, after, limit + 1, ...window], 'listJobs'));
    const more = found.length > limit;
    const jobs = found.slice(0, limit).reverse();
    return { jobs, nextBefore: jobs.at(-1)?.id ?? null, nextAfter: more ? jobs[0]!.id : null };
  }
  const before = options.before === undefined ? null : jobId(options.before);
  const found = listedRows(await query(db, admin.listOlder, [...filters, before, limit + 1, ...window], 'listJobs'));
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

/**
 * The actor of an action whose options are `{ actor }` alone (queue, group and
 * schedule settings): the options read once, with names they do not know refused
 * (outside review 70: a throwing getter came through raw, `{ bogus: 1 }` passed).
 */
export function actorOfOptions(options: ActionOptions | undefined, what: string): string {
  return actorOf(knownOptions(options ?? {}, ACTION_KEYS, what));
}

/** The actor of an action, checked (1 to 256 characters); 'api' when none is given. */
export function actorOf(options: ActionOptions): string {
  const actor = options.actor ?? 'api';
  // Characters as Postgres counts them (code points): 200 emoji are 400 UTF-16 units.
  if (typeof actor !== 'string' || actor.length === 0 || [...actor].length > 256) {
    throw new ValidationError('actor must be a string of 1 to 256 characters');
  }
  const unstorable = unstorableText(actor);
  if (unstorable) throw new ValidationError(`actor holds ${unstorable}`);
  return actor;
}

/** Every action taken on a job through this API (retry, cancel, delete), oldest first; also for deleted jobs. */
export async function getJobAudit(db: Queryable, schema: string, id: string | number): Promise<AuditEntry[]> {
  return query<AuditEntry>(db, adminStatements(schema).auditOfJob, [jobId(id)], 'getJobAudit');
}

/** One job, or undefined when there is none with that id. */
export async function getJob(db: Queryable, schema: string, id: string | number): Promise<JobRow | undefined> {
  // The runtime's statement: it also finds a job the pruner moved to jobs_history.
  return withJobDates((await query<JobRow>(db, adminStatements(schema).getJob, [jobId(id)], 'getJob'))[0]);
}

export type JobAction = 'retry' | 'cancel' | 'delete';

/** How many times an action is tried while the job keeps changing under it (see act). */
const ACTION_TRIES = 3;

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
  options = knownOptions(options, ACTION_KEYS, 'runJobNow');
  const job = withJobDates(
    (await query<JobRow>(db, runNowStatements(schema).job, [jobIdText, actorOf(options)], 'runJobNow'))[0],
  );
  if (job) {
    await wakeQueues(db, schema, [job.queue]);
    return { ok: true, job };
  }
  const [current] = await query<{ status: JobStatus }>(db, adminStatements(schema).statusOf, [jobIdText], 'runJobNow');
  return refusal(db, schema, jobIdText, current, 'runJobNow');
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
  options = knownOptions(options, ACTION_KEYS, action);
  const values = [jobIdText, allowed, actorOf(options), ...extra];
  let current: { status: JobStatus } | undefined;
  for (let tries = 1; ; tries++) {
    const job = withJobDates((await query<R>(db, admin[action], values, action))[0]);
    if (job) return { ok: true, job };
    [current] = await query<{ status: JobStatus }>(db, admin.statusOf, [jobIdText], action);
    // Between the two statements the job reached a status the action takes (a running
    // job failed as it was retried): refused "cannot retry a job that is failed"
    // (outside review 230). Tried again, a few times at most.
    if (!current || !allowed.includes(current.status) || tries === ACTION_TRIES) break;
  }
  return refusal(db, schema, jobIdText, current, action);
}

/**
 * Why an action changed nothing, `current` being the job's row in the jobs table if
 * any. Not there: gone, or archived by the pruner (found, but read-only; runJobNow
 * said "not found" for it, outside review 238).
 */
async function refusal(
  db: Queryable,
  schema: string,
  jobIdText: string,
  current: { status: JobStatus } | undefined,
  label: string,
): Promise<Exclude<JobActionResult, { ok: true }>> {
  if (current) return { ok: false, reason: 'wrong_status', status: current.status };
  const [archived] = await query<JobRow>(db, adminStatements(schema).getJob, [jobIdText], label);
  return archived
    ? { ok: false, reason: 'wrong_status', status: archived.status, archived: true }
    : { ok: false, reason: 'not_found' };
}

function dateOption(name: string, value: Date | undefined): Date | null {
  if (value === undefined) return null;
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new ValidationError(`listJobs: ${name} must be a valid Date`);
  return value;
}
