import type { ControlStatements } from './db/statements/control.js';
import { encodeControl } from './notify/codec.js';
import { rows, type Queryable } from './db/executor.js';
import { ValidationError, wrapDatabaseError } from './errors.js';
import { actorOfOptions, type ActionOptions } from './admin/jobs.js';
import { checks } from './validate.js';

const { checkName, intOption } = checks(ValidationError);

/** A queue's persisted settings (queues without a row are running and unlimited). */
export interface QueueSettings {
  name: string;
  paused: boolean;
  /** Most jobs of this queue processing at once across all workers; null = no limit. */
  concurrencyLimit: number | null;
  updatedAt: Date;
}

/**
 * Pauses (true) or resumes (false) a queue for every worker. Jobs still enqueue.
 * Recorded in the audit log with `options.actor` (default 'api').
 */
export async function setQueuePaused(
  db: Queryable,
  queries: ControlStatements,
  queue: string,
  paused: boolean,
  options: ActionOptions = {},
): Promise<QueueSettings> {
  return upsertQueue(db, queries.setPaused, queries.channel, queue, paused, options);
}

/** Sets (or with null removes) the cluster-wide concurrency limit of a queue. */
export async function setQueueConcurrencyLimit(
  db: Queryable,
  queries: ControlStatements,
  queue: string,
  limit: number | null,
  options: ActionOptions = {},
): Promise<QueueSettings> {
  if (limit === undefined) throw new ValidationError('concurrency limit: give a number from 1 to 10000, or null for none');
  const value = limit === null ? null : intOption('concurrency limit', limit, 0, 1, 10_000);
  return upsertQueue(db, queries.setConcurrencyLimit, queries.channel, queue, value, options);
}

/** Every queue that has settings, by name. */
export async function listQueueSettings(db: Queryable, queries: ControlStatements): Promise<QueueSettings[]> {
  try {
    return (await rows<QueueRow>(db, queries.listQueues)).map(toSettings);
  } catch (err) {
    throw wrapDatabaseError(err, 'listing queues failed');
  }
}

interface QueueRow {
  name: string;
  paused: boolean;
  concurrency_limit: number | null;
  updated_at: Date;
}

async function upsertQueue(
  db: Queryable,
  text: string,
  channel: string,
  queue: string,
  value: unknown,
  options: ActionOptions,
): Promise<QueueSettings> {
  const name = checkName('queue', queue);
  const actor = actorOfOptions(options, 'queue settings');
  try {
    const [row] = await rows<QueueRow>(db, text, [name, value, channel, actor, encodeControl({ c: 'queues' })]);
    return toSettings(row!);
  } catch (err) {
    throw wrapDatabaseError(err, `updating queue ${JSON.stringify(name)} failed`);
  }
}

function toSettings(row: QueueRow): QueueSettings {
  return { name: row.name, paused: row.paused, concurrencyLimit: row.concurrency_limit, updatedAt: row.updated_at };
}
