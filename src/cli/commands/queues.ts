import type { Command } from 'commander';
import { getGroupStats } from '../../admin/groups.js';
import { setQueueConcurrencyLimit, setQueuePaused } from '../../control.js';
import type { Queryable } from '../../db/executor.js';
import { controlStatements } from '../../db/statements/control.js';
import {
  listQueueLimits,
  queueLimitsOf,
  setGroupSettings,
  setQueueGroups,
  setQueueRateLimit,
  type GroupSettings,
  type QueueLimits,
  type RateLimit,
} from '../../groups/settings.js';
import { withDatabase } from '../database.js';
import { requireKnownQueue } from '../known-queue.js';
import { durationWithin, integer } from '../parse.js';
import { CommandFailed, printable, printJson, printTable, UsageError } from '../output.js';
import { checks } from '../../validate.js';
import { CLI_ACTOR } from '../actor.js';

// A queue name typed on the command line: invalid ('' or too long) is a usage error, as for enqueue --queue.
const { checkName } = checks(UsageError);

function rateText(rate: Required<RateLimit> | null): string {
  return rate === null ? '-' : `${rate.limit}/${exactDuration(rate.intervalMs)} burst ${rate.burst}`;
}

/** The largest whole unit, as --per takes it (10/1d, not 10/86400000ms; outside review 211), never rounded. */
function exactDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/**
 * Every setting of the queue, whichever one was changed: after `rate` the operator
 * is still told that the queue is paused (outside review 246: each command printed
 * only its own half).
 */
function printLimits(limits: QueueLimits, json: boolean | undefined): void {
  if (json) return printJson(limits);
  const limit = limits.concurrencyLimit === null ? 'no limit' : `limit ${limits.concurrencyLimit}`;
  const groups = limits.groupConcurrency === null ? 'no group limit' : `group limit ${limits.groupConcurrency}`;
  process.stdout.write(
    `${printable(limits.name)}: ${limits.paused ? 'paused' : 'running'}, ${limit}, ${limits.grouped ? 'grouped' : 'not grouped'}, ` +
      `${groups}, rate ${rateText(limits.rateLimit)}, group rate ${rateText(limits.groupRateLimit)}\n`,
  );
}

/** The settings of one queue, after a change that returned only its own (pause, limit). */
async function limitsOf(db: Queryable, schema: string, name: string): Promise<QueueLimits> {
  const limits = await queueLimitsOf(db, schema, name);
  // The change just wrote the queue's row; only a concurrent delete of it could get here.
  if (!limits) throw new CommandFailed(`queue ${printable(name)} has no settings any more`);
  return limits;
}

function printGroup(group: GroupSettings, json: boolean | undefined): void {
  if (json) return printJson(group);
  // A group's own setting, or the queue's default for its groups (outside review 86:
  // "rate -" read as no limit while the queue's group rate still held it).
  const limit = group.concurrencyLimit === null ? 'queue default' : String(group.concurrencyLimit);
  const rate = group.rateLimit === null ? 'queue default' : rateText(group.rateLimit);
  process.stdout.write(
    `${printable(group.queue)} / ${group.group === null ? '(no group)' : printable(group.group)}: weight ${group.weight}, ` +
      `limit ${limit}, rate ${rate}\n`,
  );
}

/** Most running jobs: a queue's limit and a group's (as the API takes them). */
const MAX_CONCURRENCY = 10_000;
/** Most jobs of one group per turn of the round robin. */
const MAX_WEIGHT = 1000;
/** Most starts per interval. */
const MAX_RATE = 1_000_000;

/**
 * `<n>` or "none", for options that set or remove a limit. Checked here against
 * the API's range, so the message names what was typed (outside review 86: "--limit
 * 0" was answered with the API's "groupConcurrency must be ...").
 */
function limitOrNone(what: string, value: string, max: number): number | null {
  if (value === 'none') return null;
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > max) throw new UsageError(`${what} must be an integer from 1 to ${max}, or "none"`);
  return n;
}

/** --per: a whole number of milliseconds from 1 ms to a day, as a rate's interval is. */
const interval = durationWithin(1, 86_400_000);

interface RateFlags {
  per?: number;
  burst?: number;
}

/** A rate from `<n>|none` and --per/--burst. */
function rateOf(what: string, value: string, flags: RateFlags): RateLimit | null {
  const limit = limitOrNone(what, value, MAX_RATE);
  if (limit === null) {
    if (flags.per !== undefined || flags.burst !== undefined)
      throw new UsageError(`--per and --burst go with a rate, not with ${what} none`);
    return null;
  }
  return {
    limit,
    ...(flags.per === undefined ? {} : { intervalMs: flags.per }),
    ...(flags.burst === undefined ? {} : { burst: flags.burst }),
  };
}

