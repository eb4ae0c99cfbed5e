import { ValidationError } from './errors.js';
import type { JobValues } from './job-values.js';

/** Which statement of EnqueueStatements a batch goes through, with its parameters. */
export interface EnqueueBatch {
  readonly statement: 'enqueueMany' | 'enqueueManyUniform' | 'enqueueManyKeyed';
  /** `traceContext`: the enqueuing span's, as JSON text, or null. */
  params(traceContext: string | null): unknown[];
}

/**
 * Chooses how a validated batch is sent: keyed jobs row by row through
 * enqueue_job(), a batch of one queue and one set of options as two arrays
 * (task, payload) where `arrays` allows it, any other as one JSON document.
 * Arrays only on the Queue's own connections: a caller's transaction may be a
 * query builder's, and some of them expand an array parameter into a list of
 * values (Knex, so MikroORM) or leave its type to guess (postgres.js's unsafe);
 * a JSON document is one text parameter everywhere. Throws ValidationError when a
 * key appears twice: one statement cannot insert it twice, nor decide which wins.
 */
export function enqueueBatch(values: readonly JobValues[], arrays: boolean): EnqueueBatch {
  const keys = new Set<string>();
  for (const v of values) {
    if (v.job_key === null) continue;
    if (keys.has(v.job_key)) {
      throw new ValidationError(`enqueueMany: jobKey ${JSON.stringify(v.job_key)} appears twice in the batch`);
    }
    keys.add(v.job_key);
  }
  if (keys.size > 0) return { statement: 'enqueueManyKeyed', params: () => [jsonBody(values)] };
  const first = values[0]!;
  const uniform =
    arrays &&
    values.every(
      (v) =>
        v.queue === first.queue &&
        v.max_attempts === first.max_attempts &&
        v.priority === first.priority &&
        v.group_key === first.group_key &&
        v.run_at === null &&
        v.delay_ms === 0,
    );
  if (uniform) {
    return {
      statement: 'enqueueManyUniform',
      params: (traceContext) => [
        first.queue,
        values.map((v) => v.task),
        values.map((v) => v.payload),
        first.max_attempts,
        first.priority,
        first.group_key,
        traceContext,
      ],
    };
  }
  return { statement: 'enqueueMany', params: (traceContext) => [jsonBody(values), traceContext] };
}

/** The batch as one JSON array; payloads are JSON text already and are spliced in, not parsed again. */
function jsonBody(values: readonly JobValues[]): string {
  const rows = values.map(
    (v) =>
      `{"queue":${JSON.stringify(v.queue)},"task":${JSON.stringify(v.task)},"payload":${v.payload},` +
      `"run_at":${JSON.stringify(v.run_at)},"delay_ms":${v.delay_ms},"max_attempts":${v.max_attempts},"priority":${v.priority}` +
      (v.group_key === null ? '' : `,"group_key":${JSON.stringify(v.group_key)}`) +
      (v.job_key === null
        ? '}'
        : `,"job_key":${JSON.stringify(v.job_key)},"job_key_mode":"${v.job_key_mode}","while_processing":${v.while_processing}}`),
  );
  return `[${rows.join(',')}]`;
}
