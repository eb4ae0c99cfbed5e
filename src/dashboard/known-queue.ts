import type { Queryable } from '../db/executor.js';
import { ValidationError } from '../errors.js';
import { isKnownQueue } from '../groups/settings.js';

/** A change to a queue that has no jobs and no settings: the API answers 404. */
export class UnknownQueueError extends ValidationError {
  /** `creatable`: the route takes {"create": true}, and the message says so. */
  constructor(
    readonly queue: string,
    creatable = true,
  ) {
    super(
      `queue ${JSON.stringify(queue)} has no jobs and no settings: check the name` +
        (creatable ? ', or send {"create": true} to set it up before its first job' : ''),
    );
  }
}

/** Refuses (UnknownQueueError, a 404) a queue with no jobs and no settings, for a route that cannot create one. */
export async function requireKnownQueue(db: Queryable, schema: string, queue: string): Promise<void> {
  if (!(await isKnownQueue(db, schema, queue))) throw new UnknownQueueError(queue, false);
}

/**
 * `db` for one change to `queue` that refuses it (UnknownQueueError) when the
 * queue is unknown, unless `create`. The test runs at the change's first
 * statement: the setters check their arguments before any, so a bad setting is
 * still a 400 whatever the queue.
 */
export function forKnownQueue(db: Queryable, schema: string, queue: string, create: boolean): Queryable {
  if (create) return db;
  let checked: Promise<void> | undefined;
  return {
    async query(text, values) {
      checked ??= isKnownQueue(db, schema, queue).then((known) => {
        if (!known) throw new UnknownQueueError(queue);
      });
      await checked;
      return db.query(text, values);
    },
  };
}

/** The `create` flag of a change's JSON body: true skips the check above. */
export function createFlag(body: unknown): boolean {
  const create = (body as { create?: unknown } | null | undefined)?.create;
  if (create !== undefined && typeof create !== 'boolean') throw new ValidationError('create must be true or false');
  return create === true;
}
