import { buildAdminQueries, type AdminQueries } from '../db/admin-queries.js';
import { buildQueries, type Queries } from '../db/queries.js';
import { channelFor } from '../db/identifiers.js';
import type { Queryable } from '../db/executor.js';

const cache = new Map<string, { admin: AdminQueries; runtime: Queries }>();

/**
 * The statements for a schema, built (and the schema validated) once per schema:
 * admin functions are called per request by the dashboard, per command by the CLI.
 */
export function queriesFor(schema: string): { admin: AdminQueries; runtime: Queries } {
  let entry = cache.get(schema);
  if (!entry) {
    entry = { admin: buildAdminQueries(schema), runtime: buildQueries(schema) };
    cache.set(schema, entry);
  }
  return entry;
}

/**
 * Wakes idle workers of these queues. Jobs put back to pending by an UPDATE fire
 * no insert trigger, and without this they would wait for the next poll.
 */
export async function wakeQueues(db: Queryable, schema: string, queues: string[]): Promise<void> {
  if (queues.length === 0) return;
  await db.query(queriesFor(schema).runtime.notify, [channelFor(schema), queues]);
}
