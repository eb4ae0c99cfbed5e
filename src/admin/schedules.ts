import { rows, type Queryable } from '../db/executor.js';
import { runNowStatements } from '../db/statements/run-now.js';
import { wrapDatabaseError } from '../errors.js';
import { actorOfOptions, type ActionOptions } from './jobs.js';

/**
 * Enqueues one job of a recurring schedule now, with the schedule's task,
 * queue, payload, priority and attempts, besides its regular ticks (which stay
 * as they were). Undefined when no worker has registered a schedule of that
 * name. Recorded in the audit log as 'run_schedule' on the new job.
 *
 * @example
 *   const job = await runScheduleNow(pool, 'sluice', 'nightly-report', { actor: 'cli' });
 */
export async function runScheduleNow(
  db: Queryable,
  schema: string,
  name: string,
  options: ActionOptions = {},
): Promise<{ id: string; queue: string } | undefined> {
  try {
    const [job] = await rows<{ id: string; queue: string }>(db, runNowStatements(schema).schedule, [
      String(name),
      actorOfOptions(options, 'runScheduleNow'),
    ]);
    return job;
  } catch (err) {
    throw wrapDatabaseError(err, 'runScheduleNow failed');
  }
}
