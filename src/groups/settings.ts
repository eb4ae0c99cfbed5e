import { actorOfOptions, type ActionOptions } from '../admin/jobs.js';
import { rows, type Queryable } from '../db/executor.js';
import { groupStatements } from '../db/statements/groups.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { encodeControl } from '../notify/codec.js';
import { checks, readOrFail } from '../validate.js';

const { checkName, intOption, rejectUnknownKeys } = checks(ValidationError);

/**
 * At most `limit` job starts per `intervalMs`, cluster-wide. `burst` is the size
 * of the token bucket: how many may start at once after a quiet spell; no window
 * of `intervalMs` ever sees more than `limit + burst` starts.
 */
export interface RateLimit {
  limit: number;
  /** Default 1000 (per second). */
  intervalMs?: number;
  /** Default a tenth of `limit`, at least 1: enough that workers waking a little late lose no starts. */
  burst?: number;
}

/** A rate limit as stored, every field resolved. */
export type ResolvedRateLimit = Required<RateLimit>;

/** A queue's settings of migration 0003 and 0016. */
export interface QueueLimits {
  name: string;
  paused: boolean;
  concurrencyLimit: number | null;
  /** Has grouped jobs (or group settings): claimed round-robin across its groups. */
  grouped: boolean;
  /** Most jobs of any one group running at once, unless the group has its own limit. */
  groupConcurrency: number | null;
  rateLimit: ResolvedRateLimit | null;
  /** The rate limit of each group, unless the group has its own. */
  groupRateLimit: ResolvedRateLimit | null;
  updatedAt: Date;
}

/** One group's own settings. `group` null: the queue's jobs without a group. */
export interface GroupSettings {
  queue: string;
  group: string | null;
  /** Jobs taken from this group each time the round robin passes it. */
  weight: number;
  concurrencyLimit: number | null;
  rateLimit: ResolvedRateLimit | null;
  updatedAt: Date;
}

/** Group defaults of a queue; keys left out keep their value, null removes. */
export interface QueueGroupOptions {
  groupConcurrency?: number | null;
  groupRateLimit?: RateLimit | null;
}

/** A group's own settings; keys left out keep their value, null removes (a weight back to 1). */
export interface GroupOptions {
  weight?: number | null;
  concurrencyLimit?: number | null;
  rateLimit?: RateLimit | null;
}

interface QueueRow {
  name: string;
  paused: boolean;
  concurrency_limit: number | null;
  grouped: boolean;
  group_concurrency: number | null;
  rate_limit: number | null;
  rate_interval_ms: number | null;
  rate_burst: number | null;
  group_rate_limit: number | null;
  group_rate_interval_ms: number | null;
  group_rate_burst: number | null;
  updated_at: Date;
}

interface GroupRow {
  queue: string;
  group_key: string;
  weight: number;
  concurrency_limit: number | null;
  rate_limit: number | null;
  rate_interval_ms: number | null;
  rate_burst: number | null;
  updated_at: Date;
}

const RATE_KEYS = new Set(['limit', 'intervalMs', 'burst']);

/** Checks a rate limit option; null (none) stays null. */
export function resolveRateLimit(what: string, rate: RateLimit | null): ResolvedRateLimit | null {
  if (rate === null) return null;
  if (typeof rate !== 'object') throw new ValidationError(`${what}: give { limit, intervalMs?, burst? } or null for none`);
  rejectUnknownKeys(rate, RATE_KEYS, what);
  if (rate.limit === undefined) throw new ValidationError(`${what}: limit is required`);
  const limit = intOption(`${what}: limit`, rate.limit, 0, 1, 1_000_000);
  return {
    limit,
    intervalMs: intOption(`${what}: intervalMs`, rate.intervalMs, 1000, 1, 86_400_000),
    burst: intOption(`${what}: burst`, rate.burst, Math.max(1, Math.ceil(limit / 10)), 1, 1_000_000),
  };
}

function requireSome(settings: unknown, message: string): void {
  if (typeof settings !== 'object' || settings === null || Object.values(settings).every((v) => v === undefined)) {
    throw new ValidationError(message);
  }
}

