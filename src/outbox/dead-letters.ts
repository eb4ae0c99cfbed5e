import { jobId, knownOptions } from '../admin/input.js';
import { rows, type Queryable } from '../db/executor.js';
import { outboxDeadLetterStatements } from '../db/statements/outbox-dead-letters.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { shown } from '../validate.js';

/** A message the broker refused maxAttempts times, set aside so that its key went on. */
export interface OutboxDeadLetter {
  id: string;
  destination: string;
  key: string | null;
  /** The payload's size. */
  bytes: number;
  attempts: number;
  /** The broker's last refusal. */
  lastError: string | null;
  createdAt: Date;
  deadAt: Date;
}

/** Dead letters of these destinations and/or with these ids. */
export interface OutboxDeadLetterFilter {
  destinations?: readonly string[];
  ids?: readonly (string | number)[];
}

/** Which dead letters to act on: a filter, or `all: true` for every one. */
export type OutboxDeadLetterTarget = OutboxDeadLetterFilter | { all: true };

const TARGET_KEYS = new Set(['destinations', 'ids', 'all']);
const LIST_KEYS = new Set(['destinations', 'ids', 'limit']);

/** Dead letters, oldest first (at most `limit`, default 100). */
export async function listOutboxDeadLetters(
  db: Queryable,
  schema: string,
  options: OutboxDeadLetterFilter & { limit?: number } = {},
): Promise<OutboxDeadLetter[]> {
  const o = knownOptions(options, LIST_KEYS, 'listOutboxDeadLetters');
  const limit = o.limit ?? 100;
  if (!Number.isSafeInteger(limit) || limit < 1)
    throw new ValidationError('listOutboxDeadLetters: limit must be a positive integer');
  const [destinations, ids] = filter(o, 'listOutboxDeadLetters');
  try {
    const found = await rows<{
      id: string;
      destination: string;
      key: string | null;
      bytes: number;
      attempts: number;
      last_error: string | null;
      created_at: Date;
      dead_at: Date;
    }>(db, outboxDeadLetterStatements(schema).list, [destinations, ids, limit]);
    return found.map((r) => ({
      id: r.id,
      destination: r.destination,
      key: r.key,
      bytes: Number(r.bytes),
      attempts: r.attempts,
      lastError: r.last_error,
      createdAt: r.created_at,
      deadAt: r.dead_at,
    }));
  } catch (err) {
    throw wrapDatabaseError(err, 'listOutboxDeadLetters');
  }
}

/**
 * Puts dead letters back into the outbox, in their original order, as new
 * messages: new ids (so new broker message ids), published after everything
 * committed before, by the relays of their destinations. Returns how many.
 * Fix what the broker refused first (a stream for the subject, a queue bound
 * for the routing key), or they come back.
 *
 * @example
 *   await redriveOutboxDeadLetters(pool, 'sluice', { destinations: ['orders.paid'] });
 */
export function redriveOutboxDeadLetters(db: Queryable, schema: string, target: OutboxDeadLetterTarget): Promise<number> {
  return act(db, outboxDeadLetterStatements(schema).redrive, target, 'redriveOutboxDeadLetters');
}

/** Deletes dead letters for good; returns how many. */
export function dropOutboxDeadLetters(db: Queryable, schema: string, target: OutboxDeadLetterTarget): Promise<number> {
  return act(db, outboxDeadLetterStatements(schema).drop, target, 'dropOutboxDeadLetters');
}

async function act(db: Queryable, statement: string, target: OutboxDeadLetterTarget, what: string): Promise<number> {
  // A misspelt `destinations` must not widen the call to every dead letter.
  const t = knownOptions(target, TARGET_KEYS, what);
  if (!t || typeof t !== 'object') throw new ValidationError(`${what}: give { destinations }, { ids } or { all: true }`);
  // Both given: which one was meant is not known, and `all` would act on every dead letter (outside review 173).
  if (
    'all' in t &&
    t.all !== undefined &&
    (('ids' in t && t.ids !== undefined) || ('destinations' in t && t.destinations !== undefined))
  ) {
    throw new ValidationError(`${what}: give { destinations }, { ids } or { all: true }, not { all } beside the others`);
  }
  const all = 'all' in t && t.all === true;
  const [destinations, ids] = all ? [null, null] : filter(t as OutboxDeadLetterFilter, what);
  if (!all && destinations === null && ids === null) {
    throw new ValidationError(`${what}: give { destinations }, { ids } or { all: true }`);
  }
  try {
    const [row] = await rows<{ n: number }>(db, statement, [destinations, ids]);
    return row?.n ?? 0;
  } catch (err) {
    throw wrapDatabaseError(err, what);
  }
}

/** An outbox message's id, checked as a job's is: "not a job id" misnamed it (outside review 173). */
function messageId(id: string | number): string {
  try {
    return jobId(id);
  } catch {
    throw new ValidationError(`not an outbox message id: ${shown(id)}`);
  }
}

/** The destinations and ids to pass ($1, $2), null where not given. */
function filter(o: OutboxDeadLetterFilter, what: string): [string[] | null, string[] | null] {
  const { destinations, ids } = o;
  if (destinations !== undefined && (!Array.isArray(destinations) || destinations.some((d) => typeof d !== 'string'))) {
    throw new ValidationError(`${what}: destinations must be an array of strings`);
  }
  if (ids !== undefined && !Array.isArray(ids)) throw new ValidationError(`${what}: ids must be an array`);
  return [destinations ? [...destinations] : null, ids ? ids.map((id) => messageId(id)) : null];
}
