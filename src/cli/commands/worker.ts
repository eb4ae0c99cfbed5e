import { Option, type Command } from 'commander';
import { Worker } from '../../worker/worker.js';
import type { WorkerOptions } from '../../worker/options.js';
import { loggedWaitNotice, withDatabaseUntilStopped } from '../database.js';
import { loadTasks } from '../task-module.js';
import { WorkerLog } from '../worker-log.js';
import { addMetricsOptions, type MetricsFlags } from '../metrics-options.js';
import { collect, durationOption, durationWithin, integer } from '../parse.js';
import { addPoolerOptions, type PoolerFlags } from '../pooler-options.js';
import { ExitStatus, firstLine } from '../output.js';
import { onOutputClosed } from '../output-closed.js';
import { StopSignals } from '../repeated-signal.js';
import { describeError } from '../../worker/run.js';
import { WorkerStoppingError } from '../../errors.js';

interface WorkerFlags extends MetricsFlags, PoolerFlags {
  listen: boolean;
  tasks: string;
  queue?: string[];
  concurrency: number;
  shutdownTimeout: number;
  visibilityTimeout?: number;
  statementTimeout?: number;
  pollInterval?: number;
  completedJobs: 'keep' | 'delete';
  pruner: boolean;
  json?: boolean;
}

/** The longest timeout the Worker takes (its options' range). */
const DAY_MS = 86_400_000;

/** Exit code when a second signal cuts the drain short (not a clean stop). */
const FORCED_EXIT = 1;
/** Exit code after the drain that followed an error nothing caught, or stdout's reader going away. */
const UNCAUGHT_EXIT = 1;

/** Exit code after a stop that left jobs processing for the rescuer (Postgres unreachable, rows held elsewhere). */
const LEFT_EXIT = 1;

/** Why `sluice worker` stopped: a signal (exit 0), an error nothing caught, or stdout closed (exit 1). */
type StopCause = 'signal' | 'uncaught' | 'output';

/** How the stop went: why it began, and whether it left jobs processing for the rescuer. */
interface Stopped {
  cause: StopCause;
  leftJobs: boolean;
}

