import { inspect } from 'node:util';
import { parseTimestamptz } from './db/drivers/pg-encoding.js';
import { ConfigError, ValidationError } from './errors.js';
import { DEFAULT_QUEUE, type JobKeyMode, type JobSpec } from './job.js';
import { serializePayload } from './payload.js';
import { storableDelay, storableTime, timeOf } from './time-range.js';
import { checks, readOrFail, shown, unstorableText } from './validate.js';

const { checkName, intOption } = checks(ValidationError);

/** The row parameters of one job, validated. */
export interface JobValues {
  queue: string;
  task: string;
  payload: string;
  run_at: string | null;
  delay_ms: number;
  max_attempts: number;
  priority: number;
  group_key: string | null;
  job_key: string | null;
  job_key_mode: JobKeyMode;
  while_processing: boolean;
  /** Inserted with notify_on_finish set (JobOptions.waitable). */
  waitable: boolean;
}

const KEY_MODES: readonly string[] = ['keep', 'replace', 'error'];

/**
 * Runs `read` over a caller's input (payload, options, the batch): whatever
 * reading it throws (a Proxy whose traps throw, a revoked one, a throwing getter)
 * becomes a ValidationError that says so, and nothing is sent.
 */
export function readInput<R>(what: string, read: () => R): R {
  return readOrFail(ValidationError, what, read);
}

/**
 * Checks one job spec and turns it into the row parameters of an INSERT. Throws
 * ValidationError before anything is sent, so a bad job never leaves a
 * half-written batch.
 */
export function toJobValues(spec: JobSpec, maxPayloadBytes: number): JobValues {
  const task = checkName('task', spec.task);
  const queue = checkName('queue', spec.queue ?? DEFAULT_QUEUE);
  if (spec.runAt !== undefined && spec.delayMs !== undefined) {
    throw new ValidationError('give runAt or delayMs, not both');
  }
  let runAt: string | null = null;
  if (spec.runAt !== undefined) {
    const time = timeOf(spec.runAt);
    if (time === undefined) throw new ValidationError(`runAt must be a valid Date, got ${inspect(spec.runAt)}`);
    // Written from the time alone: a Date's own toISOString() may have been replaced.
    const iso = new Date(time).toISOString();
    if (!storableTime(time)) throw new ValidationError(`runAt must be within the years 1 to 9999, got ${iso}`);
    runAt = iso;
  }
  const delayMs = spec.delayMs ?? 0;
  // Left out, it is 0: no clock read for every job of a batch.
  if (spec.delayMs !== undefined && !storableDelay(delayMs)) {
    throw new ValidationError(
      `delayMs must be a finite number >= 0 that stays before the year 10000, got ${shown(spec.delayMs)}`,
    );
  }
  const jobKey = spec.jobKey ?? null;
  if (jobKey === null) {
    if (spec.jobKeyMode !== undefined || spec.jobKeyWhileProcessing !== undefined) {
      throw new ValidationError('jobKeyMode and jobKeyWhileProcessing need a jobKey');
    }
  } else if (
    typeof jobKey !== 'string' ||
    jobKey.length === 0 ||
    // Characters (code points), as Postgres counts them; never more than UTF-16 units.
    (jobKey.length > 512 && [...jobKey].length > 512)
  ) {
    throw new ValidationError(`jobKey must be a string of 1 to 512 characters, got ${shown(jobKey)}`);
  } else {
    // Postgres refuses a NUL, and stores a lone surrogate as U+FFFD: another key.
    const unstorable = unstorableText(jobKey);
    if (unstorable) throw new ValidationError(`jobKey contains ${unstorable}`);
  }
  const mode = spec.jobKeyMode ?? 'keep';
  if (!KEY_MODES.includes(mode)) throw new ValidationError(`jobKeyMode must be keep, replace or error, got ${shown(mode)}`);
  const whileProcessing = spec.jobKeyWhileProcessing ?? false;
  if (typeof whileProcessing !== 'boolean') throw new ValidationError('jobKeyWhileProcessing must be a boolean');
  const waitable = spec.waitable ?? false;
  if (typeof waitable !== 'boolean') throw new ValidationError(`waitable must be a boolean, got ${shown(waitable)}`);
  // A key's holder may be another caller's job, found (not inserted) by enqueue_job().
  if (waitable && jobKey !== null) {
    throw new ValidationError(
      "waitable cannot be combined with jobKey (the key's holder may be another caller's job): to wait for keyed jobs, " +
        "run their workers with completedJobs 'keep' (the default)",
    );
  }
  return {
    queue,
    task,
    payload: serializePayload(spec.payload, maxPayloadBytes),
    run_at: runAt,
    delay_ms: delayMs,
    max_attempts: intOption('maxAttempts', spec.maxAttempts, 5, 1, 1000),
    priority: intOption('priority', spec.priority, 0, -32768, 32767),
    // null, like leaving it out, means no group: a value read from a nullable column passes through.
    group_key: spec.group === undefined || spec.group === null ? null : checkName('group', spec.group),
    job_key: jobKey,
    job_key_mode: mode,
    while_processing: whileProcessing,
    waitable,
  };
}

/**
 * The id an enqueue statement returned. On a connection of the caller's (a `tx`)
 * the row comes through its parsing: a postgres.js transform may rename the
 * column (postgres.pascal: `Id`), which is taken as the row's only value; what
 * is no id at all (a row transform, a text parser) is a ConfigError, thrown into
 * the caller's transaction, rather than an undefined id for a job that commits
 * (outside review 70).
 */
export function jobIdOf(row: { id?: unknown } | undefined): string {
  let id = row?.id;
  // Only where a transform renamed the column: no array of values for every row of a batch.
  if (id === undefined) {
    const values = row && typeof row === 'object' ? Object.values(row) : [];
    id = values.length === 1 ? values[0] : undefined;
  }
  if (typeof id === 'string' && /^\d+$/.test(id)) return id;
  throw new ConfigError(
    `enqueue: the job's id came back as ${inspect(row)}, not as written: does the tx connection transform rows ` +
      '(a postgres.js transform other than column renaming) or parse text columns? Enqueue on a connection without them',
  );
}

/**
 * A batch's ids, one per job in order: fewer or more, and the caller could not tell
 * which job is which (outside review 207: a tx whose query() answered { rows: [] }
 * returned [] for jobs it inserted).
 */
export function jobIdsOf(rows: readonly ({ id?: unknown } | undefined)[], jobs: number): string[] {
  if (rows.length !== jobs) {
    throw new ConfigError(
      `enqueueMany: ${rows.length} id(s) came back for ${jobs} job(s), not one per job: the statement ran ` +
        'in your transaction (the jobs commit with it); does the tx connection transform or drop rows? Enqueue on one that does not',
    );
  }
  return rows.map(jobIdOf);
}

/** A job row's timestamp columns. */
const JOB_TIMES = ['run_at', 'locked_at', 'created_at', 'updated_at', 'finished_at', 'started_at'] as const;

/**
 * A job row read through your `tx`, its times as Dates, as pg and postgres.js give
 * them: Drizzle and MikroORM keep timestamps as Postgres's text, and `getJob` and
 * `cancel` through their adapters answered strings where JobRow says Date (outside
 * review 212).
 */
export function withJobDates<T extends object | undefined>(row: T): T {
  if (!row) return row;
  const r = row as Record<string, unknown>;
  for (const key of JOB_TIMES) {
    const v = r[key];
    if (typeof v === 'string') r[key] = parseTimestamptz(v, (text) => new Date(text));
  }
  return row;
}
