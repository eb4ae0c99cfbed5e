import type { Queryable } from '../db/executor.js';
import { adminStatements } from '../db/statements/admin.js';
import { ValidationError } from '../errors.js';
import { channelFor, doneChannelFor } from '../db/identifiers.js';
import { CANCELLABLE, FINISHED, isFinished, type JobStatus, type UnfinishedStatus } from '../job.js';
import { wakeQueues } from '../notify/wake-queues.js';
import { storableAge } from '../time-range.js';
import { checks } from '../validate.js';
import { knownOptions, query, refuseUndefinedFilter } from './input.js';
import { actorOf, type ActionOptions } from './jobs.js';

// The admin API's actions on many jobs at once: each one statement (or one per batch).

const { checkName, intOption } = checks(ValidationError);

const RETRY_FAILED_KEYS = new Set(['queue', 'actor']);
const CANCEL_JOBS_KEYS = new Set(['queue', 'task', 'statuses', 'actor']);
const DELETE_FINISHED_KEYS = new Set(['olderThanMs', 'statuses', 'batchSize']);

/** Retries every failed job (of one queue, or all). Returns how many, per queue. */
export async function retryFailed(
  db: Queryable,
  schema: string,
  options: { queue?: string } & ActionOptions = {},
): Promise<{ retried: number; queues: Record<string, number> }> {
  options = knownOptions(options, RETRY_FAILED_KEYS, 'retryFailed');
  refuseUndefinedFilter(options, 'queue', 'retryFailed');
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

export interface CancelJobsOptions extends ActionOptions {
  /** The queue whose jobs to cancel. A queue, a task or both must be given. */
  queue?: string;
  /** Only jobs of this task. */
  task?: string;
  /** Which unfinished statuses to cancel. Default both, ['pending', 'processing']. */
  statuses?: readonly UnfinishedStatus[];
}

/**
 * Cancels the unfinished jobs of a queue and/or a task, as cancelJob does one:
 * a pending job never runs, a processing one's handler is aborted (its worker is
 * told in the same statement), waiters are woken, each is recorded in the audit
 * log. One statement: none of the jobs it cancels is claimed after it commits,
 * though a worker may start jobs it claimed ahead until the cancel's notification
 * reaches it (then aborts them), as for cancelJob; jobs enqueued after it are
 * left. Returns how many, by the status they had.
 */
export async function cancelJobs(
  db: Queryable,
  schema: string,
  options: CancelJobsOptions,
): Promise<{ cancelled: number; pending: number; processing: number }> {
  options = knownOptions(options, CANCEL_JOBS_KEYS, 'cancelJobs');
  if (!options || typeof options !== 'object') throw new ValidationError('cancelJobs: give { queue } or { task } (or both)');
  refuseUndefinedFilter(options, 'queue', 'cancelJobs');
  refuseUndefinedFilter(options, 'task', 'cancelJobs');
  // Never the whole schema by a missing filter: a typo in a variable name cancelled everything.
  if (options.queue === undefined && options.task === undefined) {
    throw new ValidationError('cancelJobs: give { queue } or { task } (or both): it does not cancel every job of the schema');
  }
  const queue = options.queue === undefined ? null : checkName('queue', options.queue);
  const task = options.task === undefined ? null : checkName('task', options.task);
  if (options.statuses !== undefined && !Array.isArray(options.statuses)) {
    throw new ValidationError('cancelJobs: statuses must be an array, e.g. ["pending"]');
  }
  const statuses = [...(options.statuses ?? CANCELLABLE)];
  if (statuses.length === 0) throw new ValidationError('cancelJobs: statuses is empty');
  for (const status of statuses) {
    if (!CANCELLABLE.includes(status)) {
      throw new ValidationError(`cancelJobs: can only cancel ${CANCELLABLE.join(' and ')} jobs, not ${JSON.stringify(status)}`);
    }
  }
  const [counts] = await query<{ pending: number; processing: number }>(
    db,
    adminStatements(schema).cancelMany,
    [queue, statuses, actorOf(options), channelFor(schema), doneChannelFor(schema), task],
    'cancelJobs',
  );
  const { pending, processing } = counts!;
  return { cancelled: pending + processing, pending, processing };
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
  options = knownOptions(options, DELETE_FINISHED_KEYS, 'deleteFinished');
  // Bounded: an age past the year 1 reached Postgres as "interval out of range" (outside review 75).
  if (!options || !storableAge(options.olderThanMs)) {
    throw new ValidationError(
      'deleteFinished: olderThanMs must be a number of milliseconds >= 0, reaching back no further than the year 1',
    );
  }
  // An array: a string was read one character at a time (outside review 75).
  if (options.statuses !== undefined && !Array.isArray(options.statuses)) {
    throw new ValidationError('deleteFinished: statuses must be an array, e.g. ["completed"]');
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