export function registerWorker(program: Command): void {
  const command = program
    .command('worker')
    .description('run jobs with the handlers of a task module until SIGINT/SIGTERM')
    .requiredOption('--tasks <module>', 'file exporting `tasks` (or a default export): { taskName: handler }')
    .option('--queue <name>', 'queue to take jobs from (repeatable; default "default")', collect)
    .option('--concurrency <n>', 'jobs run at once', integer(1, 10_000), 10)
    .addOption(
      durationOption(
        '--shutdown-timeout <duration>',
        'on a signal, how long running jobs may finish before they are aborted',
        10_000,
        durationWithin(0, DAY_MS),
      ),
    )
    .option(
      '--visibility-timeout <duration>',
      "how long a job's lock lasts without a heartbeat before it may be rescued (default 30s)",
      durationWithin(1_000, DAY_MS),
    )
    // Outside review 144: the README asks for it below the visibility timeout, and
    // the CLI had no way to set it.
    .option(
      '--statement-timeout <duration>',
      'time limit on each statement of the worker, past which it is cancelled and retried; keep it below ' +
        '--visibility-timeout (default 30s, or the visibility timeout when that is shorter, not under 5s)',
      durationWithin(100, DAY_MS),
    )
    // Outside review 188: the README's advice for poll-only workers behind PgBouncer
    // (pollIntervalMs 500-1000) could not be followed from the CLI.
    .option(
      '--poll-interval <duration>',
      'how often to look for due jobs without a notification (default 2s; the only wake-up with --no-listen)',
      durationWithin(10, 3_600_000),
    )
    .addOption(
      new Option('--completed-jobs <what>', 'keep completed jobs (archived by the pruner) or delete them at completion')
        .choices(['keep', 'delete'])
        .default('keep'),
    )
    // The README tells sluice_worker roles to run without it; the CLI could not (outside review 156).
    .option(
      '--no-pruner',
      'do not move finished jobs to jobs_history, nor take the pruner lease (for a role that may not create ' +
        'its partitions, such as sluice_worker: run one worker as the owner with the pruner on)',
    );
  // As `sluice relay` has them: operators had to write a worker script for metrics (outside
  // review 126), and could not run it behind a transaction-mode PgBouncer (review 129).
  addMetricsOptions(addPoolerOptions(command))
    .addOption(
      new Option('--no-listen', 'no LISTEN: find new jobs by polling only (behind a pooler, without --listen-url)').conflicts(
        'listenUrl',
      ),
    )
    .option('--json', 'log JSON lines instead of text')
    .addHelpText(
      'after',
      `
The first SIGINT/SIGTERM stops claiming and lets running jobs finish (up to
--shutdown-timeout; unfinished ones go back to pending), then exits 0, or 1 if
it could not hand some back (Postgres unreachable, rows locked elsewhere: the
rescuer returns them after the visibility timeout). A second
signal, a second or more after the first, exits at once (code 1); its running
jobs return to pending when their lock expires. An error nothing catches (a handler's stray rejection) is logged,
and the worker stops as on SIGTERM (jobs still running at the deadline fail
this attempt), then exits 1.

Examples:
  sluice worker --tasks ./dist/tasks.js --queue default --queue mail --concurrency 20
  node --import tsx ./node_modules/.bin/sluice worker --tasks ./src/tasks.ts --json`,
    )
    .action(async (flags: WorkerFlags, command: Command) => {
      const log = new WorkerLog(flags.json ?? false);
      // A signal while the database is still being checked, before the worker exists:
      // nothing is claimed yet, so exit at once, and cleanly (review 66: killed by
      // SIGTERM, code 143, while the check waited on a table lock).
      const beforeWorker = (signal: NodeJS.Signals) => {
        log.line('stopped', { signal, before: 'start' });
        process.exit(0);
      };
      process.once('SIGINT', beforeWorker);
      process.once('SIGTERM', beforeWorker);
      // An error nothing catches while the task module loads (a rejection at its top
      // level) or before the worker exists: nothing is claimed, so it exits 1 at once,
      // with the same line as later (before: Node's own crash report).
      const uncaughtBeforeWorker = (err: unknown, origin: string) => {
        log.line('uncaught', { origin, before: 'start', ...uncaughtFields(err) }, process.stderr);
        process.exit(UNCAUGHT_EXIT);
      };
      process.on('uncaughtException', uncaughtBeforeWorker);
      // bin/sluice.js's handler for the signals that come while the CLI loads leaves them to these now.
      (globalThis as Record<symbol, unknown>)[Symbol.for('sluice.cli.signalsTaken')] = true;
      const { tasks, schedules, schemas } = await loadTasks(flags.tasks);
      await withDatabaseUntilStopped(
        command,
        async ({ url, schema, started }) => {
          process.off('SIGINT', beforeWorker);
          process.off('SIGTERM', beforeWorker);
          process.off('uncaughtException', uncaughtBeforeWorker);
          const worker = new Worker({
            connectionString: url,
            schema,
            tasks,
            // The module's `schedules` export: recurring jobs this worker ticks (checked by the Worker).
            ...(schedules === undefined ? {} : { schedules: schedules as WorkerOptions['schedules'] }),
            // Its `schemas` export: payloads checked before each handler runs (checked by the Worker).
            ...(schemas === undefined ? {} : { schemas: schemas as WorkerOptions['schemas'] }),
            queues: flags.queue,
            concurrency: flags.concurrency,
            shutdownTimeoutMs: flags.shutdownTimeout,
            ...(flags.visibilityTimeout === undefined ? {} : { visibilityTimeoutMs: flags.visibilityTimeout }),
            ...(flags.statementTimeout === undefined ? {} : { statementTimeoutMs: flags.statementTimeout }),
            ...(flags.pollInterval === undefined ? {} : { pollIntervalMs: flags.pollInterval }),
            completedJobs: flags.completedJobs,
            ...(flags.pruner ? {} : { maintenance: { pruner: false } }),
            listen: flags.listen,
            preparedStatements: flags.preparedStatements,
            ...(flags.listenUrl === undefined ? {} : { listenConnectionString: flags.listenUrl }),
            ...(flags.metricsPort === undefined ? {} : { metrics: { port: flags.metricsPort, host: flags.metricsHost } }),
            // The maintenance leader's warnings (due jobs no live worker handles) reach the terminal.
            logger: log.logger(),
          });
          log.follow(worker);
          const stopped = untilStopped(worker, log);
          await worker.start();
          started();
          log.line('started', {
            worker: worker.config.workerId,
            queues: log.names(worker.config.queues),
            tasks: log.names([...worker.config.tasks.keys()]),
            concurrency: worker.config.concurrency,
            completed: worker.config.completedJobs,
            ...(flags.pruner ? {} : { pruner: 'off' }),
            ...(flags.pollInterval === undefined ? {} : { pollIntervalMs: worker.config.pollIntervalMs }),
            ...(worker.config.schedules.length > 0 ? { schedules: worker.config.schedules.map((x) => x.name).join(',') } : {}),
            ...(worker.metricsUrl && { metrics: worker.metricsUrl }),
          });
          const { cause, leftJobs } = await stopped;
          // A clean exit code after jobs were left would hide from a supervisor that
          // they run again, counting the attempt (outside review 209: exit 0).
          log.line('stopped', leftJobs ? { left: 'processing' } : {});
          if (cause !== 'signal') throw new ExitStatus(UNCAUGHT_EXIT);
          if (leftJobs) throw new ExitStatus(LEFT_EXIT);
        },
        {
          waitForPostgres: true,
          // Under --json as JSON lines too (outside review 204).
          ...(flags.json && { notice: loggedWaitNotice((event, fields, to) => log.line(event, fields, to)) }),
        },
      );
    });
}

