import { channelFor, quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * Statements of groups, group limits and rate limits (migration 0016): the
 * settings an admin changes at run time, and the per-group numbers for stats,
 * the dashboard and metrics. Every setting is written together with its audit
 * record and the control message that makes workers re-read the queues table
 * (as src/db/statements/control.ts does for pause and limits), so workers hear of
 * a change exactly when it commits.
 */
export interface GroupStatements {
  readonly schema: string;
  readonly channel: string;
  readonly setQueueGroups: string;
  readonly setQueueRate: string;
  readonly setGroup: string;
  readonly listQueueLimits: string;
  readonly listGroupSettings: string;
  readonly groupStats: string;
  readonly queueHasJobs: string;
  readonly queuesWithGroupedJobs: string;
  readonly allQueuesWithGroupedJobs: string;
}

/** The group statements for one schema, built once per schema. */
export const groupStatements = perSchema((schema: string): GroupStatements => {
  const s = quoteSchema(schema);
  const queueColumns = `q.name, q.paused, q.concurrency_limit, q.grouped, q.group_concurrency,
    q.rate_limit, q.rate_interval_ms, q.rate_burst, q.group_rate_limit, q.group_rate_interval_ms, q.group_rate_burst,
    q.updated_at`;
  // Each setting statement takes $1 queue, then the changed values, then the
  // channel, the actor and the control message. A value is changed only when its
  // flag is true, so one statement serves every combination of options. The audit
  // record is written by the same statement (migration 0007).
  // The record's detail is the settings as the statement left them (migration 0033).
  const audited = (action: 'group_defaults' | 'rate_limit', actor: '$10' | '$6') => `
      , logged AS (INSERT INTO ${s}.audit_log (queue, action, actor, detail)
          SELECT name, '${action}', ${actor}::text, CASE '${action}'
            WHEN 'group_defaults' THEN jsonb_build_object('group_concurrency', q.group_concurrency,
              'group_rate_limit', q.group_rate_limit, 'group_rate_interval_ms', q.group_rate_interval_ms,
              'group_rate_burst', q.group_rate_burst)
            ELSE jsonb_build_object('rate_limit', q.rate_limit, 'rate_interval_ms', q.rate_interval_ms,
              'rate_burst', q.rate_burst) END
          FROM q)`;
  return {
    schema,
    channel: channelFor(schema),

    // Group defaults of a queue: $2/$3 set group_concurrency; $4/$5..$7 set the
    // per-group rate limit; $8 marks the queue grouped (so these apply before its
    // first grouped job arrives).
    setQueueGroups: `WITH q AS (
        INSERT INTO ${s}.queues AS q (name, grouped, group_concurrency, group_rate_limit, group_rate_interval_ms, group_rate_burst)
        VALUES ($1, $8, CASE WHEN $2 THEN $3::int END, CASE WHEN $4 THEN $5::int END,
                CASE WHEN $4 THEN $6::int END, CASE WHEN $4 THEN $7::int END)
        ON CONFLICT (name) DO UPDATE SET
          grouped = q.grouped OR excluded.grouped,
          group_concurrency = CASE WHEN $2 THEN excluded.group_concurrency ELSE q.group_concurrency END,
          group_rate_limit = CASE WHEN $4 THEN excluded.group_rate_limit ELSE q.group_rate_limit END,
          group_rate_interval_ms = CASE WHEN $4 THEN excluded.group_rate_interval_ms ELSE q.group_rate_interval_ms END,
          group_rate_burst = CASE WHEN $4 THEN excluded.group_rate_burst ELSE q.group_rate_burst END,
          updated_at = now()
        RETURNING ${queueColumns}
      )${audited('group_defaults', '$10')}
      SELECT q.*, pg_notify($9, $11) IS NULL AS notified FROM q`,

    // A queue's rate limit ($2 limit, $3 interval, $4 burst; all NULL: none). The
    // bucket starts full again.
    setQueueRate: `WITH q AS (
        INSERT INTO ${s}.queues AS q (name, rate_limit, rate_interval_ms, rate_burst) VALUES ($1, $2, $3, $4)
        ON CONFLICT (name) DO UPDATE SET rate_limit = excluded.rate_limit, rate_interval_ms = excluded.rate_interval_ms,
          rate_burst = excluded.rate_burst, tokens = NULL, tokens_at = NULL, updated_at = now()
        RETURNING ${queueColumns}
      )${audited('rate_limit', '$6')}
      SELECT q.*, pg_notify($5, $7) IS NULL AS notified FROM q`,

    // One group's own settings ($2 group, '' for jobs without one): $3/$4 weight,
    // $5/$6 concurrency limit, $7/$8..$10 rate limit. The queue becomes grouped.
    // The queue's row is written only when it is not grouped yet: ON CONFLICT DO
    // UPDATE locks the row it meets even where its WHERE is false, and a transaction
    // left open after changing one group's weight then held up every claim of a
    // queue with a queue-wide limit (outside review 94: no start for 2.5 s).
    setGroup: `WITH queue AS (
        INSERT INTO ${s}.queues AS q (name, grouped)
        SELECT $1, true WHERE NOT EXISTS (SELECT FROM ${s}.queues WHERE name = $1 AND grouped)
        ON CONFLICT (name) DO UPDATE SET grouped = true, updated_at = now() WHERE NOT q.grouped
      ), g AS (
        INSERT INTO ${s}.job_groups AS g (queue, group_key, weight, concurrency_limit, rate_limit, rate_interval_ms, rate_burst)
        VALUES ($1, $2, CASE WHEN $3 THEN $4::int ELSE 1 END, CASE WHEN $5 THEN $6::int END,
                CASE WHEN $7 THEN $8::int END, CASE WHEN $7 THEN $9::int END, CASE WHEN $7 THEN $10::int END)
        ON CONFLICT (queue, group_key) DO UPDATE SET
          weight = CASE WHEN $3 THEN excluded.weight ELSE g.weight END,
          concurrency_limit = CASE WHEN $5 THEN excluded.concurrency_limit ELSE g.concurrency_limit END,
          rate_limit = CASE WHEN $7 THEN excluded.rate_limit ELSE g.rate_limit END,
          rate_interval_ms = CASE WHEN $7 THEN excluded.rate_interval_ms ELSE g.rate_interval_ms END,
          rate_burst = CASE WHEN $7 THEN excluded.rate_burst ELSE g.rate_burst END,
          tokens = CASE WHEN $7 THEN NULL ELSE g.tokens END,
          updated_at = now()
        RETURNING g.queue, g.group_key, g.weight, g.concurrency_limit, g.rate_limit, g.rate_interval_ms, g.rate_burst,
          g.updated_at
      ), logged AS (
        INSERT INTO ${s}.audit_log (queue, action, actor, detail)
        SELECT queue, 'group_settings', $12::text, jsonb_build_object('group', nullif(group_key, ''), 'weight', weight,
          'concurrency_limit', concurrency_limit, 'rate_limit', rate_limit, 'rate_interval_ms', rate_interval_ms,
          'rate_burst', rate_burst) FROM g
      )
      SELECT g.*, pg_notify($11, $13) IS NULL AS notified FROM g`,

    listQueueLimits: `SELECT ${queueColumns} FROM ${s}.queues q ORDER BY q.name`,

    listGroupSettings: `SELECT queue, group_key, weight, concurrency_limit, rate_limit, rate_interval_ms, rate_burst, updated_at
      FROM ${s}.job_groups WHERE queue = $1 ORDER BY group_key`,

    // Per-group numbers of one queue ($1), busiest first, at most $2 groups; the
    // totals over every group ride on each row (window sums before the LIMIT).
    // Throttled: due jobs held back by the group's concurrency limit or its rate
    // limit right now; queueThrottled: every due job held back by the queue's own
    // (outside review 193: a queue at its rate limit showed "0 throttled"). An
    // admin read: it passes over the queue's pending jobs once.
    groupStats: `WITH p AS (
        SELECT coalesce(group_key, '') AS g, count(*) FILTER (WHERE run_at <= now()) AS due,
               count(*) FILTER (WHERE run_at > now()) AS scheduled
        FROM ${s}.jobs WHERE status = 'pending' AND queue = $1 GROUP BY 1
      ), r AS (
        SELECT coalesce(group_key, '') AS g, count(*) AS running
        FROM ${s}.jobs WHERE status = 'processing' AND queue = $1 GROUP BY 1
      ), a AS (
        SELECT coalesce(p.g, r.g) AS g, coalesce(p.due, 0) AS due, coalesce(p.scheduled, 0) AS scheduled,
               coalesce(r.running, 0) AS running
        FROM p FULL JOIN r ON r.g = p.g
      ), x AS (
        SELECT a.*, coalesce(gs.weight, 1) AS weight,
               coalesce(gs.concurrency_limit, q.group_concurrency) AS concurrency_limit,
               a.due > 0 AND (a.running >= coalesce(gs.concurrency_limit, q.group_concurrency)
                 OR (coalesce(gs.rate_limit, q.group_rate_limit) IS NOT NULL
                     AND (${s}.refill_tokens(gs.tokens, gs.tokens_at, coalesce(gs.rate_limit, q.group_rate_limit),
                            coalesce(gs.rate_interval_ms, q.group_rate_interval_ms),
                            coalesce(gs.rate_burst, q.group_rate_burst), clock_timestamp())).tokens < 1))
                 IS TRUE AS throttled
        FROM a
        LEFT JOIN ${s}.job_groups gs ON gs.queue = $1 AND gs.group_key = a.g
        LEFT JOIN ${s}.queues q ON q.name = $1
      )
      SELECT CASE WHEN g = '' THEN NULL ELSE g END AS "group", due::int, scheduled::int, running::int, weight,
             x.concurrency_limit AS "concurrencyLimit", throttled,
             count(*) OVER ()::int AS "groupCount", (sum(due) OVER ())::int AS "dueTotal",
             (sum(running) OVER ())::int AS "runningTotal",
             (count(*) FILTER (WHERE due > 0) OVER ())::int AS "dueGroupCount",
             (count(*) FILTER (WHERE running > 0) OVER ())::int AS "runningGroupCount",
             (count(*) FILTER (WHERE throttled) OVER ())::int AS "throttledCount",
             (sum(due) OVER () > 0 AND (sum(running) OVER () >= q.concurrency_limit
               OR (q.rate_limit IS NOT NULL AND (${s}.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms,
                     q.rate_burst, clock_timestamp())).tokens < 1))) IS TRUE AS "queueThrottled"
      FROM x LEFT JOIN ${s}.queues q ON q.name = $1
      ORDER BY due DESC, running DESC, g LIMIT $2`,

    // Whether a queue has any job (for the CLI's check of a queue name), in the
    // history too: a queue whose jobs the pruner all moved there is no typo (outside
    // review 85), and `sluice stats` lists it.
    queueHasJobs: `SELECT EXISTS (SELECT FROM ${s}.jobs WHERE queue = $1)
        OR EXISTS (SELECT FROM ${s}.jobs_history WHERE queue = $1) AS found`,

    // Which of the queues $1 have pending jobs with a group: a queue is marked
    // grouped only when a worker first claims such a job or a group setting is
    // made, and stats left out the groups of a backlog enqueued before that
    // (outside review 94). One probe of jobs_group_dequeue_idx per queue.
    queuesWithGroupedJobs: `SELECT q AS name FROM unnest($1::text[]) AS q
      WHERE EXISTS (SELECT FROM ${s}.jobs j WHERE j.queue = q AND j.status = 'pending' AND j.group_key IS NOT NULL)`,

    // Every queue with pending jobs that have a group, for metrics, which has no
    // list of queues to ask about (such a queue may have no queues row yet): one
    // probe of jobs_group_dequeue_idx per queue found, skipping from one to the next.
    allQueuesWithGroupedJobs: `WITH RECURSIVE q(name) AS (
        (SELECT queue FROM ${s}.jobs WHERE status = 'pending' AND group_key IS NOT NULL ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT queue FROM ${s}.jobs WHERE status = 'pending' AND group_key IS NOT NULL AND queue > q.name
                ORDER BY queue LIMIT 1)
        FROM q WHERE q.name IS NOT NULL)
      SELECT name FROM q WHERE name IS NOT NULL`,
  };
});
