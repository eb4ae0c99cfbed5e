import type { Command } from 'commander';
import { listDeadLetters, redriveDeadLetters } from '../../admin/dead-letters.js';
import { getJob } from '../../admin/jobs.js';
import { requireKnownQueue } from '../known-queue.js';
import { withDatabase } from '../database.js';
import { ExitStatus, formatTime, printable, printJson, printTable, terminalText, UsageError } from '../output.js';
import { integer } from '../parse.js';
import { CLI_ACTOR } from '../actor.js';

interface ListFlags {
  queue?: string;
  task?: string;
  limit?: number;
  before?: string;
  json?: boolean;
}

/** First line of an error, cut to fit a table cell. */
function headline(text: string | null, width = 60): string {
  const line = (text ?? '').split('\n', 1)[0]!;
  return line.length > width ? `${line.slice(0, width - 1)}…` : line;
}

/** `sluice dead-letters list|show|redrive`: failed jobs, their error history, re-enqueueing them. */
export function registerDeadLetters(program: Command): void {
  const dl = program.command('dead-letters').description('failed jobs: list, show the error history, redrive');

  dl.command('list')
    .description('failed jobs, newest first')
    .option('--queue <name>', 'only this queue')
    .option('--task <name>', 'only this task')
    .option('--limit <n>', 'jobs per page (1-1000)', integer(1, 1000), 50)
    .option('--before <id>', 'the page after this id (printed as "next page")')
    .option('--json', 'print the page as JSON')
    .exitOverride()
    .action(async (flags: ListFlags, command: Command) => {
      const page = await withDatabase(command, ({ pool, schema }) =>
        listDeadLetters(pool, schema, {
          queue: flags.queue,
          task: flags.task,
          limit: flags.limit,
          before: flags.before,
        }),
      );
      if (flags.json) return printJson(page);
      if (page.jobs.length === 0) return void process.stdout.write('no dead letters\n');
      printTable(
        ['ID', 'QUEUE', 'TASK', 'ATTEMPTS', 'FAILED AT', 'LAST ERROR'],
        page.jobs.map((j) => [
          j.id,
          j.queue,
          j.task,
          `${j.attempts}/${j.max_attempts}`,
          formatTime(j.finished_at),
          headline(j.last_error),
        ]),
      );
      if (page.nextBefore) process.stdout.write(`next page: --before ${page.nextBefore}\n`);
    });

  dl.command('show <id>')
    .description('one job with its full error history')
    .option('--json', 'print the job as JSON')
    .exitOverride()
    .action(async (id: string, flags: { json?: boolean }, command: Command) => {
      const job = await withDatabase(command, ({ pool, schema }) => getJob(pool, schema, id));
      if (!job) {
        process.stderr.write(`sluice: no job with id ${printable(id)}\n`);
        throw new ExitStatus(1);
      }
      // Outside review 109: a cancelled job was shown as if it were a dead letter.
      if (job.status !== 'failed') {
        process.stderr.write(`sluice: job ${job.id} is ${job.status}, not a dead letter: see sluice jobs show ${job.id}\n`);
        throw new ExitStatus(1);
      }
      if (flags.json) return printJson(job);
      process.stdout.write(
        `job ${job.id}  ${printable(job.queue)}/${printable(job.task)}  ${job.status}  attempts ${job.attempts}/${job.max_attempts}\n`,
      );
      // Payload and errors as written by the job: escape codes there printed raw (outside review 265).
      process.stdout.write(terminalText(`payload ${JSON.stringify(job.payload)}\n`));
      for (const e of job.errors ?? []) {
        process.stdout.write(terminalText(`\nattempt ${e.attempt} at ${formatTime(e.at)}: ${e.message}\n`));
        if (e.stack && e.stack !== e.message) process.stdout.write(terminalText(`${e.stack.split('\n').slice(1).join('\n')}\n`));
      }
    });

  dl.command('redrive [ids...]')
    .description('put failed jobs back to pending (by id, or --all [--queue])')
    .option('--all', 'every failed job (of --queue, if given)')
    .option('--queue <name>', 'with --all: only this queue')
    .option('--json', 'print the result as JSON')
    .exitOverride()
    .action(async (ids: string[], flags: { all?: boolean; queue?: string; json?: boolean }, command: Command) => {
      if (flags.all && ids.length > 0) throw new UsageError('give job ids or --all, not both');
      if (!flags.all && ids.length === 0) throw new UsageError('give the ids of the jobs to redrive, or --all');
      if (flags.queue !== undefined && !flags.all) throw new UsageError('--queue goes with --all');
      const result = await withDatabase(command, async ({ pool, schema }) => {
        if (flags.queue !== undefined) await requireKnownQueue(pool, schema, flags.queue);
        return redriveDeadLetters(
          pool,
          schema,
          flags.all ? { all: true, ...(flags.queue === undefined ? {} : { queue: flags.queue }) } : { ids },
          { actor: CLI_ACTOR },
        );
      });
      if (flags.json) printJson(result);
      else {
        process.stdout.write(`redriven: ${result.redriven}\n`);
        for (const s of result.skipped) process.stdout.write(`skipped ${s.id}: ${s.reason}\n`);
      }
      // With --json too: it exited 0 with ids skipped (outside review 252).
      if (result.skipped.length > 0) throw new ExitStatus(1);
    });
}
