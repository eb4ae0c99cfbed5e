import type { Command } from 'commander';
import { setTimeout as sleep } from 'node:timers/promises';
import { getStats, type Stats } from '../../admin/stats.js';
import { connectionError } from '../../db/connection.js';
import { isConnectionFailure } from '../../errors.js';
import { loggedWaitNotice, withDatabase, withDatabaseUntilStopped, type CommandDatabase } from '../database.js';
import { formatDuration, formatTable, formatTime, printable, printJson, terminalText, UsageError } from '../output.js';
import { durationOption } from '../parse.js';

/** Below this, --watch would run the stats query back to back. */
const MIN_INTERVAL_MS = 100;
/** Above this, as other duration flags; past 2^31 ms Node's timer fired at once, in a tight loop (outside review 182). */
const MAX_INTERVAL_MS = 86_400_000;

interface StatsFlags {
  watch?: boolean;
  interval: number;
  json?: boolean;
}

export function registerStats(program: Command): void {
  program
    .command('stats')
    .description('per queue: jobs by status, oldest pending age, jobs/s over the last minute, failures; groups of grouped queues')
    .option('--watch', 'refresh until interrupted (Ctrl-C)')
    .addOption(durationOption('--interval <duration>', 'with --watch: time between refreshes', 2000))
    .option('--json', 'print the numbers as one JSON line (one per refresh with --watch)')
    .addHelpText('after', '\nExamples:\n  sluice stats\n  sluice stats --watch --interval 1s')
    .action(async (flags: StatsFlags, command: Command) => {
      // Taken and ignored (outside review 174).
      if (!flags.watch && command.getOptionValueSource('interval') === 'cli')
        throw new UsageError('--interval goes with --watch');
      if (flags.interval > MAX_INTERVAL_MS) {
        throw new UsageError(
          `--interval must be at most ${formatDuration(MAX_INTERVAL_MS)} (got ${formatDuration(flags.interval)})`,
        );
      }
      if (flags.interval < MIN_INTERVAL_MS) {
        throw new UsageError(
          `--interval must be at least ${MIN_INTERVAL_MS}ms (got ${formatDuration(flags.interval)}): each refresh runs the stats query`,
        );
      }
      // --watch serves until a signal: its run is no lock wait, whose notice it printed
      // after 5 s while it refreshed (outside review 183).
      // It waits for a Postgres it cannot reach yet as it does for one lost later
      // (outside review 209: it exited 1 when started during a restart).
      const run = async ({ pool, schema, url, started }: CommandDatabase) => {
        const read = () => getStats(pool, schema, { groups: true });
        if (!flags.watch) return print(await read(), flags.json);
        started();
        await watch(flags, url, read);
      };
      if (!flags.watch) await withDatabase(command, run);
      else {
        await withDatabaseUntilStopped(command, run, {
          waitForPostgres: true,
          ...(flags.json && {
            notice: loggedWaitNotice((event, fields, to) => printJson({ time: new Date(), event, ...fields }, to)),
          }),
        });
      }
    });
}

/**
 * Prints a fresh snapshot every interval until SIGINT/SIGTERM. On a terminal the
 * previous table is overwritten in place; into a pipe each snapshot is appended.
 */
async function watch(flags: StatsFlags, url: string, read: () => Promise<Stats>): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // bin/sluice.js's handler (exit 0 while it waited for Postgres) leaves them to these now.
  (globalThis as Record<symbol, unknown>)[Symbol.for('sluice.cli.signalsTaken')] = true;
  const inPlace = process.stdout.isTTY && !flags.json;
  let previousLines = 0;
  let failing = false;
  // On stderr; JSON lines with --json, as sluice worker's (outside review 206).
  const say = (event: string, text: string) =>
    flags.json
      ? printJson({ time: new Date(), event, ...(event === 'waiting-for-postgres' && { error: text }) }, process.stderr)
      : process.stderr.write(`${terminalText(`sluice: stats: ${text}`)}\n`);
  try {
    while (!stop.signal.aborted) {
      let stats: Stats;
      try {
        stats = await read();
      } catch (err) {
        // A screen left open rides out a restart or failover, as the worker and the
        // dashboard do (outside review 201: it exited 1 at the first refused connection).
        if (!isConnectionFailure(err)) throw err;
        if (!failing) say('waiting-for-postgres', `${connectionError(err, url).message}; trying again every refresh`);
        failing = true;
        await sleep(flags.interval, undefined, { signal: stop.signal }).catch(() => {});
        continue;
      }
      if (failing) say('reached-postgres', 'reached Postgres again');
      failing = false;
      if (stop.signal.aborted) break;
      if (inPlace) {
        // Cursor up over the last table, clear to the end of the screen, redraw.
        if (previousLines > 0) process.stdout.write(`\x1b[${previousLines}A\x1b[J`);
        const text = `${render(stats)}${formatTime(new Date())}  (refreshing every ${formatDuration(flags.interval)}; Ctrl-C to stop)\n`;
        process.stdout.write(text);
        previousLines = text.split('\n').length - 1;
      } else {
        print(stats, flags.json);
      }
      await sleep(flags.interval, undefined, { signal: stop.signal }).catch(() => {});
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

function print(stats: Stats, json?: boolean): void {
  if (json) printJson({ at: formatTime(new Date()), ...stats });
  else process.stdout.write(render(stats));
}

function render(stats: Stats): string {
  if (stats.queues.length === 0) return 'no jobs\n';
  return renderQueues(stats) + renderGroups(stats);
}

/** Grouped queues only, below the queues: how many groups are due, running, held back by their limits. */
function renderGroups(stats: Stats): string {
  const rows = stats.queues.flatMap(({ queue, groups: g }) =>
    g ? [[queue, String(g.total), String(g.withDue), String(g.withRunning), String(g.throttled)]] : [],
  );
  if (rows.length === 0) return '';
  return `\n${formatTable(['GROUPED QUEUE', 'GROUPS', 'WITH DUE JOBS', 'WITH RUNNING JOBS', 'THROTTLED'], rows)}`;
}

function renderQueues(stats: Stats): string {
  const window = formatDuration(stats.windowMs);
  return formatTable(
    [
      'QUEUE',
      'PENDING',
      'SCHEDULED',
      'RUNNING',
      'COMPLETED',
      'FAILED',
      'CANCELLED',
      'OLDEST PENDING',
      `JOBS/S (${window})`,
      `FAILED (${window})`,
    ],
    stats.queues.map((q) => [
      q.paused ? `${printable(q.queue)} (paused)` : q.queue,
      String(q.pending),
      String(q.scheduled),
      String(q.processing),
      String(q.completed),
      String(q.failed),
      String(q.cancelled),
      q.oldestPendingMs === null ? '-' : formatDuration(q.oldestPendingMs),
      q.jobsPerSecond.toFixed(q.jobsPerSecond < 10 ? 2 : 0),
      String(q.failedInWindow),
    ]),
  );
}
