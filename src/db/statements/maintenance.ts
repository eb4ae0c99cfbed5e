import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * The statements of the maintenance leader (lease, pruner, grouped queues), for one schema.
 * Values are `$n` parameters; the schema is quoted once.
 */
export interface MaintenanceStatements {
  readonly schema: string;
  readonly acquireLease: string;
  readonly resignLease: string;
  readonly currentLease: string;
  readonly prune: string;
  readonly partitionsNeeded: string;
  readonly createPartition: string;
  readonly createPartitionsAhead: string;
  readonly dropExpired: string;
  readonly pruneGroupBuckets: string;
  readonly flagGroupedQueues: string;
}

/** Where finished rows wait: the jobs_finished_idx expression. */
const FINISHED_AT = 'coalesce(j.finished_at, j.updated_at)';

/**
 * How long a finished row is kept, in ms: the rule of its queue ($3 -> queue ->
 * status), else the default of its status ($4 -> status).
 */
const RETENTION_MS = `coalesce(($3::jsonb -> j.queue ->> j.status)::float8, ($4::jsonb ->> j.status)::float8, 0)`;
const PURGE_AFTER = `(${FINISHED_AT} + ${RETENTION_MS} * interval '1 millisecond')`;

/** The maintenance statements for one schema, built once per schema. */
export const maintenanceStatements = perSchema((schema: string): MaintenanceStatements => {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;

  // Rows due to leave the hot table, oldest first: finished at least $1 ms ago,
  // and (delete mode, $5 false) past their retention too. The walk follows
  // jobs_finished_idx and stops after $2 rows. SKIP LOCKED: a row some other
  // statement holds is left for the next batch instead of waited on.
  //
  // Failed jobs are the dead-letter queue: they stay in the hot table, where
  // listDeadLetters, retry and redrive find them, until their retention ends
  // (then they are deleted). They are few, and outside the partial claim index,
  // so workers never scan them.
  const due = `SELECT j.id FROM ${jobs} j
      WHERE j.status IN ('completed', 'failed', 'cancelled')
        AND ${FINISHED_AT} < now() - $1::float8 * interval '1 millisecond'
        AND ($5::bool OR ${PURGE_AFTER} <= now())
        AND (j.status <> 'failed' OR ${PURGE_AFTER} <= now())
      ORDER BY ${FINISHED_AT}
      LIMIT $2`;

  return {
    schema,

    // Takes the lease when it is free or expired, or renews it when we hold it.
    // Returns a row only if $1 holds the lease afterwards. One statement, so two
    // workers racing for an expired lease cannot both win: the row lock of the
    // upsert orders them and the second one's WHERE sees the first one's renewal.
    acquireLease: `INSERT INTO ${s}.leader AS l (role, holder, elected_at, expires_at)
      VALUES ($2, $1, now(), now() + $3::float8 * interval '1 millisecond')
      ON CONFLICT (role) DO UPDATE
        SET holder = EXCLUDED.holder,
            expires_at = EXCLUDED.expires_at,
            elected_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.elected_at ELSE EXCLUDED.elected_at END
        WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
      RETURNING l.holder, l.elected_at, l.expires_at`,

    // A leader that stops cleanly hands over at once instead of after the lease.
    resignLease: `DELETE FROM ${s}.leader WHERE role = $2 AND holder = $1`,

    currentLease: `SELECT holder, elected_at, expires_at, expires_at > now() AS live
      FROM ${s}.leader WHERE role = $1`,

    // Moves (or deletes) one batch in one statement: the DELETE's RETURNING feeds
    // the INSERT into the history table, so a row is in exactly one of the two
    // tables in every snapshot and a crash between the two cannot happen. Rows
    // already past their retention are not archived, only deleted.
    prune: `WITH due AS (${due} FOR UPDATE SKIP LOCKED
      ), moved AS (
        DELETE FROM ${jobs} j USING due WHERE j.id = due.id
        RETURNING j.id, j.queue, j.task, j.status, ${FINISHED_AT} AS finished_at,
                  ${PURGE_AFTER} AS purge_after, to_jsonb(j) AS job
      ), archived AS (
        INSERT INTO ${s}.jobs_history (id, queue, task, status, finished_at, purge_after, job)
        SELECT id, queue, task, status, finished_at, purge_after, job FROM moved
        WHERE $5::bool AND purge_after > now()
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM moved)::int AS removed, (SELECT count(*) FROM archived)::int AS archived`,

    // The UTC days whose partitions the next batch needs (used after an insert
    // found no partition for a row, e.g. rows finished long before the pruner ran).
    partitionsNeeded: `SELECT DISTINCT (${PURGE_AFTER} AT TIME ZONE 'UTC')::date::text AS day
      FROM ${jobs} j WHERE j.id IN (${due}) AND ${PURGE_AFTER} > now()`,

    createPartition: `SELECT ${s}.create_history_partition($1, $2::date) AS created`,

    // Partitions for rows finishing today and tomorrow, for each retention in use
    // ($2, ms), so the steady state never meets a missing partition.
    createPartitionsAhead: `SELECT ${s}.create_history_partition($1, d) AS created FROM (
        SELECT DISTINCT ((now() + r * interval '1 millisecond' + a * interval '1 day') AT TIME ZONE 'UTC')::date AS d
        FROM unnest($2::float8[]) AS r, (VALUES (0), (1)) AS ahead(a)
      ) days`,

    dropExpired: `SELECT ${s}.drop_expired_history($1, now()) AS dropped`,

    // job_groups rows that hold nothing but a token bucket, full again (or under no
    // group rate limit any more): claim_queue() made them for a group rate limit
    // (0016), and a missing row is the same as a full bucket, so up to $1 of them go.
    // SKIP LOCKED: a claimer spending one keeps it; it is pruned next time.
    pruneGroupBuckets: `WITH idle AS (
        SELECT g.queue, g.group_key FROM ${s}.job_groups g
        LEFT JOIN ${s}.queues q ON q.name = g.queue
        WHERE g.weight = 1 AND g.concurrency_limit IS NULL AND g.rate_limit IS NULL
          AND (q.group_rate_limit IS NULL
            OR (${s}.refill_tokens(g.tokens, g.tokens_at, q.group_rate_limit, q.group_rate_interval_ms, q.group_rate_burst, now())).tokens
               >= q.group_rate_burst)
        LIMIT $1
        FOR UPDATE OF g SKIP LOCKED
      )
      DELETE FROM ${s}.job_groups g USING idle WHERE g.queue = idle.queue AND g.group_key = idle.group_key RETURNING 1`,

    // Queues with grouped jobs pending that are not flagged grouped yet, flagged
    // ($1: the workers' channel, told to re-read the queues table). A worker flags
    // a queue when it claims one of its grouped jobs, which an older backlog
    // without groups put off until it drained (outside review 115: small groups
    // waited 6 s behind 8,000 jobs). The walk visits each queue of
    // jobs_group_dequeue_idx once (an index descent per queue, whatever the
    // backlog), most of them flagged already and skipped.
    flagGroupedQueues: `WITH RECURSIVE found(queue) AS (
        (SELECT j.queue FROM ${jobs} j WHERE j.status = 'pending' AND j.group_key IS NOT NULL ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM ${jobs} j
                WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.queue > f.queue ORDER BY j.queue LIMIT 1)
        FROM found f WHERE f.queue IS NOT NULL
      )
      SELECT f.queue, ${s}.mark_queue_grouped(f.queue, $1) AS flagged FROM found f
      WHERE f.queue IS NOT NULL AND NOT EXISTS (SELECT FROM ${s}.queues q WHERE q.name = f.queue AND q.grouped)`,
  };
});
