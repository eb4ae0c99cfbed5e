import { Cron } from 'croner';
import { ConfigError, ValidationError } from '../errors.js';
import { DEFAULT_QUEUE } from '../job.js';
import { serializePayload } from '../payload.js';
import { checks, MAX_NAME_LENGTH } from '../validate.js';

const { checkName, intOption, rejectUnknownKeys } = checks(ConfigError);

/** Most missed ticks a schedule may backfill after downtime. */
export const MAX_BACKFILL = 1_000;

/**
 * A recurring job, defined in code and given to `new Worker({ schedules })`.
 *
 * @example
 *   { name: 'nightly-report', cron: '0 3 * * *', timezone: 'Europe/Berlin',
 *     task: 'build_report', payload: { kind: 'daily' }, backfill: 2 }
 */
export interface CronSchedule {
  /** Unique across everything that shares the schema; the schedule's identity. */
  name: string;
  /** Cron syntax: 5 fields (minute precision) or 6 (with seconds first). */
  cron: string;
  /** IANA time zone the cron fields are read in. Default 'UTC'. */
  timezone?: string | undefined;
  task: string;
  payload?: unknown;
  queue?: string | undefined;
  priority?: number | undefined;
  maxAttempts?: number | undefined;
  /**
   * After downtime, besides the newest missed tick (always enqueued once), also
   * enqueue up to this many older missed ticks, oldest first. Default 0, at most 1000.
   */
  backfill?: number | undefined;
  /** The group of its jobs (1 to 128 characters), as enqueue's `group`; default none. */
  group?: string | null | undefined;
}

export interface ResolvedSchedule {
  name: string;
  cron: string;
  timezone: string;
  task: string;
  /** JSON text. */
  payload: string;
  queue: string;
  priority: number;
  maxAttempts: number;
  backfill: number;
  group: string | null;
  pattern: Cron;
}

const KEYS = new Set(['name', 'cron', 'timezone', 'task', 'payload', 'queue', 'priority', 'maxAttempts', 'backfill', 'group']);

/**
 * A valid zone in its own spelling: Intl takes 'europe/berlin' for Europe/Berlin, and a
 * schedule stored so differed from the same schedule spelt right (outside review 248).
 * Only the case changes: an alias (US/Eastern) stays the name it was given.
 */
function zoneSpelling(timezone: string): string {
  const lower = timezone.toLowerCase();
  const resolved = new Intl.DateTimeFormat('en-US', { timeZone: timezone }).resolvedOptions().timeZone;
  if (resolved.toLowerCase() === lower) return resolved;
  return Intl.supportedValuesOf('timeZone').find((zone) => zone.toLowerCase() === lower) ?? timezone;
}

/** Parses a cron expression in a time zone; ConfigError naming the schedule when it is not valid. */
export function parseCron(name: string, cron: unknown, timezone: unknown): Cron {
  if (typeof cron !== 'string' || cron.trim() === '')
    throw new ConfigError(`schedule "${name}": cron must be a non-empty string`);
  if (typeof timezone !== 'string') throw new ConfigError(`schedule "${name}": timezone must be a string`);
  try {
    // Intl rejects unknown zones up front; croner alone would only fail on first use.
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    throw new ConfigError(`schedule "${name}": unknown time zone ${JSON.stringify(timezone)}`);
  }
  // croner also reads a seventh field (the year), which the README does not offer:
  // a past year made a schedule that silently never fired (outside review 75).
  const fields = cron.trim().split(/\s+/).length;
  if (!cron.trim().startsWith('@') && (fields > 6 || fields < 5)) {
    // Before croner, whose message offers seven fields (outside review 192).
    throw new ConfigError(`schedule "${name}": cron ${JSON.stringify(cron)} has ${fields} fields; 5, or 6 with seconds first`);
  }
  // `?` (Quartz's "no specific value") as `*` before croner sees it: croner replaces it
  // itself, but after deciding the day fields are not wildcards, and then fires on
  // any day of the month OR the weekday: '0 3 ? * FRI' ran daily (outside review 264).
  const croned = cron.trim().startsWith('@')
    ? cron
    : cron
        .trim()
        .split(/\s+/)
        .map((f) => f.replaceAll('?', '*'))
        .join(' ');
  let pattern: Cron;
  try {
    pattern = new Cron(croned, { timezone, paused: true });
  } catch (err) {
    throw new ConfigError(`schedule "${name}": invalid cron ${JSON.stringify(cron)}: ${(err as Error).message}`, { cause: err });
  }
  // A date that does not exist ('0 0 30 2 *'): croner parses it, and its search for
  // earlier ticks then threw at every maintenance round (outside review 75). Some such
  // dates ('0 0 31 4,6,9,11 *') overflow croner's stack instead: said the same way, not as
  // "the input cannot be read (Maximum call stack size exceeded)" (outside review 217).
  let next: Date | null;
  try {
    next = pattern.nextRun();
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    next = null;
  }
  if (next === null) throw new ConfigError(`schedule "${name}": cron ${JSON.stringify(cron)} never fires`);
  return pattern;
}

