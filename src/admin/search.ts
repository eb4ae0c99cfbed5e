import type { Queryable } from '../db/executor.js';
import { searchStatements } from '../db/statements/search.js';
import { ValidationError } from '../errors.js';
import type { JobStatus } from '../job.js';
import { checks, unstorableText } from '../validate.js';
import { checkStatus, jobId, knownOptions, listOf, listedRows, payloadCharsLimit, query } from './input.js';
import { DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, type JobPage } from './jobs.js';

const { checkName, intOption } = checks(ValidationError);

/** Path segments of a payload field, at most this many ('customer.address.city' is 3). */
const MAX_FIELD_DEPTH = 8;
const MAX_SEARCH_VALUE = 1000;

export interface SearchJobsOptions {
  /** A payload field as a dotted path: 'userId', 'customer.email', 'items.0.sku'. */
  field: string;
  /** The field's value as text: 42 and "42" both match '42'. */
  value: string;
  /** Filters, as listJobs takes them: one value or an array. */
  status?: JobStatus | readonly JobStatus[];
  queue?: string | readonly string[];
  task?: string | readonly string[];
  /** Cursor: jobs with a smaller id (older). */
  before?: string | number;
  /** Jobs per page, 1 to 1000. Default 50. */
  limit?: number;
  /** As listJobs: leave out payloads longer than this many characters of JSON text. */
  maxPayloadChars?: number;
}

const SEARCH_KEYS = new Set(['field', 'value', 'status', 'queue', 'task', 'before', 'limit', 'maxPayloadChars']);

/**
 * Jobs whose payload has `field` equal to `value`, newest first, from the jobs
 * table and the history, pages going back with `before` (nextAfter is always
 * null). No index covers arbitrary fields: narrow by queue, task or status on
 * a large table.
 *
 * @example
 *   const page = await searchJobs(pool, 'sluice', { field: 'user.id', value: '42', task: 'send_welcome' });
 */
export async function searchJobs(db: Queryable, schema: string, options: SearchJobsOptions): Promise<JobPage> {
  options = knownOptions(options, SEARCH_KEYS, 'searchJobs');
  const limit = intOption('limit', options.limit, DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT);
  const path = fieldPath(options.field);
  if (typeof options.value !== 'string' || options.value.length > MAX_SEARCH_VALUE) {
    throw new ValidationError(`searchJobs: value must be a string of at most ${MAX_SEARCH_VALUE} characters`);
  }
  // Postgres refused them as a DatabaseError, a 500 on the dashboard (outside review 242).
  for (const [name, text] of [
    ['field', options.field],
    ['value', options.value],
  ] as const) {
    const unstorable = unstorableText(text);
    if (unstorable) throw new ValidationError(`searchJobs: ${name} contains ${unstorable}`);
  }
  const values = [
    listOf('searchJobs', 'status', options.status, checkStatus),
    listOf('searchJobs', 'queue', options.queue, (q) => checkName('queue', q)),
    listOf('searchJobs', 'task', options.task, (t) => checkName('task', t)),
    options.before === undefined ? null : jobId(options.before),
    limit + 1,
    path,
    options.value,
    payloadCharsLimit(options.maxPayloadChars),
  ];
  const found = listedRows(await query(db, searchStatements(schema).byPayloadField, values, 'searchJobs'));
  const jobs = found.slice(0, limit);
  return { jobs, nextBefore: found.length > limit ? jobs.at(-1)!.id : null, nextAfter: null };
}

/** 'a.b.0' → ['a', 'b', '0'], or a ValidationError saying what a field looks like. */
function fieldPath(field: unknown): string[] {
  const parts = typeof field === 'string' ? field.split('.') : [];
  if (parts.length === 0 || parts.length > MAX_FIELD_DEPTH || parts.some((p) => p.length === 0 || p.length > 128)) {
    throw new ValidationError(
      `searchJobs: field must be a dotted path of 1 to ${MAX_FIELD_DEPTH} names, such as "user.id", got ${JSON.stringify(field)}`,
    );
  }
  return parts;
}
