import { rows, type Queryable } from '../db/executor.js';
import { ValidationError, wrapDatabaseError } from '../errors.js';
import { JOB_STATUSES, type JobRow, type JobStatus } from '../job.js';
import { checks, readOrFail, shown, snapshotOptions } from '../validate.js';

// What the admin API checks of its callers' input, and how it runs a statement.

/** Runs `text`; a database error is wrapped with what was being done. */
export async function query<T>(db: Queryable, text: string, values: unknown[], context: string): Promise<T[]> {
  try {
    return await rows<T>(db, text, values);
  } catch (err) {
    throw wrapDatabaseError(err, `${context} failed`);
  }
}

const { rejectUnknownKeys, intOption } = checks(ValidationError);

/**
 * Refuses `key` given as undefined where leaving it out widens a bulk action to
 * every queue: `{ queue: req.query.queue }` with the parameter missing retried the
 * failed jobs of all of them (outside review 169).
 */
export function refuseUndefinedFilter(options: object, key: string, what: string): void {
  if (key in options && (options as Record<string, unknown>)[key] === undefined) {
    throw new ValidationError(`${what}: ${key} is undefined; leave it out to act on every ${key}`);
  }
}

/**
 * The options of `what`, read once (a throwing getter or Proxy is a
 * ValidationError), with names it does not know refused: a typo in a filter would
 * otherwise widen it, and list, retry or delete every job (outside review 43:
 * listJobs({ staus: 'failed' }) listed them all). Undefined options pass.
 */
export function knownOptions<O>(options: O, keys: ReadonlySet<string>, what: string): O {
  if (options === undefined) return options;
  return readOrFail(ValidationError, what, () => {
    const copy = snapshotOptions(options, ValidationError, what);
    rejectUnknownKeys(copy as object, keys, what);
    // A Proxy may hide a key from its list and still give its value: the filter was
    // dropped, and a bulk action widened to every queue (outside review 172).
    if (typeof copy === 'object' && copy !== null && !Array.isArray(copy)) {
      for (const key of keys) {
        if (Object.hasOwn(copy, key)) continue;
        const value: unknown = (options as Record<string, unknown>)[key];
        if (value !== undefined) (copy as Record<string, unknown>)[key] = value;
      }
    }
    return copy;
  });
}

const MAX_BIGINT = 2n ** 63n - 1n;

/** A job id as the text Postgres gets: a positive bigint, or a ValidationError. */
export function jobId(value: string | number): string {
  // Text, a number or a bigint only: String(['1']) is '1', and a nested array among
  // redriveDeadLetters' ids passed as job 1 (outside review 167).
  const text =
    typeof value === 'number'
      ? Number.isSafeInteger(value)
        ? String(value)
        : ''
      : typeof value === 'string' || typeof value === 'bigint'
        ? String(value).trim()
        : '';
  if (!/^\d{1,19}$/.test(text) || BigInt(text) < 1n || BigInt(text) > MAX_BIGINT) {
    throw new ValidationError(`not a job id: ${shown(value)}`);
  }
  return BigInt(text).toString();
}

/** Checks a status name. */
export function checkStatus(value: unknown): JobStatus {
  if (!JOB_STATUSES.includes(value as JobStatus)) {
    throw new ValidationError(`unknown status ${JSON.stringify(value)} (one of ${JOB_STATUSES.join(', ')})`);
  }
  return value as JobStatus;
}

/**
 * A job as a page of listJobs or searchJobs gives it: with `maxPayloadChars`, a
 * larger payload is left out and its length (characters of Postgres's JSON text)
 * given in `omitted`.
 */
export type ListedJobRow = Omit<JobRow, 'payload'> & { payload?: unknown; omitted?: { payload: number } };

/** `maxPayloadChars` as the page statements' $8: an integer from 0, or null for whole payloads. */
export function payloadCharsLimit(value: unknown): number | null {
  return value === undefined ? null : intOption('maxPayloadChars', value, 0, 0, 2 ** 31 - 1);
}

/** A page statement's rows as listed jobs: payload_chars (set where the payload was left out) becomes `omitted`. */
export function listedRows(found: (JobRow & { payload_chars: number | null })[]): ListedJobRow[] {
  return found.map(({ payload_chars: chars, payload, ...job }) =>
    chars === null ? { ...job, payload } : { ...job, omitted: { payload: chars } },
  );
}

/** A filter of one value or an array (`what`'s option `name`), each checked; null when not given. */
export function listOf<T>(
  what: string,
  name: string,
  value: T | readonly T[] | undefined,
  check: (v: T) => string,
): string[] | null {
  if (value === undefined) return null;
  const list = Array.isArray(value) ? (value as readonly T[]) : [value as T];
  if (list.length === 0) throw new ValidationError(`${what}: ${name} filter is empty`);
  return list.map(check);
}
