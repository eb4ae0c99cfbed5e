import type { Queryable } from '../db/executor.js';
import { schedulesNow } from '../maintenance/cron.js';
import { level, result, worst, type CheckResult, type DoctorThresholds } from './findings.js';
import { firstFew, formatMs } from './format.js';

/**
 * Recurring schedules whose next tick is more than a minute past with nothing
 * enqueued (listSchedules' `overdueSince`): no worker is ticking them, because
 * none runs, or because the schedule left the workers' code and was never deleted.
 * `sluice cron list` showed them overdue while the doctor said all was well
 * (outside review 182).
 */
export async function checkCron(db: Queryable, schema: string, t: DoctorThresholds): Promise<CheckResult> {
  // On the database clock, as overdueSince is: on the doctor's own, a client clock off by
  // days made a schedule two minutes overdue 'critical', or an hour's one 'ok' (outside review 224).
  const { now, schedules } = await schedulesNow(db, schema);
  const details = schedules
    .filter((s) => s.overdueSince !== null)
    .map((s) => {
      const overdueMs = Math.max(0, now.getTime() - s.overdueSince!.getTime());
      return {
        name: s.name,
        cron: s.cron,
        timezone: s.timezone,
        overdue_since: s.overdueSince,
        overdue_ms: overdueMs,
        status: level(overdueMs, t.cronOverdueMs),
      };
    })
    .sort((a, b) => b.overdue_ms - a.overdue_ms);
  const summary =
    details.length === 0
      ? `${schedules.length} schedule(s), none overdue`
      : firstFew(
          details.map((d) => `${d.name} (${d.cron}): overdue ${formatMs(d.overdue_ms)}`),
          'schedules',
          5,
          '; ',
        );
  return result(
    'cron',
    'recurring schedules ticking',
    worst(details.map((d) => d.status)),
    summary,
    'No worker is enqueuing these ticks: start a worker whose `schedules` include them (every worker with ' +
      'schedules ticks them). A schedule taken out of the code stays until deleted: `sluice cron delete <name>`.',
    details,
  );
}