/** Validates the schedules of a worker's options (names must be unique). */
export function resolveSchedules(list: unknown): ResolvedSchedule[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new ConfigError('schedules must be an array');
  const seen = new Set<string>();
  return list.map((entry: CronSchedule) => {
    if (!entry || typeof entry !== 'object') throw new ConfigError('schedules: each schedule must be an object');
    const name = entry.name;
    // No control characters or line separators, no white space at the ends: a tab or a
    // line break broke `sluice cron list`'s table (outside reviews 77, 78).
    if (
      typeof name !== 'string' ||
      name.length === 0 ||
      // Code points, as Postgres and enqueue count them (outside review 244: 65 emoji refused).
      [...name].length > MAX_NAME_LENGTH ||
      /[\p{Cc}\p{Zl}\p{Zp}]/u.test(name) ||
      name.trim() !== name
    ) {
      throw new ConfigError(
        `schedules: name must be a string of 1 to ${MAX_NAME_LENGTH} characters, without control characters or white space at its ends, got ${JSON.stringify(name)}`,
      );
    }
    rejectUnknownKeys(entry, KEYS, `schedule "${name}"`);
    if (seen.has(name)) throw new ConfigError(`schedules: name "${name}" is used twice`);
    seen.add(name);
    const pattern = parseCron(name, entry.cron, entry.timezone ?? 'UTC');
    const timezone = zoneSpelling(entry.timezone ?? 'UTC');
    // Checked as enqueue checks them: a task enqueue takes, a schedule takes (outside
    // review 244: 65 emoji were 130 UTF-16 units here, and refused).
    const task = checkName(`schedule "${name}": task`, entry.task);
    const queue = checkName(`schedule "${name}": queue`, entry.queue ?? DEFAULT_QUEUE);
    let payload: string;
    try {
      payload = serializePayload(entry.payload);
    } catch (err) {
      throw new ConfigError(`schedule "${name}": ${(err as ValidationError).message}`, { cause: err });
    }
    return {
      name,
      // As parsed: white space inside (a tab, a line break) broke `sluice cron list`'s table (outside review 76).
      cron: entry.cron.trim().split(/\s+/).join(' '),
      timezone,
      task,
      payload,
      queue,
      priority: intOption(`schedule "${name}": priority`, entry.priority, 0, -32768, 32767),
      maxAttempts: intOption(`schedule "${name}": maxAttempts`, entry.maxAttempts, 5, 1, 1000),
      backfill: intOption(`schedule "${name}": backfill`, entry.backfill, 0, 0, MAX_BACKFILL),
      // As enqueue checks its `group`: null or left out is none.
      group: entry.group === undefined || entry.group === null ? null : checkName(`schedule "${name}": group`, entry.group),
      pattern,
    };
  });
}

/**
 * The ticks to enqueue now: those after `lastTick` and at or before `now`, newest
 * `1 + backfill` of them, oldest first. Older missed ticks are skipped.
 */
export function dueTicks(pattern: Cron, lastTick: Date, now: Date, backfill: number): Date[] {
  const since = ticksSince(pattern, lastTick, now, backfill + 1);
  if (since) return since;
  let newest: Date[];
  try {
    newest = distinctPrevious(pattern, backfill + 1, now);
  } catch {
    // croner's backward search throws for some patterns that match rarely (29
    // February, the fifth Friday of February), at every maintenance round, for
    // ever (outside review 76): walk forward from the last tick instead.
    newest = forwardTicks(pattern, lastTick, now, backfill + 1);
  }
  return newest.filter((t) => t.getTime() > lastTick.getTime()).reverse();
}

