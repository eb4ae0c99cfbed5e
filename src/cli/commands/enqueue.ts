import type { Command } from 'commander';
import { listQueueSettings, type QueueSettings } from '../../control.js';
import type { Queryable } from '../../db/executor.js';
import { isInsufficientPrivilege } from '../../errors.js';
import { controlStatements } from '../../db/statements/control.js';
import { Queue } from '../../queue.js';
import { withDatabase } from '../database.js';
import { printable, printJson, terminalText, UsageError } from '../output.js';
import { dateTime, durationWithin, integer } from '../parse.js';

/** The longest --delay: 100 years (36525d). */
const MAX_DELAY_MS = 36_525 * 86_400_000;

interface EnqueueFlags {
  queue?: string;
  runAt?: Date;
  delay?: number;
  maxAttempts?: number;
  priority?: number;
  group?: string;
  json?: boolean;
}

/** The payload argument as a value; bad JSON is the caller's mistake, reported before connecting. */
function parsePayload(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UsageError(`payload is not valid JSON: ${(err as Error).message}`);
  }
}

/** The queue's settings for the paused note, or undefined when they cannot be read. */
async function pausedNoteSettings(pool: Queryable, schema: string, name: string): Promise<QueueSettings | undefined> {
  try {
    return (await listQueueSettings(pool, controlStatements(schema))).find((q) => q.name === name);
  } catch (err) {
    if (!isInsufficientPrivilege(err)) {
      process.stderr.write(
        terminalText(`note: could not check whether queue ${printable(name)} is paused: ${(err as Error).message}\n`),
      );
    }
    return undefined;
  }
}

export function registerEnqueue(program: Command): void {
  program
    .command('enqueue')
    .description('add a job and print its id')
    .argument('<task>', 'task name')
    .argument('[payload]', 'JSON payload, e.g. \'{"userId":42}\' (default {})')
    .option('--queue <name>', 'queue', 'default')
    .option(
      '--run-at <time>',
      'run no earlier than this time (ISO 8601: a date, midnight UTC, or a date and time with its zone, Z or +02:00)',
      dateTime,
    )
    // Checked here, in the flag's words: 10000y was told "delayMs must be ... got 315576000000000" (outside review 276).
    .option('--delay <duration>', 'run no earlier than this long from now (30s, 5m, 2h)', durationWithin(0, MAX_DELAY_MS))
    .option('--max-attempts <n>', 'attempts before the job fails for good (default 5)', integer(1, 1000))
    .option('--priority <n>', 'higher runs first (default 0)', integer(-32768, 32767))
    .option('--group <key>', 'its group: a tenant, a customer (1-128 characters)')
    .option('--json', 'print {"id": ...} instead of the bare id')
    .addHelpText(
      'after',
      `
Examples:
  sluice enqueue send_welcome '{"userId":42}'
  sluice enqueue report --queue slow --delay 10m --max-attempts 3
  sluice enqueue sync '{"accountId":42}' --queue sync --group account-42`,
    )
    .action(async (task: string, payloadText: string | undefined, flags: EnqueueFlags, command: Command) => {
      const payload = parsePayload(payloadText);
      if (flags.runAt && flags.delay !== undefined) throw new UsageError('give --run-at or --delay, not both');
      await withDatabase(command, async ({ pool, schema }) => {
        // One statement per process: a named prepared statement is never reused, and
        // behind a transaction-mode PgBouncer before 1.21 the next run met the name left
        // on its server connection and warned on every call (outside review 209).
        const queue = new Queue({ pool, schema, preparedStatements: false });
        const id = await queue.enqueue(task, payload, {
          queue: flags.queue,
          runAt: flags.runAt,
          delayMs: flags.delay,
          maxAttempts: flags.maxAttempts,
          priority: flags.priority,
          group: flags.group,
        });
        if (flags.json) printJson({ id });
        else process.stdout.write(`${id}\n`);
        // The job is in, but nothing will run it until the queue is resumed: say so, on stderr.
        // The job is committed by now: a failure to look must not make the command fail,
        // or a script that retries on a non-zero exit enqueues it twice (outside review
        // 156: a role with only sluice_enqueue may not read the queues table).
        const settings = await pausedNoteSettings(pool, schema, flags.queue ?? 'default');
        if (settings?.paused) {
          // Quoted for the shell, escaped for the terminal: a name with escape codes or
          // spaces printed raw, as a command that would not run (outside review 267).
          process.stderr.write(
            terminalText(
              `note: queue ${JSON.stringify(settings.name)} is paused: no worker takes the job until ` +
                `\`sluice queues resume ${shellWord(settings.name)}\`\n`,
            ),
          );
        }
      });
    });
}

/** A word as a POSIX shell reads it back: as is when plain, else single-quoted. */
function shellWord(word: string): string {
  return /^[\w.:@/+-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
