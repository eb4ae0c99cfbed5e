import type { Command } from 'commander';
import { deleteSchedule } from '../../admin/schedules.js';
import { listSchedules, type ScheduleInfo } from '../../maintenance/cron.js';
import { withDatabase } from '../database.js';
import { CommandFailed, formatTime, printable, printJson, printTable, UsageError } from '../output.js';
import { CLI_ACTOR } from '../actor.js';

/** `sluice cron list`: the recurring schedules workers registered, with their next run. */
export function registerCron(program: Command): void {
  const cron = program.command('cron').description('recurring jobs (schedules are defined in code, in Worker options)');
  cron
    .command('list')
    .description('list schedules with their time zone, last enqueued tick (- before the first) and next run')
    .option('--json', 'print the schedules as JSON')
    .exitOverride()
    .action(async (opts: { json?: boolean }, command: Command) => {
      const schedules = await withDatabase(command, ({ pool, schema }) => listSchedules(pool, schema));
      if (opts.json) return printJson(schedules);
      if (schedules.length === 0) {
        process.stdout.write('no schedules (a worker registers its schedules when it starts)\n');
        return;
      }
      printTable(
        ['NAME', 'CRON', 'TIME ZONE', 'QUEUE/TASK', 'LAST TICK', 'NEXT RUN'],
        schedules.map((s) => [
          s.name,
          s.cron,
          s.timezone,
          `${s.queue}/${s.task}${s.group === null ? '' : ` (group ${s.group})`}`,
          formatTime(s.lastTick),
          nextRunCell(s),
        ]),
      );
    });
  cron
    .command('delete')
    .description(
      'delete a schedule taken out of the workers (a running worker that still defines it registers it again within a minute)',
    )
    .argument('<name>', 'the schedule name')
    .exitOverride()
    .action(async (name: string, _opts: object, command: Command) => {
      if (name === '') throw new UsageError('<name> must not be empty');
      const deleted = await withDatabase(command, ({ pool, schema }) => deleteSchedule(pool, schema, name, { actor: CLI_ACTOR }));
      if (!deleted) throw new CommandFailed(`no schedule named ${JSON.stringify(name)}`);
      process.stdout.write(`deleted schedule ${printable(name)}\n`);
    });
}

/**
 * The NEXT RUN column, with why there is none: a bare "-" stood for a pattern this
 * version cannot read, a last tick ahead of the clock and a pattern with no more
 * runs alike, the reason only in --json (outside review 279).
 */
function nextRunCell(s: ScheduleInfo): string {
  // The reason itself: an unknown time zone and a pattern that never fires read alike (outside review 280).
  if (s.patternError !== null) return `none: ${s.patternError}`;
  // No worker ticks it: "next run" would be a promise nobody keeps.
  if (s.overdueSince) return `overdue since ${formatTime(s.overdueSince)}`;
  if (s.aheadOfClock && s.nextRun === null) return `none: its last tick (${formatTime(s.aheadOfClock)}) is ahead of the clock`;
  if (s.nextRun === null) return 'none: the pattern has no more runs';
  return s.aheadOfClock ? `${formatTime(s.nextRun)} (held: its last tick is ahead of the clock)` : formatTime(s.nextRun);
}
