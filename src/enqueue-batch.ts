import { ValidationError } from './errors.js';
import type { JobValues } from './job-values.js';

/** Which statement of EnqueueStatements a batch goes through, with its parameters. */
export interface EnqueueBatch {
  readonly statement: 'enqueueMany' | 'enqueueManyUniform' | 'enqueueManyKeyed';
  /** Some job of it is waitable (JobOptions.waitable): sent in the statement's waitable form. */
  readonly waitable: boolean;
  /** `traceContext`: the enqueuing span's, as JSON text, or null. */
  params(traceContext: string | null): unknown[];
}

/**
 * The most payload text (UTF-16 units) sent as one jsonb array. A jsonb value
 * cannot exceed 255 MB, and its binary form can take about six times the text's
 * bytes (an array of one-digit numbers); 32 Mi units stay under that. Larger
 * batches go as the JSON document (json, not jsonb: up to 1 GB of text).
 */
const UNIFORM_MAX_PAYLOAD_UNITS = 32 * 1024 * 1024;

/** Adds a job's key to its batch's; one already there is a ValidationError (`what`: its caller, `twice`: how it says so). */
export function addBatchKey(keys: Set<string>, key: string | null, what: string, twice: string): void {
  if (key === null) return;
  if (keys.has(key)) throw new ValidationError(`${what}: jobKey ${JSON.stringify(key)} ${twice}`);
  keys.add(key);
}

/**
 * Chooses how a validated batch is sent: keyed jobs row by row through
 * enqueue_job(), a batch of one queue and one set of options as two JSON arrays
 * (tasks, payloads), any other as one JSON document. Every form takes text
 * parameters only (and integers): a caller's transaction may be a query
 * builder's, and some of them expand an array parameter into a list of values
 * (Knex, so MikroORM) or leave its type to guess (postgres.js's unsafe). Throws
 * ValidationError when a key appears twice: one statement cannot insert it twice,
 * nor decide which wins.
 */
export function enqueueBatch(values: readonly JobValues[]): EnqueueBatch {
  const keys = new Set<string>();
  for (const v of values) addBatchKey(keys, v.job_key, 'enqueueMany', 'appears twice in the batch');
  const waitable = values.some((v) => v.waitable);
  refuseWaitableBesideKeys(waitable, keys.size > 0, 'enqueueMany');
  const first = values[0]!;
  let units = 0;
  const uniform =
    keys.size === 0 &&
    values.every(
      (v) =>
        v.queue === first.queue &&
        v.max_attempts === first.max_attempts &&
        v.priority === first.priority &&
        v.group_key === first.group_key &&
        v.waitable === first.waitable &&
        v.run_at === null &&
        v.delay_ms === 0 &&
        (units += v.payload.length) <= UNIFORM_MAX_PAYLOAD_UNITS,
    );
  if (uniform) {
    const tasks = JSON.stringify(values.map((v) => v.task));
    // Each payload is JSON text already: spliced in, not parsed again.
    const payloads = sized(() => `[${values.map((v) => v.payload).join(',')}]`, tasks);
    return {
      statement: 'enqueueManyUniform',
      waitable: first.waitable,
      params: (traceContext) => [first.queue, tasks, payloads, first.max_attempts, first.priority, first.group_key, traceContext],
    };
  }
  // Keyed jobs through enqueue_job(), row by row; any other batch as one INSERT. Both read the document.
  const body = sized(() => jsonBody(values));
  return keys.size > 0
    ? { statement: 'enqueueManyKeyed', waitable: false, params: () => [body] }
    : { statement: 'enqueueMany', waitable, params: (traceContext) => [body, traceContext] };
}

/**
 * A batch with keyed jobs goes through enqueue_job(), which inserts no job flagged
 * for waitFor: a waitable job beside a keyed one was inserted unflagged, without a
 * word (outside review 220). Refused before anything is sent.
 */
export function refuseWaitableBesideKeys(waitable: boolean, keyed: boolean, what: string): void {
  if (!waitable || !keyed) return;
  throw new ValidationError(
    `${what}: a waitable job cannot be in one batch with keyed jobs (a keyed batch is inserted by enqueue_job(), ` +
      'which cannot flag it): enqueue the waitable jobs in a batch of their own',
  );
}

/**
 * What a batch's text may take: Postgres refuses a message over 1 GiB, and drops
 * the connection (the caller's transaction with it); the rest of the statement
 * fits in the margin.
 */
const MAX_BATCH_BYTES = 1024 ** 3 - 1024 * 1024;

/**
 * The batch's text from `build`, or a ValidationError before anything is sent
 * when it cannot travel in one statement: longer than a JavaScript string can be
 * (a RangeError, outside review 142 saw it reported as a database error), or more
 * bytes than a Postgres message carries (the server dropped the connection, and
 * the error said the jobs might exist). `beside`: the statement's other text parameter.
 * Exported for its tests (`limit`).
 */
export function sized(build: () => string, beside = '', limit = MAX_BATCH_BYTES): string {
  let text: string;
  try {
    text = build();
  } catch (err) {
    if (err instanceof RangeError) throw tooLarge('more text than a JavaScript string can hold', limit, err);
    throw err;
  }
  // A UTF-16 unit is at most 3 bytes of UTF-8: most batches need no count.
  if ((text.length + beside.length) * 3 > limit) {
    const bytes = Buffer.byteLength(text) + Buffer.byteLength(beside);
    if (bytes > limit) throw tooLarge(`${bytes} bytes of JSON`, limit);
  }
  return text;
}

function tooLarge(what: string, limit: number, cause?: unknown): ValidationError {
  return new ValidationError(
    `enqueueMany: the batch is ${what}, over the ${limit} bytes one statement can carry to Postgres: ` +
      'split it into smaller batches (nothing was sent)',
    { cause },
  );
}

/** The batch as one JSON array; payloads are JSON text already and are spliced in, not parsed again. */
function jsonBody(values: readonly JobValues[]): string {
  const rows = values.map(
    (v) =>
      `{"queue":${JSON.stringify(v.queue)},"task":${JSON.stringify(v.task)},"payload":${v.payload},` +
      `"run_at":${JSON.stringify(v.run_at)},"delay_ms":${v.delay_ms},"max_attempts":${v.max_attempts},"priority":${v.priority}` +
      (v.group_key === null ? '' : `,"group_key":${JSON.stringify(v.group_key)}`) +
      (v.waitable ? ',"waitable":true' : '') +
      (v.job_key === null
        ? '}'
        : `,"job_key":${JSON.stringify(v.job_key)},"job_key_mode":"${v.job_key_mode}","while_processing":${v.while_processing}}`),
  );
  return `[${rows.join(',')}]`;
}
