import type { Queryable } from '../db/executor.js';
import { isKnownQueue } from '../groups/settings.js';
import { UsageError } from './output.js';

/**
 * Refuses a queue that has no jobs and no settings: a misspelt name would act on
 * nothing and say so with exit 0 (outside reviews 109 and 156). `orElse` adds
 * what else the caller may do.
 */
export async function requireKnownQueue(db: Queryable, schema: string, name: string, orElse = ''): Promise<void> {
  if (await isKnownQueue(db, schema, name)) return;
  throw new UsageError(
    `queue ${JSON.stringify(name)} has no jobs and no settings: check the name (sluice queues list, sluice stats)${orElse}`,
  );
}