function limitOption(what: string, value: number | null): number | null {
  return value === null ? null : intOption(what, value, 0, 1, 10_000);
}

/**
 * Sets the group defaults of a queue: at most `groupConcurrency` jobs of any one
 * group running at once, and `groupRateLimit` starts per group. The queue is
 * claimed round-robin across its groups from then on, even before its first
 * grouped job. Recorded in the audit log with `options.actor` (default 'api').
 *
 * @example
 *   await setQueueGroups(pool, 'sluice', 'emails', { groupConcurrency: 2, groupRateLimit: { limit: 10 } });
 */
export async function setQueueGroups(
  db: Queryable,
  schema: string,
  queue: string,
  settings: QueueGroupOptions,
  options: ActionOptions = {},
): Promise<QueueLimits> {
  const { concurrency, rate } = readOrFail(ValidationError, 'group settings', () => {
    // Nothing to set would still turn the queue grouped, for good: surely not what was meant.
    requireSome(settings, 'group settings: give groupConcurrency or groupRateLimit (null removes one)');
    rejectUnknownKeys(settings, new Set(['groupConcurrency', 'groupRateLimit']), 'group settings');
    const { groupConcurrency, groupRateLimit } = settings;
    return {
      concurrency: groupConcurrency === undefined ? undefined : limitOption('groupConcurrency', groupConcurrency),
      rate: groupRateLimit === undefined ? undefined : resolveRateLimit('groupRateLimit', groupRateLimit),
    };
  });
  const q = groupStatements(schema);
  return toLimits(
    await write<QueueRow>(db, q.setQueueGroups, queue, [
      concurrency !== undefined,
      concurrency ?? null,
      rate !== undefined,
      rate?.limit ?? null,
      rate?.intervalMs ?? null,
      rate?.burst ?? null,
      true,
      q.channel,
      actorOfOptions(options, 'setQueueGroups'),
      encodeControl({ c: 'queues' }),
    ]),
  );
}

/**
 * Sets (or with null removes) a queue's rate limit: at most `limit` job starts
 * per `intervalMs` across every worker. Jobs over it wait, pending, and start
 * when the bucket allows; workers set a timer for that instead of polling.
 *
 * @example
 *   await setQueueRateLimit(pool, 'sluice', 'partner-api', { limit: 100, intervalMs: 1000 });
 */
export async function setQueueRateLimit(
  db: Queryable,
  schema: string,
  queue: string,
  rate: RateLimit | null,
  options: ActionOptions = {},
): Promise<QueueLimits> {
  if (rate === undefined) throw new ValidationError('rate limit: give { limit, intervalMs?, burst? } or null for none');
  const r = readOrFail(ValidationError, 'rate limit', () => resolveRateLimit('rate limit', rate));
  const q = groupStatements(schema);
  return toLimits(
    await write<QueueRow>(db, q.setQueueRate, queue, [
      r?.limit ?? null,
      r?.intervalMs ?? null,
      r?.burst ?? null,
      q.channel,
      actorOfOptions(options, 'setQueueRateLimit'),
      encodeControl({ c: 'queues' }),
    ]),
  );
}

/**
 * Gives one group settings of its own: a `weight` (jobs taken per turn of the
 * round robin), a concurrency limit and a rate limit that override the queue's
 * group defaults. `group` null means the queue's jobs without a group.
 *
 * @example
 *   await setGroupSettings(pool, 'sluice', 'emails', 'tenant-42', { weight: 3, concurrencyLimit: 10 });
 */
