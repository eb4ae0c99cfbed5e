import type { Command } from 'commander';
import { listQueueSettings, setQueueConcurrencyLimit, setQueuePaused, type QueueSettings } from '../../control.js';
import { controlStatements } from '../../db/statements/control.js';
import { withDatabase } from '../database.js';
import { printJson, printTable, UsageError } from '../output.js';

function print(settings: QueueSettings, json: boolean | undefined): void {
  if (json) return printJson(settings);
  const limit = settings.concurrencyLimit === null ? 'no limit' : `limit ${settings.concurrencyLimit}`;
  process.stdout.write(`${settings.name}: ${settings.paused ? 'paused' : 'running'}, ${limit}\n`);
}

/** `sluice queues list|pause|resume|limit`: the persisted queue settings every worker follows. */
export function registerQueues(program: Command): void {
  const queues = program.command('queues').description('pause/resume queues and set cluster-wide concurrency limits');

  queues
    .command('list')
    .description('queues that have settings (others run unlimited)')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(async (flags: { json?: boolean }, command: Command) => {
      const list = await withDatabase(command, ({ pool, schema }) => listQueueSettings(pool, controlStatements(schema)));
      if (flags.json) return printJson(list);
      if (list.length === 0) return void process.stdout.write('no queue has settings: all run, unlimited\n');
      printTable(
        ['QUEUE', 'STATE', 'LIMIT', 'UPDATED'],
        list.map((q) => [
          q.name,
          q.paused ? 'paused' : 'running',
          q.concurrencyLimit === null ? '-' : String(q.concurrencyLimit),
          q.updatedAt.toISOString(),
        ]),
      );
    });

  for (const [verb, paused] of [
    ['pause', true],
    ['resume', false],
  ] as const) {
    queues
      .command(`${verb} <queue>`)
      .description(
        paused ? 'stop every worker claiming from a queue (jobs still enqueue)' : 'let workers claim from a paused queue again',
      )
      .option('--json', 'print the settings as JSON')
      .exitOverride()
      .action(async (name: string, flags: { json?: boolean }, command: Command) => {
        print(
          await withDatabase(command, ({ pool, schema }) => setQueuePaused(pool, controlStatements(schema), name, paused)),
          flags.json,
        );
      });
  }

  queues
    .command('limit <queue> <n>')
    .description('most jobs of a queue running at once across all workers ("none" removes it; 1 = serial)')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(async (name: string, n: string, flags: { json?: boolean }, command: Command) => {
      if (n !== 'none' && !/^\d+$/.test(n)) throw new UsageError('the limit must be a positive integer or "none"');
      const limit = n === 'none' ? null : Number(n);
      print(
        await withDatabase(command, ({ pool, schema }) => setQueueConcurrencyLimit(pool, controlStatements(schema), name, limit)),
        flags.json,
      );
    });
}
