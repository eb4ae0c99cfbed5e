import { rows, type Queryable } from '../db/executor.js';
import { channelFor } from '../db/identifiers.js';
import { maintenanceStatements } from '../db/statements/maintenance.js';
import type { MaintenanceService } from './runner.js';

/** How often the leader looks by default: a new group waits at most about this long for its turn. */
const DEFAULT_INTERVAL_MS = 1_000;
/** After a pass that failed (a role without EXECUTE on mark_queue_grouped, see roles.sql): not an error a second. */
const AFTER_ERROR_MS = 60_000;

/**
 * A leader task: flags grouped the queues whose grouped jobs wait in a queue not
 * flagged yet, so workers claim them round-robin from then on. Workers flag a
 * queue themselves when they claim its first grouped job, but in common order
 * that comes only after every older job of the queue: new small groups waited
 * behind a whole backlog without groups (outside review 115). One statement per
 * pass, whose cost grows with the number of queues, not of jobs.
 */
export function groupedQueuesTask(db: Queryable, schema: string, intervalMs = DEFAULT_INTERVAL_MS): MaintenanceService<string[]> {
  const statement = maintenanceStatements(schema).flagGroupedQueues;
  const channel = channelFor(schema);
  return {
    name: 'grouped-queues',
    intervalMs: (flagged) => (flagged === undefined ? AFTER_ERROR_MS : intervalMs),
    run: async () => {
      const found = await rows<{ queue: string; flagged: boolean }>(db, statement, [channel]);
      return found.filter((r) => r.flagged).map((r) => r.queue);
    },
  };
}
