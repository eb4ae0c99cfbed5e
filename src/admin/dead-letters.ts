import type { Queryable } from '../db/executor.js';
import { ValidationError } from '../errors.js';
import { retryFailed } from './bulk.js';
import { jobId, knownOptions, refuseUndefinedFilter } from './input.js';
import {
  LIST_KEYS,
  listJobs,
  retryJob,
  type ActionOptions,
  type JobActionResult,
  type JobPage,
  type ListJobsOptions,
} from './jobs.js';

/**
 * Dead letters: jobs that are 'failed' for good (attempts spent, or PermanentFailure),
 * each keeping its full error history in `errors`. Listing and redriving are the
 * admin API's listJobs / retryJob / retryFailed seen from this angle; inspect one
 * with getJob (it returns `errors`).
 */

/** listJobs' options but status, which is 'failed' here. */
const DEAD_LETTER_KEYS = new Set([...LIST_KEYS].filter((key) => key !== 'status'));

/** Failed jobs, newest job first (by id, as listJobs pages them), keyset-paged like listJobs. */
export async function listDeadLetters(
  db: Queryable,
  schema: string,
  options: Omit<ListJobsOptions, 'status'> = {},
): Promise<JobPage> {
  // A rejection, as from every admin call (it threw at the call, and a TypeError for null; outside review 245).
  if (options === null || typeof options !== 'object') throw new ValidationError('listDeadLetters: options must be an object');
  if ('status' in options) throw new ValidationError('listDeadLetters: dead letters are the failed jobs; do not pass status');
  // Checked here too, so that a misspelt key is refused in this function's name (outside review 248: "listJobs: ...").
  return listJobs(db, schema, { ...knownOptions(options, DEAD_LETTER_KEYS, 'listDeadLetters'), status: 'failed' });
}

export type RedriveTarget =
  /** These jobs (each back to pending, due now). */
  | { ids: readonly (string | number)[] }
  /** Every failed job, or every failed job of one queue, in one statement. */
  | { all: true; queue?: string };

export interface RedriveResult {
  /** How many jobs went back to pending. */
  redriven: number;
  /** Ids that were not redriven, with why (not found, or not failed/cancelled). */
  skipped: { id: string; reason: string }[];
}

const REDRIVE_KEYS = new Set(['ids', 'all', 'queue']);

/**
 * Re-enqueues dead letters: back to 'pending', due now, error history kept (a job
 * that spent its attempts gets one more, as with retryJob). Wakes the queues'
 * workers. `options.actor` is recorded in the audit log, as with retryJob.
 *
 * @example
 *   await redriveDeadLetters(pool, 'sluice', { ids: ['42', '43'] });
 *   await redriveDeadLetters(pool, 'sluice', { all: true, queue: 'mail' });
 */
export async function redriveDeadLetters(
  db: Queryable,
  schema: string,
  target: RedriveTarget,
  options: ActionOptions = {},
): Promise<RedriveResult> {
  // Left out, it threw a TypeError of its own (outside review 170).
  if (typeof target !== 'object' || target === null) {
    throw new ValidationError('redriveDeadLetters: give { ids: [...] } or { all: true }');
  }
  // A misspelt `queue` would redrive the failed jobs of every queue.
  target = knownOptions(target, REDRIVE_KEYS, 'redriveDeadLetters');
  // `queue` filters `all` only: beside ids it was ignored (outside review 170).
  if ('ids' in target && 'queue' in target) {
    throw new ValidationError('redriveDeadLetters: queue goes with { all: true }, not with ids');
  }
  // Both given: which one was meant is not known, and `all` would redrive every dead letter.
  if ('all' in target && 'ids' in target && target.all !== undefined && target.ids !== undefined) {
    throw new ValidationError('redriveDeadLetters: give { ids: [...] } or { all: true }, not both');
  }
  if ('all' in target && target.all === true) {
    refuseUndefinedFilter(target, 'queue', 'redriveDeadLetters');
    const { retried } = await retryFailed(db, schema, target.queue === undefined ? options : { ...options, queue: target.queue });
    return { redriven: retried, skipped: [] };
  }
  if (!('ids' in target) || !Array.isArray(target.ids) || target.ids.length === 0) {
    throw new ValidationError('redriveDeadLetters: give { ids: [...] } (non-empty) or { all: true }');
  }
  // Every id checked before any job is redriven: a bad one after good ones threw
  // after redriving those (outside review 165), and a caller who fixed the list and
  // tried again redrove them twice.
  const ids = target.ids.map((id: string | number) => jobId(id));
  const result: RedriveResult = { redriven: 0, skipped: [] };
  for (const id of ids) {
    const outcome: JobActionResult = await retryJob(db, schema, id, options);
    if (outcome.ok) result.redriven++;
    else
      result.skipped.push({
        id: String(id),
        reason: outcome.reason === 'wrong_status' ? `status is ${outcome.status}` : 'not found',
      });
  }
  return result;
}
