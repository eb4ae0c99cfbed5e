import type { Queryable } from '../db/executor.js';
import { channelFor } from '../db/identifiers.js';
import { workerStatements } from '../db/statements/worker.js';

/**
 * Wakes idle workers of these queues. Jobs put back to pending by an update fire
 * no insert trigger, and without this they would wait for the next poll.
 */
export async function wakeQueues(db: Queryable, schema: string, queues: string[]): Promise<void> {
  if (queues.length === 0) return;
  await db.query(workerStatements(schema).notify, [channelFor(schema), queues]);
}
