import { rows, type Queryable } from '../db/executor.js';
import { cronStatements } from '../db/statements/cron.js';
import { runNowStatements } from '../db/statements/run-now.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { unstorableText } from '../validate.js';
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
      scheduleName(name, 'runScheduleNow'),
      actorOfOptions(options, 'runScheduleNow'),
    ]);
    return job;
  } catch (err) {
    throw wrapDatabaseError(err, 'runScheduleNow failed');
  }
}

/**
 * Deletes a recurring schedule: for one taken out of the workers' `schedules`,
 * which stays listed (overdue) until then. A worker that still defines it
 * registers it again at its next pass (within a minute), counting from then. False when there was
 * no schedule of that name. Recorded in the audit log as 'delete_schedule'.
 *
 * @example
 *   await deleteSchedule(pool, 'sluice', 'old-report', { actor: 'cli' });
 */
export async function deleteSchedule(db: Queryable, schema: string, name: string, options: ActionOptions = {}): Promise<boolean> {
  try {
    const gone = await rows(db, cronStatements(schema).remove, [
      scheduleName(name, 'deleteSchedule'),
      actorOfOptions(options, 'deleteSchedule'),
    ]);
    return gone.length > 0;
  } catch (err) {
    throw wrapDatabaseError(err, 'deleteSchedule failed');
  }
}

/** A schedule's name as given, or a ValidationError: `undefined` named the schedule "undefined" (outside review 84). */
function scheduleName(name: unknown, what: string): string {
  if (typeof name !== 'string' || name.length === 0) throw new ValidationError(`${what}: name must be a non-empty string`);
  const unstorable = unstorableText(name);
  if (unstorable) throw new ValidationError(`${what}: name contains ${unstorable}`);
  return name;
}
