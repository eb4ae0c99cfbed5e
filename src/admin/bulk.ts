import type { Queryable } from '../db/executor.js';
import { adminStatements } from '../db/statements/admin.js';
import { ValidationError } from '../errors.js';
import { FINISHED, isFinished, type JobStatus } from '../job.js';
import { wakeQueues } from '../notify/wake-queues.js';
import { storableAge } from '../time-range.js';
import { checks } from '../validate.js';
import { knownOptions, query, refuseUndefinedFilter } from './input.js';
import { actorOf, type ActionOptions } from './jobs.js';

// The admin API's actions on many jobs at once: each one statement (or one per batch).

const { checkName, intOption } = checks(ValidationError);

const RETRY_FAILED_KEYS = new Set(['queue', 'actor']);
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