/**
 * Resolves, with why, once the worker has drained after the first SIGINT/SIGTERM,
 * an error nothing caught, or stdout's reader going away. The second signal does
 * not wait for anything: it exits the process.
 */
function untilStopped(worker: Worker, log: WorkerLog): Promise<Stopped> {
  return new Promise((resolve, reject) => {
    let cause: StopCause | undefined;
    let leftJobs = false;
    const signals = new StopSignals();
    // What a stop could not hand back or write, it reports as a WorkerStoppingError naming the jobs.
    worker.on('error', (err) => {
      if (cause && err instanceof WorkerStoppingError) leftJobs = true;
    });
    const stop = (why: StopCause, fields: Record<string, string>, failRunning?: Error) => {
      cause = why;
      log.line('stopping', { ...fields, running: worker.runningJobIds.length });
      // The process exits after the stop: a handler that ignores its abort ends with it.
      worker.stop({ exiting: true, ...(failRunning && { failRunning }) }).then(() => {
        signals.settled();
        resolve({ cause: why, leftJobs });
      }, reject);
    };
    const onSignal = (signal: NodeJS.Signals) => {
      // A first signal during the drain after an uncaught error joins it: systemd,
      // Docker and Kubernetes send one SIGTERM, which forced the exit (outside review 195).
      const kind = signals.next();
      if (kind === 'echo') return;
      if (kind === 'force') {
        log.line('forced', { signal, running: worker.runningJobIds.length }, process.stderr);
        process.exit(FORCED_EXIT);
      }
      if (cause) log.line('stopping', { signal, running: worker.runningJobIds.length });
      else stop('signal', { signal });
    };
    // A handler's promise rejected with no catch, or an error thrown from its timer:
    // Node's default ended the process at once, with every job running in it
    // (outside review 192: results not yet written lost, neighbours failed by the
    // rescuer at max_attempts 1). The process's state is unknown, so it still ends,
    // but as on SIGTERM: running jobs finish within the grace period; those still
    // running then fail this attempt (retried as their task says), as a crash would
    // spend it: handed back unspent, a job that caused it restarted the worker for
    // ever, never counted (outside review 195). Then exit 1.
    const onUncaught = (err: unknown, origin: string) => {
      const fields = uncaughtFields(err);
      log.line('uncaught', { origin, ...fields }, process.stderr);
      if (cause) return;
      stop(
        'uncaught',
        { reason: origin },
        new WorkerStoppingError(`the worker stopped after an ${origin} in its process: ${fields.error}`),
      );
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    process.on('uncaughtException', onUncaught);
    onOutputClosed((err) => {
      log.stdoutClosed = true;
      if (cause) return;
      log.line('output-closed', { error: err.message, running: worker.runningJobIds.length }, process.stderr);
      stop('output', { reason: 'stdout closed' });
    });
  });
}

/** An uncaught error's log fields: its first line, and its stack (or the thrown value as text). */
function uncaughtFields(err: unknown): { error: string; stack: string } {
  const stack = err instanceof Error && err.stack ? err.stack : describeError(err);
  return { error: firstLine(stack, 500), stack };
}
