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
  const overdue = schedules
    .filter((s) => s.overdueSince !== null)
    .map((s) => {
      const overdueMs = Math.max(0, now.getTime() - s.overdueSince!.getTime());
      return { name: s.name, cron: s.cron, timezone: s.timezone, overdue_since: s.overdueSince, overdue_ms: overdueMs };
    });
  // Held by a last tick ahead of the clock: as long a wait as an overdue one, and no worker can end it.
  const ahead = schedules
    .filter((s) => s.aheadOfClock !== null)
    .map((s) => ({
      name: s.name,
      cron: s.cron,
      timezone: s.timezone,
      last_tick_ahead_ms: s.aheadOfClock!.getTime() - now.getTime(),
    }))
    .filter((d) => level(d.last_tick_ahead_ms, t.cronOverdueMs) !== 'ok');
  const lateMs = (d: (typeof overdue)[number] | (typeof ahead)[number]) =>
    'overdue_ms' in d ? d.overdue_ms : d.last_tick_ahead_ms;
  // A pattern no worker of this version can read ticks never, and is neither overdue
  // nor ahead: it went unflagged (outside review 267).
  const unreadable = schedules
    .filter((s) => s.patternError !== null)
    .map((s) => ({ name: s.name, cron: s.cron, timezone: s.timezone, pattern_error: s.patternError!, status: 'warn' as const }));
  const details = [
    ...unreadable,
    ...[...overdue, ...ahead]
      .map((d) => ({ ...d, status: level(lateMs(d), t.cronOverdueMs) }))
      .sort((a, b) => lateMs(b) - lateMs(a)),
  ];
  const summary =
    details.length === 0
      ? `${schedules.length} schedule(s), none overdue`
      : firstFew(
          details.map((d) =>
            'pattern_error' in d
              ? `${d.name} (${d.cron}): cannot be read (${d.pattern_error})`
              : 'overdue_ms' in d
                ? `${d.name} (${d.cron}): overdue ${formatMs(d.overdue_ms)}`
                : `${d.name} (${d.cron}): last tick ${formatMs(d.last_tick_ahead_ms)} ahead of the database clock`,
          ),
          'schedules',
          5,
          '; ',
        );
  const advice = [
    unreadable.length > 0
      ? 'A pattern or time zone this version cannot read is never ticked: a worker that defines the schedule writes ' +
        'its definition again at start; one nobody defines any more: `sluice cron delete <name>`.'
      : '',
    overdue.length > 0
      ? 'No worker is enqueuing the overdue ticks: start a worker whose `schedules` include them (every worker with ' +
        'schedules ticks them). A schedule taken out of the code stays until deleted: `sluice cron delete <name>`.'
      : '',
    ahead.length > 0
      ? 'A last tick ahead of the database clock (the clock stepped back, or the row was edited) holds its schedule ' +
        'until the clock passes it: `sluice cron delete <name>`, and a worker that defines it registers it again, from now.'
      : '',
  ];
  return result(
    'cron',
    'recurring schedules ticking',
    worst(details.map((d) => d.status)),
    summary,
    advice.filter((a) => a !== '').join(' '),
    details,
  );
}
