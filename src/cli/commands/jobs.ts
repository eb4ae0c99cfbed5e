import { InvalidArgumentError, Option, type Command } from 'commander';
import {
  cancelJob,
  checkStatus,
  deleteJob,
  getJob,
  isArchived,
  listJobs,
  retryJob,
  runJobNow,
  type JobActionResult,
} from '../../admin/jobs.js';
import { cancelJobs, deleteFinished, retryFailed } from '../../admin/bulk.js';
import { jobId } from '../../admin/input.js';
import { CANCELLABLE, DELETABLE, FINISHED, RETRYABLE, type JobRow, type JobStatus, type UnfinishedStatus } from '../../job.js';
import type { PgPool } from '../../db/connection.js';
import { withDatabase } from '../database.js';
import { requireKnownQueue } from '../known-queue.js';
import {
  CommandFailed,
  firstLine,
  formatDuration,
  formatTable,
  formatTime,
  printable,
  printJson,
  terminalText,
  UsageError,
} from '../output.js';
import { collect, duration, integer } from '../parse.js';
import { CLI_ACTOR } from '../actor.js';
import { storableAge } from '../../time-range.js';

/** Who the audit log says took an action (migration 0007). */

interface ListFlags {
  status?: string[];
  queue?: string[];
  task?: string[];
  limit?: number;
  before?: string;
  after?: string;
  json?: boolean;
}