export async function setGroupSettings(
  db: Queryable,
  schema: string,
  queue: string,
  group: string | null,
  settings: GroupOptions,
  options: ActionOptions = {},
): Promise<GroupSettings> {
  const key = group === null ? '' : checkName('group', group);
  const { weight, concurrency, rate } = readOrFail(ValidationError, 'group settings', () => {
    requireSome(settings, 'group settings: give weight, concurrencyLimit or rateLimit (null: the queue default)');
    rejectUnknownKeys(settings, new Set(['weight', 'concurrencyLimit', 'rateLimit']), 'group settings');
    const { weight, concurrencyLimit, rateLimit } = settings;
    return {
      // null: the default, as for the limits (review 94: null was refused for the weight alone).
      weight: weight === undefined ? undefined : weight === null ? 1 : intOption('weight', weight, 1, 1, 1000),
      concurrency: concurrencyLimit === undefined ? undefined : limitOption('concurrencyLimit', concurrencyLimit),
      rate: rateLimit === undefined ? undefined : resolveRateLimit('rateLimit', rateLimit),
    };
  });
  const q = groupStatements(schema);
  return toGroup(
    await write<GroupRow>(db, q.setGroup, queue, [
      key,
      weight !== undefined,
      weight ?? null,
      concurrency !== undefined,
      concurrency ?? null,
      rate !== undefined,
      rate?.limit ?? null,
      rate?.intervalMs ?? null,
      rate?.burst ?? null,
      q.channel,
      actorOfOptions(options, 'setGroupSettings'),
      encodeControl({ c: 'queues' }),
    ]),
  );
}

/** Every queue that has settings, with its group and rate limits, by name. */
export async function listQueueLimits(db: Queryable, schema: string): Promise<QueueLimits[]> {
  try {
    return (await rows<QueueRow>(db, groupStatements(schema).listQueueLimits)).map(toLimits);
  } catch (err) {
    throw wrapDatabaseError(err, 'listing queue limits failed');
  }
}

/** The groups of a queue that have settings of their own, by key. */
export async function listGroupSettings(db: Queryable, schema: string, queue: string): Promise<GroupSettings[]> {
  const name = checkName('queue', queue);
  try {
    return (await rows<GroupRow>(db, groupStatements(schema).listGroupSettings, [name])).map(toGroup);
  } catch (err) {
    throw wrapDatabaseError(err, `listing the groups of queue ${JSON.stringify(name)} failed`);
  }
}

async function write<R>(db: Queryable, text: string, queue: string, values: unknown[]): Promise<R> {
  const name = checkName('queue', queue);
  try {
    const [row] = await rows<R>(db, text, [name, ...values]);
    return row!;
  } catch (err) {
    throw wrapDatabaseError(err, `updating queue ${JSON.stringify(name)} failed`);
  }
}

function rate(limit: number | null, intervalMs: number | null, burst: number | null): ResolvedRateLimit | null {
  return limit === null ? null : { limit, intervalMs: intervalMs!, burst: burst! };
}

function toLimits(row: QueueRow): QueueLimits {
  return {
    name: row.name,
    paused: row.paused,
    concurrencyLimit: row.concurrency_limit,
    grouped: row.grouped,
    groupConcurrency: row.group_concurrency,
    rateLimit: rate(row.rate_limit, row.rate_interval_ms, row.rate_burst),
    groupRateLimit: rate(row.group_rate_limit, row.group_rate_interval_ms, row.group_rate_burst),
    updatedAt: row.updated_at,
  };
}

function toGroup(row: GroupRow): GroupSettings {
  return {
    queue: row.queue,
    group: row.group_key === '' ? null : row.group_key,
    weight: row.weight,
    concurrencyLimit: row.concurrency_limit,
    rateLimit: rate(row.rate_limit, row.rate_interval_ms, row.rate_burst),
    updatedAt: row.updated_at,
  };
}

/** One queue's settings; undefined when it has none (it runs unlimited). */
export async function queueLimitsOf(db: Queryable, schema: string, name: string): Promise<QueueLimits | undefined> {
  return (await listQueueLimits(db, schema)).find((q) => q.name === name);
}

/**
 * Whether a queue is known: it has settings or jobs. The CLI's queue commands and
 * the dashboard refuse to change an unknown one (unless told to create it), so a
 * typo in a name creates no settings row.
 */
export async function isKnownQueue(db: Queryable, schema: string, name: string): Promise<boolean> {
  if (await queueLimitsOf(db, schema, name)) return true;
  const { rows } = await db.query(groupStatements(schema).queueHasJobs, [name]);
  return (rows[0] as { found: boolean }).found;
}
