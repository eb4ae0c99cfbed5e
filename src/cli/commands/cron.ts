import type { Command } from 'commander';
import pg from 'pg';
import { listSchedules } from '../../maintenance/cron.js';
import { connectionError } from '../../db/connection.js';
import { globalOptions, requireDatabaseUrl } from '../database.js';
import { printJson } from '../output.js';

/** `sluice cron list`: the recurring schedules workers registered, with their next run. */
export function registerCron(program: Command): void {
  const cron = program.command('cron').description('recurring jobs (schedules are defined in code, in Worker options)');
  cron
    .command('list')
    .description('list schedules with their time zone, last enqueued tick and next run')
    .option('--json', 'print the schedules as JSON')
    .exitOverride()
    .action(async (opts: { json?: boolean }, command: Command) => {
      const global = globalOptions(command);
      const url = requireDatabaseUrl(global);
      const client = new pg.Client({ connectionString: url, application_name: 'sluice-cli' });
      try {
        await client.connect();
      } catch (err) {
        throw connectionError(err, url);
      }
      try {
        const schedules = await listSchedules(client, global.schema);
        if (opts.json) return printJson(schedules);
        if (schedules.length === 0) {
          process.stdout.write('no schedules (a worker registers its schedules when it starts)\n');
          return;
        }
        const lines = schedules.map((s) => [
          s.name, s.cron, s.timezone, `${s.queue}/${s.task}`, s.lastTick.toISOString(), s.nextRun?.toISOString() ?? '-',
        ]);
        const table = [['NAME', 'CRON', 'TIME ZONE', 'QUEUE/TASK', 'LAST TICK', 'NEXT RUN'], ...lines];
        const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
        for (const row of table) process.stdout.write(`${row.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd()}\n`);
      } finally {
        await client.end();
      }
    });
}