export function registerJobs(program: Command): void {
  const jobs = program.command('jobs').description('list, inspect, retry, cancel, run now and delete jobs');

  jobs
    .command('list')
    .description('list jobs, newest first')
    .option('--status <status>', 'pending, processing, completed, failed or cancelled (repeatable)', collect)
    .option('--queue <name>', 'only this queue (repeatable)', collect)
    .option('--task <name>', 'only this task (repeatable)', collect)
    .option('--limit <n>', 'jobs to show (1-1000)', integer(1, 1000), 50)
    // A usage error naming the flags, not the API's "listJobs: give before or after" (outside review 182).
    .addOption(new Option('--before <id>', 'older than this job id (the next page)').conflicts('after'))
    .option('--after <id>', 'newer than this job id (the previous page)')
    .option('--json', 'print {"jobs": [...], "nextBefore", "nextAfter"} as one line')
    .addHelpText('after', '\nExample:\n  sluice jobs list --status failed --queue mail --limit 20')
    .action(async (flags: ListFlags, command: Command) => {
      const status = flags.status?.map(checkStatus);
      await withDatabase(command, async ({ pool, schema }) => {
        const page = await listJobs(pool, schema, {
          status,
          queue: flags.queue,
          task: flags.task,
          limit: flags.limit,
          before: flags.before,
          after: flags.after,
        });
        if (flags.json) return printJson(page);
        process.stdout.write(
          formatTable(
            ['ID', 'STATUS', 'QUEUE', 'TASK', 'ATTEMPTS', 'CREATED', 'LAST ERROR'],
            page.jobs.map((j) => [
              j.id,
              j.status,
              j.queue,
              j.task,
              `${j.attempts}/${j.max_attempts}`,
              formatTime(j.created_at),
              // A completed job keeps an earlier attempt's error as history (jobs show
              // lists it); on its list line it would read as a failure.
              j.status === 'completed' ? '' : firstLine(j.last_error),
            ]),
          ),
        );
        if (page.nextBefore) process.stderr.write(`more: --before ${page.nextBefore}\n`);
      });
    });

  jobs
    .command('show')
    .description('show one job: payload, attempts, errors, timestamps')
    .argument('<id>', 'job id')
    .option('--json', 'print the job as one line of JSON')
    .action(async (id: string, flags: { json?: boolean }, command: Command) => {
      await withDatabase(command, async ({ pool, schema }) => {
        const job = await getJob(pool, schema, id);
        if (!job) throw new CommandFailed(`job ${jobId(id)} not found`);
        if (flags.json) printJson(job);
        else process.stdout.write(describeJob(job, await isArchived(pool, schema, id)));
      });
    });

  jobs
    .command('retry')
    .description('put a failed or cancelled job back to pending (or every failed job with --failed)')
    .argument('[id]', 'job id')
    .option('--failed', 'retry every failed job')
    .option('--queue <name>', 'with --failed: only this queue')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', '\nExamples:\n  sluice jobs retry 42\n  sluice jobs retry --failed --queue mail')
    .action(async (id: string | undefined, flags: { failed?: boolean; queue?: string; json?: boolean }, command: Command) => {
      if (id === undefined && !flags.failed) throw new UsageError('give a job id or --failed');
      if (id !== undefined && flags.failed) throw new UsageError('give a job id or --failed, not both');
      if (flags.queue !== undefined && !flags.failed) throw new UsageError('--queue goes with --failed');
      await withDatabase(command, async ({ pool, schema }) => {
        if (flags.failed) {
          if (flags.queue !== undefined) await requireKnownQueue(pool, schema, flags.queue);
          const result = await retryFailed(pool, schema, {
            ...(flags.queue === undefined ? {} : { queue: flags.queue }),
            actor: CLI_ACTOR,
          });
          if (flags.json) return printJson(result);
          process.stdout.write(`retried ${result.retried} failed job${result.retried === 1 ? '' : 's'}\n`);
          for (const [queue, n] of Object.entries(result.queues)) process.stdout.write(`  ${printable(queue)}: ${n}\n`);
          return;
        }
        report(await retryJob(pool, schema, id!, { actor: CLI_ACTOR }), id!, 'retried', RETRYABLE, flags.json);
      });
    });

  jobs
    .command('cancel')
    .description('cancel a job, or every unfinished job of a queue or task: a pending one never runs, a running one is aborted')
    .argument('[id]', 'job id')
    .option('--queue <name>', 'every pending and running job of this queue')
    .option('--task <name>', 'every pending and running job of this task (with --queue: of both)')
    .option('--status <status>', 'with --queue/--task: only pending or only processing jobs')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', '\nExamples:\n  sluice jobs cancel 42\n  sluice jobs cancel --queue imports --status pending')
    .action(async (id: string | undefined, flags: CancelFlags, command: Command) => {
      const many = flags.queue !== undefined || flags.task !== undefined;
      if (id === undefined && !many) throw new UsageError('give a job id, or --queue and/or --task');
      if (id !== undefined && many) throw new UsageError('give a job id or --queue/--task, not both');
      if (flags.status !== undefined && !many) throw new UsageError('--status goes with --queue or --task');
      if (flags.status !== undefined && !(CANCELLABLE as readonly string[]).includes(flags.status))
        throw new UsageError(`--status must be ${orList(CANCELLABLE)}`);
      await withDatabase(command, async ({ pool, schema }) => {
        if (!many) {
          const result = await cancelJob(pool, schema, id!, { actor: CLI_ACTOR });
          // Whether a handler was running (its worker told to abort it) or the job had not started (review 109).
          const line = (job: JobRow) =>
            `cancelled job ${job.id} (${printable(job.task)} on queue ${printable(job.queue)}; ` +
            `${result.ok && result.previousStatus === 'processing' ? 'was running: its worker aborts the handler' : 'had not started'})`;
          return report(result, id!, 'cancelled', CANCELLABLE, flags.json, line);
        }
        if (flags.queue !== undefined) await requireKnownQueue(pool, schema, flags.queue);
        const result = await cancelJobs(pool, schema, {
          ...(flags.queue === undefined ? {} : { queue: flags.queue }),
          ...(flags.task === undefined ? {} : { task: flags.task }),
          ...(flags.status === undefined ? {} : { statuses: [flags.status as UnfinishedStatus] }),
          actor: CLI_ACTOR,
        });
        if (flags.json) return printJson(result);
        process.stdout.write(
          `cancelled ${result.cancelled} job${result.cancelled === 1 ? '' : 's'} (${result.pending} pending; ` +
            `${result.processing} running or claimed: their workers abort the handlers)\n`,
        );
      });
    });

  oneJobAction(jobs, 'run-now', 'make a delayed or retrying job due now: it runs at the next claim', (pool, schema, id) =>
    runJobNow(pool, schema, id, { actor: CLI_ACTOR }).then((result) => ({
      result,
      done: 'run now',
      allowed: ['pending'],
      line: (job: JobRow) => `job ${job.id} (${printable(job.task)} on queue ${printable(job.queue)}) is due now`,
    })),
  );

  jobs
    .command('delete')
    .description('delete a job, or finished jobs older than a duration')
    .argument('[id]', 'job id')
    .option('--completed', 'delete completed jobs (with --older-than)')
    .option('--failed', 'delete failed jobs (with --older-than)')
    .option('--cancelled', 'delete cancelled jobs (with --older-than)')
    .option('--older-than <duration>', 'only jobs that finished longer ago than this (7d, 12h)', olderThan)
    .option('--json', 'print the result as JSON')
    .addHelpText('after', '\nExamples:\n  sluice jobs delete 42\n  sluice jobs delete --completed --older-than 7d')
    .action(async (id: string | undefined, flags: DeleteFlags, command: Command) => {
      const statuses = FINISHED.filter((s) => flags[s as keyof DeleteFlags]);
      const bulk = statuses.length > 0 || flags.olderThan !== undefined;
      if ((id !== undefined) === bulk)
        throw new UsageError('give a job id, or --completed/--failed/--cancelled with --older-than');
      if (bulk && (statuses.length === 0 || flags.olderThan === undefined)) {
        throw new UsageError('bulk delete needs --older-than and at least one of --completed, --failed, --cancelled');
      }
      await withDatabase(command, async ({ pool, schema }) => {
        if (!bulk) return report(await deleteJob(pool, schema, id!, { actor: CLI_ACTOR }), id!, 'deleted', DELETABLE, flags.json);
        const result = await deleteFinished(pool, schema, { olderThanMs: flags.olderThan!, statuses });
        if (flags.json) return printJson(result);
        process.stdout.write(
          `deleted ${result.deleted} ${statuses.join('/')} job${result.deleted === 1 ? '' : 's'} ` +
            `finished more than ${formatDuration(flags.olderThan!)} ago` +
            // stats and the dashboard still count archived jobs: say why they are still there.
            `${result.deleted === 0 ? ' (archived jobs, which the pruner moved to the read-only history, are not touched)' : ''}\n`,
        );
      });
    });
}

