import { rows, type Queryable } from '../db/executor.js';
import { outboxStatements } from '../db/statements/outbox.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';

/** What forgetOutboxDestination did: forgotten, or why not. */
export type ForgetDestinationResult =
  | { forgotten: true; partitions: number }
  | { forgotten: false; reason: 'unknown' | 'held' | 'waiting'; held: number; waiting: number };

/**
 * Forgets a destination a relay once started on (a typo, one retired): its
 * partitions' rows go, so `--status`, the doctor's outbox_lag check and the lag
 * metrics no longer list it (outside review 247: one started by mistake stayed in
 * all three for good). Refused while a relay holds one of its partitions or one of
 * its messages waits: stop its relays first, and publish or move its messages.
 * Its dead letters stay, for `--dead-letters`. A relay started on it again starts
 * it afresh.
 *
 * @example
 *   await forgetOutboxDestination(pool, 'sluice', 'ordres.paid');
 */
export async function forgetOutboxDestination(
  db: Queryable,
  schema: string,
  destination: string,
): Promise<ForgetDestinationResult> {
  if (typeof destination !== 'string' || destination === '') {
    throw new ValidationError('forgetOutboxDestination: destination must be a non-empty string');
  }
  let state: { partitions: number; held: number; waiting: number; forgotten: boolean };
  try {
    [state] = (await rows(db, outboxStatements(schema).forgetDestination, [destination])) as [typeof state];
  } catch (err) {
    throw wrapDatabaseError(err, 'forgetOutboxDestination');
  }
  const { partitions, held, waiting } = state;
  if (state.forgotten) return { forgotten: true, partitions };
  const reason = partitions === 0 ? 'unknown' : held > 0 ? 'held' : 'waiting';
  return { forgotten: false, reason, held, waiting };
}