/** --per and --burst only qualify --rate: alone they would be ignored. */
function requireRate(flags: RateFlags & { rate?: string }): void {
  if (flags.rate === undefined && (flags.per !== undefined || flags.burst !== undefined)) {
    throw new UsageError('--per and --burst qualify --rate: give --rate <n> with them');
  }
}

/**
 * A typo in a queue name must not silently create a setting for a queue nobody
 * uses: a queue is known when it has jobs or settings, or the caller says --create.
 */
async function checkKnownQueue(db: Queryable, schema: string, name: string, create: boolean | undefined): Promise<void> {
  checkName('queue', name);
  if (!create) await requireKnownQueue(db, schema, name, ', or pass --create to set it up before its first job');
}

/** One change to a queue's settings, refused for an unknown queue unless --create (see checkKnownQueue). */
function changeQueue<T>(
  command: Command,
  name: string,
  create: boolean | undefined,
  change: (db: Queryable, schema: string) => Promise<T>,
): Promise<T> {
  return withDatabase(command, async ({ pool, schema }) => {
    await checkKnownQueue(pool, schema, name, create);
    return change(pool, schema);
  });
}

/** `sluice queues list|pause|resume|limit|rate|groups|group|group-stats`: the persisted queue settings every worker follows. */
export function registerQueues(program: Command): void {
  const queues = program.command('queues').description('pause/resume queues; cluster-wide concurrency, group and rate limits');

  queues
    .command('list')
    .description('queues that have settings (others run unlimited)')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(async (flags: { json?: boolean }, command: Command) => {
      const list = await withDatabase(command, ({ pool, schema }) => listQueueLimits(pool, schema));
      if (flags.json) return printJson(list);
      if (list.length === 0) return void process.stdout.write('no queue has settings: all run, unlimited\n');
      printTable(
        ['QUEUE', 'STATE', 'LIMIT', 'GROUPED', 'GROUP LIMIT', 'RATE', 'GROUP RATE', 'UPDATED'],
        list.map((q) => [
          q.name,
          q.paused ? 'paused' : 'running',
          q.concurrencyLimit === null ? '-' : String(q.concurrencyLimit),
          q.grouped ? 'yes' : 'no',
          q.groupConcurrency === null ? '-' : String(q.groupConcurrency),
          rateText(q.rateLimit),
          rateText(q.groupRateLimit),
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
      .option('--create', 'also for a queue that has no jobs or settings yet')
      .option('--json', 'print the settings as JSON')
      .exitOverride()
      .action(async (name: string, flags: { json?: boolean; create?: boolean }, command: Command) => {
        printLimits(
          await changeQueue(command, name, flags.create, async (pool, schema) => {
            await setQueuePaused(pool, controlStatements(schema), name, paused, { actor: CLI_ACTOR });
            return limitsOf(pool, schema, name);
          }),
          flags.json,
        );
      });
  }

  queues
    .command('limit <queue> <n>')
    .description('most jobs of a queue running at once across all workers ("none" removes it; 1 = serial)')
    .option('--create', 'also for a queue that has no jobs or settings yet')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(async (name: string, n: string, flags: { json?: boolean; create?: boolean }, command: Command) => {
      const limit = limitOrNone('the limit', n, MAX_CONCURRENCY);
      printLimits(
        await changeQueue(command, name, flags.create, async (pool, schema) => {
          await setQueueConcurrencyLimit(pool, controlStatements(schema), name, limit, { actor: CLI_ACTOR });
          return limitsOf(pool, schema, name);
        }),
        flags.json,
      );
    });

  queues
    .command('rate <queue> <n>')
    .description('most job starts of a queue per interval across all workers ("none" removes it)')
    .option('--per <duration>', 'the interval (default 1s)', interval)
    .option('--burst <n>', 'most starts at once after a quiet spell (default a tenth of n)', integer(1, 1_000_000))
    .option('--create', 'also for a queue that has no jobs or settings yet')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(async (name: string, n: string, flags: RateFlags & { json?: boolean; create?: boolean }, command: Command) => {
      const rate = rateOf('the rate', n, flags);
      printLimits(
        await changeQueue(command, name, flags.create, (pool, schema) =>
          setQueueRateLimit(pool, schema, name, rate, { actor: CLI_ACTOR }),
        ),
        flags.json,
      );
    });

  queues
    .command('groups <queue>')
    .description("a queue's group defaults: most running jobs and starts per group")
    .option('--limit <n>', 'most jobs of one group running at once ("none" removes it)')
    .option('--rate <n>', 'most starts of one group per interval ("none" removes it)')
    .option('--per <duration>', 'the interval of --rate (default 1s)', interval)
    .option('--burst <n>', 'most starts of one group at once (default a tenth of --rate)', integer(1, 1_000_000))
    .option('--create', 'also for a queue that has no jobs or settings yet')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(
      async (
        name: string,
        flags: RateFlags & { limit?: string; rate?: string; json?: boolean; create?: boolean },
        command: Command,
      ) => {
        requireRate(flags);
        if (flags.limit === undefined && flags.rate === undefined) {
          throw new UsageError('give --limit and/or --rate ("none" removes one); sluice queues list shows the settings');
        }
        const settings = {
          ...(flags.limit === undefined ? {} : { groupConcurrency: limitOrNone('--limit', flags.limit, MAX_CONCURRENCY) }),
          ...(flags.rate === undefined ? {} : { groupRateLimit: rateOf('--rate', flags.rate, flags) }),
        };
        printLimits(
          await changeQueue(command, name, flags.create, (pool, schema) =>
            setQueueGroups(pool, schema, name, settings, { actor: CLI_ACTOR }),
          ),
          flags.json,
        );
      },
    );

  queues
    .command('group <queue> <group>')
    .description('one group\'s own settings, over the queue\'s defaults ("-" for the jobs without a group)')
    .option('--weight <n>', 'jobs taken from the group per turn of the round robin ("none": back to 1)')
    .option('--limit <n>', 'most of its jobs running at once ("none": the queue default)')
    .option('--rate <n>', 'most of its starts per interval ("none": the queue default)')
    .option('--per <duration>', 'the interval of --rate (default 1s)', interval)
    .option('--burst <n>', 'most of its starts at once (default a tenth of --rate)', integer(1, 1_000_000))
    .option('--create', 'also for a queue that has no jobs or settings yet')
    .option('--literal', 'take <group> as written: "-" names a group called "-"')
    .option('--json', 'print the settings as JSON')
    .exitOverride()
    .action(
      async (
        name: string,
        group: string,
        flags: RateFlags & {
          weight?: string;
          limit?: string;
          rate?: string;
          json?: boolean;
          create?: boolean;
          literal?: boolean;
        },
        command: Command,
      ) => {
        requireRate(flags);
        if (flags.weight === undefined && flags.limit === undefined && flags.rate === undefined) {
          throw new UsageError('give --weight, --limit and/or --rate; sluice queues group-stats shows the settings');
        }
        const settings = {
          ...(flags.weight === undefined ? {} : { weight: limitOrNone('--weight', flags.weight, MAX_WEIGHT) }),
          ...(flags.limit === undefined ? {} : { concurrencyLimit: limitOrNone('--limit', flags.limit, MAX_CONCURRENCY) }),
          ...(flags.rate === undefined ? {} : { rateLimit: rateOf('--rate', flags.rate, flags) }),
        };
        printGroup(
          await changeQueue(command, name, flags.create, (pool, schema) =>
            setGroupSettings(pool, schema, name, group === '-' && !flags.literal ? null : group, settings, { actor: CLI_ACTOR }),
          ),
          flags.json,
        );
      },
    );

  queues
    .command('group-stats <queue>')
    .description('per-group backlog, running jobs and throttling of a queue, busiest first')
    .option('--top <n>', 'how many groups to show', integer(1, 10_000), 20)
    .option('--json', 'print the numbers as JSON')
    .exitOverride()
    .action(async (name: string, flags: { top: number; json?: boolean }, command: Command) => {
      // A typo in the name would print zeros, as for a quiet queue: refuse it as the setters do.
      const stats = await withDatabase(command, async ({ pool, schema }) => {
        checkName('queue', name);
        await requireKnownQueue(pool, schema, name);
        return getGroupStats(pool, schema, name, { limit: flags.top });
      });
      if (flags.json) return printJson(stats);
      process.stdout.write(
        `${printable(stats.queue)}: ${stats.groups} groups, ${stats.due} due, ${stats.running} running, ${stats.throttled} throttled` +
          `${stats.queueThrottled ? "; the queue's own limit holds every due job now" : ''}\n`,
      );
      if (stats.top.length === 0) return;
      printTable(
        ['GROUP', 'DUE', 'SCHEDULED', 'RUNNING', 'WEIGHT', 'LIMIT', 'THROTTLED'],
        stats.top.map((g) => [
          g.group ?? '(no group)',
          String(g.due),
          String(g.scheduled),
          String(g.running),
          String(g.weight),
          g.concurrencyLimit === null ? '-' : String(g.concurrencyLimit),
          g.throttled ? 'yes' : 'no',
        ]),
      );
    });
}