interface DeleteFlags {
  completed?: boolean;
  failed?: boolean;
  cancelled?: boolean;
  olderThan?: number;
  json?: boolean;
}

/** What a one-job action did, and how report() words it. */
interface Reported {
  result: JobActionResult;
  done: string;
  allowed: readonly JobStatus[];
  line?: (job: JobRow) => string;
}

/** `sluice jobs <name> <id> [--json]`: runs `act` on the job and reports it. */
interface CancelFlags {
  queue?: string;
  task?: string;
  status?: string;
  json?: boolean;
}

function oneJobAction(
  jobs: Command,
  name: string,
  description: string,
  act: (pool: PgPool, schema: string, id: string) => Promise<Reported>,
): void {
  jobs
    .command(name)
    .description(description)
    .argument('<id>', 'job id')
    .option('--json', 'print the job as JSON')
    .action(async (id: string, flags: { json?: boolean }, command: Command) => {
      await withDatabase(command, async ({ pool, schema }) => {
        const { result, done, allowed, line } = await act(pool, schema, id);
        report(result, id, done, allowed, flags.json, line);
      });
    });
}

/** Prints what a single-job action did (`done job 42 (…)`, or `line`), or fails with why it did nothing. */
function report(
  result: JobActionResult,
  id: string,
  done: string,
  allowed: readonly JobStatus[],
  json?: boolean,
  line = (job: JobRow) => `${done} job ${job.id} (${printable(job.task)} on queue ${printable(job.queue)})`,
): void {
  if (!result.ok) {
    // The id as it was read (" 012" is job 12), as the action itself has checked it.
    id = jobId(id);
    if (result.reason === 'not_found') throw new CommandFailed(`job ${id} not found`);
    if (result.archived) {
      throw new CommandFailed(
        `job ${id} is archived (${result.status}, moved to the history by the pruner) and read-only: it cannot be ${done}`,
      );
    }
    throw new CommandFailed(`job ${id} is ${result.status}; only ${orList(allowed)} jobs can be ${done}`);
  }
  if (json) printJson(result.job);
  else process.stdout.write(`${line(result.job)}\n`);
}

