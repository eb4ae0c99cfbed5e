import { channelFor, quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * Statements that steer running workers through the queues table: pause/resume a
 * queue, set its cluster-wide concurrency limit. Each one sends its NOTIFY in the
 * same statement, so inside a caller's transaction the workers hear of the change
 * exactly when it commits, and never of one that rolled back. (Cancelling a job
 * is the admin API's `cancel`, src/db/statements/admin.ts.)
 *
 * Control messages travel on the schema's channel (the one workers already
 * LISTEN on) with a `c` field, which wake-up hints lack; src/notify/codec.ts
 * writes and reads them.
 */
export interface ControlStatements {
  readonly schema: string;
  readonly channel: string;
  readonly setPaused: string;
  readonly setConcurrencyLimit: string;
  readonly listQueues: string;
  /** $1 the channel, $2 a probe message (see ListenProbe). */
  readonly probeListen: string;
}

/** The control statements for one schema, built once per schema. */
export const controlStatements = perSchema((schema: string): ControlStatements => {
  const s = quoteSchema(schema);
  // $1 queue name, $2 the new value, $3 the channel, $4 who asked (for the
  // audit log of migration 0007, written by the same statement: 'pause',
  // 'resume' or 'concurrency_limit' with the queue and no job), $5 the control
  // message that tells workers to re-read the queues table.
  // `column` is spliced into the text, so its type admits only these constants.
  const upsert = (column: 'paused' | 'concurrency_limit') => `WITH q AS (
        INSERT INTO ${s}.queues AS q (name, ${column}) VALUES ($1, $2)
        ON CONFLICT (name) DO UPDATE SET ${column} = excluded.${column}, updated_at = now()
        RETURNING q.name, q.paused, q.concurrency_limit, q.updated_at
      ), logged AS (
        INSERT INTO ${s}.audit_log (queue, action, actor, detail)
        SELECT q.name, CASE WHEN '${column}' = 'concurrency_limit' THEN 'concurrency_limit'
                            WHEN q.paused THEN 'pause' ELSE 'resume' END, $4::text,
               CASE WHEN '${column}' = 'concurrency_limit' THEN jsonb_build_object('concurrency_limit', q.concurrency_limit) END
        FROM q
      )
      SELECT q.*, pg_notify($3, $5) IS NULL AS notified FROM q`;
  return {
    schema,
    channel: channelFor(schema),

    setPaused: upsert('paused'),
    setConcurrencyLimit: upsert('concurrency_limit'),

    listQueues: `SELECT name, paused, concurrency_limit, updated_at FROM ${s}.queues ORDER BY name`,
    probeListen: `SELECT pg_notify($1, $2)`,
  };
});