/**
 * The ticks after `after` and at or before `now`, oldest first, found walking
 * forward: one croner call per due tick and one more, so a pass with nothing due
 * costs one. Undefined when there are more than `most` (downtime: the newest are
 * found walking back) or croner answered out of order (a repeated hour, see
 * nextTick). Walking back for 1 + backfill ticks at every pass cost 0.2-0.85 s of
 * blocked event loop with a backfill of 1,000, each pass, tick due or not, and held
 * every schedule and job of the worker back (outside review 244).
 */
function ticksSince(pattern: Cron, after: Date, now: Date, most: number): Date[] | undefined {
  const ticks: Date[] = [];
  let previous = after;
  for (let t = pattern.nextRun(after); t !== null && t.getTime() <= now.getTime(); t = pattern.nextRun(t)) {
    if (t.getTime() <= previous.getTime() || ticks.length === most) return undefined;
    ticks.push(t);
    previous = t;
  }
  return ticks;
}

/**
 * The newest `wanted` ticks at or before `now`, newest first, each instant once. A
 * tick a DST change skips is moved onto the next hour, which croner then lists
 * twice (outside review 75), once per skipped tick: a schedule of every minute
 * has 60 such duplicates (outside review 76), so more are asked for until enough
 * distinct ones come back.
 */
function distinctPrevious(pattern: Cron, wanted: number, now: Date): Date[] {
  // croner works in whole seconds and excludes the reference second itself, so ask
  // from the start of the next second and drop anything past `now` (where a DST
  // change moved skipped ticks, even an hour past it).
  const reference = new Date(Math.floor(now.getTime() / 1000) * 1000 + 1000);
  for (let asked = wanted + 8; ; asked *= 2) {
    const runs = pattern.previousRuns(asked, reference);
    const distinct = [...new Map(runs.map((t) => [t.getTime(), t])).values()]
      .filter((t) => t.getTime() <= now.getTime())
      .sort((a, b) => b.getTime() - a.getTime());
    if (distinct.length >= wanted || runs.length < asked || asked >= MAX_ASKED) return distinct.slice(0, wanted);
  }
}

/** At most this many ticks asked of croner at once: an hour of a schedule of every second, and more. */
const MAX_ASKED = 16_384;

/** The newest `wanted` ticks after `after` and at or before `now`, newest first, found walking forward (bounded). */
function forwardTicks(pattern: Cron, after: Date, now: Date, wanted: number): Date[] {
  const ticks: Date[] = [];
  let t = pattern.nextRun(after);
  for (let i = 0; t && t.getTime() <= now.getTime() && i < MAX_ASKED; i++, t = pattern.nextRun(t)) {
    ticks.push(t);
    if (ticks.length > wanted) ticks.shift();
  }
  return ticks.reverse();
}

/** When croner answers the past: asked again from each minute after, for up to three hours. */
const PAST_ANSWER_STEP_MS = 60_000;
const PAST_ANSWER_STEPS = 180;

/**
 * The first tick strictly after `after`, or null when the pattern has no more.
 * Inside an hour that repeats (clocks going back), croner answers the tick of the
 * hour's first pass, before `after` (06:29Z in New York on 1 November 2026 gave
 * 05:30Z for 30 1 * * *): the worker then looked again every 20 ms for up to an hour
 * (outside review 217). croner is asked again from each minute after, so the first
 * tick once the hour has passed is found, not one an hour's step would jump over;
 * the repeated hour stays silent, as documented. Past the steps, a look a minute on.
 */
export function nextTick(pattern: Cron, after: Date): Date | null {
  let t = pattern.nextRun(after);
  for (let k = 1; t !== null && t.getTime() <= after.getTime() && k <= PAST_ANSWER_STEPS; k++) {
    t = pattern.nextRun(new Date(after.getTime() + k * PAST_ANSWER_STEP_MS));
  }
  return t !== null && t.getTime() <= after.getTime() ? new Date(after.getTime() + PAST_ANSWER_STEP_MS) : t;
}
