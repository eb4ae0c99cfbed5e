import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * The outbox's dead letters (migration 0015: messages the broker refused
 * maxAttempts times): list, send again, drop. $1 destinations (null: all),
 * $2 ids (null: all of those destinations).
 */
export interface OutboxDeadLetterStatements {
  /** Oldest first; $3 the most rows. */
  readonly list: string;
  /**
   * Moves them back into the outbox as new messages (new ids, published after
   * what was committed before), in their original order, in one statement.
   */
  readonly redrive: string;
  readonly drop: string;
}

const FILTER = `($1::text[] IS NULL OR destination = ANY($1)) AND ($2::bigint[] IS NULL OR id = ANY($2))`;

export const outboxDeadLetterStatements = perSchema((schema: string): OutboxDeadLetterStatements => {
  const letters = `${quoteSchema(schema)}.outbox_dead_letters`;
  return {
    list: `SELECT id::text AS id, destination, key, octet_length(payload) AS bytes, attempts, last_error, created_at, dead_at
      FROM ${letters} WHERE ${FILTER} ORDER BY id LIMIT $3`,
    redrive: `WITH gone AS (
        DELETE FROM ${letters} WHERE ${FILTER} RETURNING id, destination, key, headers, payload
      ), made AS (
        INSERT INTO ${quoteSchema(schema)}.outbox (destination, key, headers, payload)
        SELECT destination, key, headers, payload FROM gone ORDER BY id
        RETURNING 1
      )
      SELECT count(*)::int AS n FROM made`,
    drop: `WITH gone AS (DELETE FROM ${letters} WHERE ${FILTER} RETURNING 1) SELECT count(*)::int AS n FROM gone`,
  };
});
