import { channelFor, quoteSchema } from './identifiers.js';
import { jobColumns } from './queries.js';

/**
 * Statements that steer running workers: cancel a job, pause/resume a queue, set
 * its cluster-wide concurrency limit. Each one sends its NOTIFY in the same
 * statement, so inside a caller's transaction the workers hear of the change
 * exactly when it commits, and never of one that rolled back.
 *
 * Control messages travel on the schema's channel (the one workers already
 * LISTEN on) with a `c` field, which wake-up hints from the insert trigger lack.
 */
export interface ControlQueries {
  readonly schema: string;
  readonly channel: string;
  readonly cancel: string;
  readonly setPaused: string;
  readonly setConcurrencyLimit: string;
  readonly listQueues: string;
}

/** The payload that tells workers to re-read the queues table. */
export const QUEUES_CHANGED = '{"c":"queues"}';

export function buildControlQueries(schema: string): ControlQueries {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  // $1 queue name, $2 the new value, $3 the channel.
  const upsert = (column: string) => `WITH q AS (
        INSERT INTO ${s}.queues AS q (name, ${column}) VALUES ($1, $2)
        ON CONFLICT (name) DO UPDATE SET ${column} = excluded.${column}, updated_at = now()
        RETURNING q.name, q.paused, q.concurrency_limit, q.updated_at
      )
      SELECT q.*, pg_notify($3, '${QUEUES_CHANGED}') IS NULL AS notified FROM q`;
  return {
    schema,
    channel: channelFor(schema),

    // $1 id, $2 the statuses it may be cancelled from, $3 the channel. FOR UPDATE
    // makes a cancel that races a claim wait for it and then see 'processing', so
    // the worker that just claimed the job is told to stop. The completion a
    // worker writes later is rejected (it requires status 'processing'), which is
    // what keeps a cancelled job cancelled.
    cancel: `WITH target AS (
        SELECT id, status FROM ${jobs} WHERE id = $1::bigint AND status = ANY($2::text[]) FOR UPDATE
      ), cancelled AS (
        UPDATE ${jobs} j
        SET status = 'cancelled', finished_at = now(), locked_at = NULL, updated_at = now()
        FROM target t
        WHERE j.id = t.id
        RETURNING ${jobColumns('j')}, t.status AS previous_status
      )
      SELECT c.*,
             CASE WHEN c.previous_status = 'processing'
                  THEN pg_notify($3, json_build_object('c', 'cancel', 'id', c.id)::text) IS NULL END AS notified
      FROM cancelled c`,

    setPaused: upsert('paused'),
    setConcurrencyLimit: upsert('concurrency_limit'),

    listQueues: `SELECT name, paused, concurrency_limit, updated_at FROM ${s}.queues ORDER BY name`,
  };
}