/** The worker named by the job's latest failed or rescued attempt (a rescue clears locked_by; review 88). */
function lastWorker(job: JobRow): string | undefined {
  const errors = job.errors ?? [];
  for (let i = errors.length - 1; i >= 0; i--) if (errors[i]!.worker) return errors[i]!.worker!;
  return undefined;
}

function describeJob(job: JobRow, archived: boolean): string {
  const lines = [
    `id:           ${job.id}`,
    // Names as the list commands show them: a tab, a line break or a bidi override in
    // one broke the field across lines or turned it around (outside review 252).
    `task:         ${printable(job.task)}`,
    `queue:        ${printable(job.queue)}`,
    `status:       ${job.status}${archived ? ' (archived: moved to the history by the pruner, read-only)' : ''}`,
    `priority:     ${job.priority}`,
    `attempts:     ${job.attempts} of ${job.max_attempts}`,
    `run at:       ${formatTime(job.run_at)}`,
    `started at:   ${formatTime(job.started_at)}`,
    `created at:   ${formatTime(job.created_at)}`,
    `updated at:   ${formatTime(job.updated_at)}`,
    `finished at:  ${formatTime(job.finished_at)}`,
    // Held only while processing: a job waiting for its retry keeps the name of the
    // worker that ran it last, which "locked by" misread as a holder (outside review 85).
    job.status === 'processing'
      ? `locked by:    ${job.locked_by === null ? '-' : printable(job.locked_by)}${job.locked_at ? ` (heartbeat ${formatTime(job.locked_at)})` : ''}`
      : `last run by:  ${printable(job.locked_by ?? lastWorker(job) ?? '-')}`,
    `payload:      ${indent(JSON.stringify(job.payload, null, 2))}`,
  ];
  if (job.job_key) lines.push(`key:          ${printable(job.job_key)}`);
  if (job.progress !== undefined && job.progress !== null) lines.push(`progress:     ${JSON.stringify(job.progress)}`);
  if (job.result !== undefined && job.result !== null) lines.push(`result:       ${indent(JSON.stringify(job.result, null, 2))}`);
  for (const e of job.errors ?? []) lines.push(`error #${String(e.attempt).padEnd(6)}${formatTime(e.at)}  ${e.message}`);
  lines.push(`last error:   ${job.last_error ? indent(job.last_error) : '-'}`);
  // Payloads and errors as written by the job: escape codes or a bidi override there
  // printed raw (outside review 265).
  return terminalText(`${lines.join('\n')}\n`);
}

/** Continues a multi-line value under the column where it started. */
function indent(text: string): string {
  return text.replaceAll('\n', '\n              ');
}

/** "a", "a or b", "a, b or c". */
function orList(items: readonly string[]): string {
  return items.length < 2 ? items.join('') : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;
}

/**
 * --older-than as a duration that reaches back no further than the year 1: past it,
 * the refusal was deleteFinished's, naming its olderThanMs (outside review 230).
 */
function olderThan(value: string): number {
  const ms = duration(value);
  if (!storableAge(ms)) throw new InvalidArgumentError('reaches back past the year 1: give a shorter duration');
  return ms;
}
