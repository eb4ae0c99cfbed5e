import { withGenericPlan } from './generic-plan.js';
import { claimedColumns, claimReturning, keepRecent } from './job-columns.js';
import { completion, startedAt } from './outcomes.js';

/*
 * The worker's two hot statements: the cycle (results written, next batch
 * claimed, in one round trip) and the claim alone. The rest of what a worker
 * sends is in worker.ts.
 */

/**
 * The time a claim stamps on its rows (locked_at, started_at) and tells the
 * worker: read once, when the statement runs, in a CTE of the statement. Not
 * now(), the time the statement arrived: a claim that waited behind a table lock
 * (LOCK TABLE, a migration) stamped locks already older than the visibility
 * timeout, and the rescuer, waiting behind the same lock, failed those jobs as if
 * their worker had died (outside review 144: 20 single-attempt jobs dead-lettered
 * without running after a 10 s LOCK TABLE). Table locks are all taken before the
 * statement runs, and the claim waits on no row, so this is after any wait.
 */
const CLAIM_TIME = 'claim_time AS MATERIALIZED (SELECT clock_timestamp() AS at)';

/**
 * The claim, shared by the cycle and the claim-only statement: the next due jobs
 * of the queues, in claim order, locked SKIP LOCKED and marked processing (see
 * cycleStatement for why it is written this way). The arguments say where the
 * worker id, queues, tasks, limit and free-slot count are among the statement's
 * parameters. Reads CLAIM_TIME (its callers put it in their WITH). Schema
 * placeholder :SCHEMA.
 */
function claimUpdate(
  queues: '$9' | '$2',
  filter: 'one' | 'many',
  worker: '$1',
  tasks: '$10' | '$3',
  limit: '$11' | '$4',
  startNow: '$15' | '$5',
): string {
  return `
        UPDATE :SCHEMA.jobs j
        SET status = 'processing', attempts = j.attempts + 1, locked_at = t.at, locked_by = ${worker}::text,
            updated_at = t.at,
            -- The first startNow in claim order go into free slots and start now; the
            -- rest are claimed ahead and start when a slot frees (started_at NULL).
            started_at = CASE WHEN p.n <= ${startNow}::int THEN t.at END,
            -- A key held only while pending is given up when the job starts (see
            -- 0002), and only then: a job claimed ahead keeps it until its start is
            -- written (started, failed below), so a hand-back returns it with its key (0024).
            key_scope = ${releaseKey(`p.n <= ${startNow}::int`)}
        FROM unnest(ARRAY(${dueJobs(queues, filter, tasks, limit)})) WITH ORDINALITY AS p(id, n), claim_time t
        WHERE j.id = p.id
          AND j.queue <> ALL (ARRAY(SELECT name FROM :SCHEMA.queues
            WHERE paused OR concurrency_limit IS NOT NULL OR grouped OR rate_limit IS NOT NULL))
        -- RETURNING (added by the callers): not j.*, see claimedColumns; and
        -- claim_order, as RETURNING follows the join, not the claim order (outside
        -- review 43: a worker's prefetched jobs started out of priority order), so
        -- the rows are put back in it after.`;
}

/**
 * The ids of the next due jobs of the queues, in claim order, locked SKIP LOCKED.
 * One queue: an equality on the leading column of jobs_dequeue_idx, so the index
 * returns rows in claim order and the scan stops after `limit` of them. Several:
 * queue = ANY(...) cannot use the index order (it is not ordered across queues),
 * and Postgres sorted every due row, ~100 ms per claim with 200,000 pending (outside
 * review 134: a worker of two queues, one of them empty, drained at a sixth of the
 * rate of a worker of one). So the same scan per queue gathers candidates, unlocked
 * (up to twice `limit` and 16 more each), and they are locked in claim order until `limit` are
 * held: only the rows kept are locked (outside review 135: with each queue's scan
 * locking its own `limit`, the rows the merge dropped stayed locked for the
 * statement, and a claim beside it came back empty with a job due). Only when that
 * falls short and some queue had more due jobs than it offered (claims at the same
 * moment locked the candidates: outside review 136, six workers, most of them idle
 * while a backlog waited) do the queues' scans go on past the candidates, locking
 * as they go; the surplus they lock is held for the statement. The UNION ALL runs
 * its second part only if the first gave fewer than `limit` rows.
 */
function dueJobs(queues: '$9' | '$2', filter: 'one' | 'many', tasks: '$10' | '$3', limit: '$11' | '$4'): string {
  // clock_timestamp(), not now(): the statement's snapshot is taken after its
  // transaction's start, so rows of an enqueue that committed in between are
  // visible, their run_at (the insert's clock) past now(): all but the first of a
  // batch were skipped, and one slot ran a backlog out of priority order.
  const due = `status = 'pending' AND task = ANY(${tasks}::text[]) AND run_at <= clock_timestamp()`;
  const order = 'ORDER BY priority DESC, run_at, id';
  const locked = `
          ${order}
          LIMIT ${limit}::int
          FOR UPDATE SKIP LOCKED`;
  if (filter === 'one') {
    return `
          SELECT id FROM :SCHEMA.jobs
          WHERE ${due} AND queue = (${queues}::text[])[1]${locked}`;
  }
  const candidates = `2 * ${limit}::int + 16`;
  // Of all the queues' candidates, only the first `candidates` in claim order are
  // offered (fetched again by primary key, sorted and locked): offering every one
  // fetched and sorted 90 x 116 rows for a claim of 50 (outside review 255: ~20 ms
  // a claim for a worker of 90 queues; the fetch of the candidates is about half).
  // The queues' own scans go on past the offer when it fell short and some queue had
  // more due jobs than it gave, or the queues together more than were offered.
  return `
          WITH candidate AS MATERIALIZED (
            SELECT c.id, c.priority, c.run_at, q.name AS queue FROM unnest(${queues}::text[]) AS q(name)
            CROSS JOIN LATERAL (
              SELECT id, priority, run_at FROM :SCHEMA.jobs WHERE ${due} AND queue = q.name ${order} LIMIT ${candidates}) AS c
          ), offer AS MATERIALIZED (
            SELECT id, row_number() OVER (${order}) AS n FROM candidate ${order} LIMIT ${candidates}
          )
          SELECT id FROM (
            -- Each offered row locked by its primary key, in claim order, until the claim
            -- has its jobs. As one "id = ANY(offer) ... ORDER BY ... FOR UPDATE" the
            -- generic plan, made while the table looked small (never analyzed: this
            -- server's autovacuum may be off), walked all of jobs_dequeue_idx for the
            -- offer: ~300 ms a claim behind 20,000 jobs, a worker of [X, P] at a seventh
            -- of a worker of [P] (outside review 255). A lookup per row has one plan.
            SELECT id FROM (
              SELECT l.id FROM (SELECT id, n FROM offer ORDER BY n) AS o
              CROSS JOIN LATERAL (
                SELECT id FROM :SCHEMA.jobs WHERE id = o.id AND ${due}
                FOR UPDATE SKIP LOCKED) AS l
              LIMIT ${limit}::int) AS offered
            UNION ALL
            SELECT id FROM (
              SELECT d.id FROM unnest(${queues}::text[]) AS q(name)
              CROSS JOIN LATERAL (
                SELECT id, priority, run_at FROM :SCHEMA.jobs
                WHERE ${due} AND queue = q.name AND id <> ALL(ARRAY(SELECT id FROM offer))${locked}) AS d
              WHERE EXISTS (SELECT 1 FROM candidate GROUP BY queue HAVING count(*) >= ${candidates})
                 OR (SELECT count(*) FROM candidate) > ${candidates}
              ORDER BY d.priority DESC, d.run_at, d.id) AS beyond
          ) AS claimable
          LIMIT ${limit}::int`;
}

/**
 * key_scope after a write that starts a job when `starts` holds: a key held only
 * while pending ('pending') is given up, other scopes stay. Schema-free SQL.
 */
export function releaseKey(starts: 'true' | `p.n <= ${'$15' | '$5'}::int`): string {
  return `CASE WHEN j.key_scope = 'pending' AND ${starts} THEN 'released' ELSE j.key_scope END`;
}

// The cycle's claim: its outer SELECT numbers the rows and puts them in claim order.
const CYCLE_CLAIM_ONE = `${claimUpdate('$9', 'one', '$1', '$10', '$11', '$15')}
        RETURNING ${claimReturning('j')}, p.n AS claim_order, t.at AS claimed_at`;
const CYCLE_CLAIM_MANY = `${claimUpdate('$9', 'many', '$1', '$10', '$11', '$15')}
        RETURNING ${claimReturning('j')}, p.n AS claim_order, t.at AS claimed_at`;
// The claim alone: the rows as the store reads them, the claim's time on the first
// in claim order, and that order (the store sorts by it).
const CLAIM_ONE = `WITH ${CLAIM_TIME}${claimUpdate('$2', 'one', '$1', '$3', '$4', '$5')}
        RETURNING ${claimedColumns('j', 'p.n = 1', 't.at')}, p.n::int AS claim_order`;
const CLAIM_MANY = `WITH ${CLAIM_TIME}${claimUpdate('$2', 'many', '$1', '$3', '$4', '$5')}
        RETURNING ${claimedColumns('j', 'p.n = 1', 't.at')}, p.n::int AS claim_order`;

export type QueueFilter = 'one' | 'many';

/**
 * A claim with nothing to write (an idle worker woken, a poll): the claim alone.
 * The cycle with empty arrays cost ~120 µs of server CPU per statement, this ~40
 * (2,000 empty claims in a row on one connection, after warm-up). The UPDATE's own
 * RETURNING, in join order with claim_order to sort by: wrapped to number and
 * sort the rows in SQL as the cycle does, it took 0.05-0.08 ms longer at the
 * median for the one-job claims of a pick-up (about 7-10%, bench/.tmp A/B of
 * 2,000 claims taking turns). No row when nothing was claimed.
 */
export function claimStatement(schema: string, filter: QueueFilter): string {
  return withGenericPlan(filter === 'one' ? CLAIM_ONE : CLAIM_MANY).replaceAll(':SCHEMA', () => schema);
}

/**
 * One round trip per worker cycle: record the results of finished jobs and claim
 * the next batch. Data-modifying CTEs all run, referenced or not, in one
 * snapshot; they touch disjoint rows (processing vs pending), so they never see or
 * block each other.
 *
 * A result counts only while the row is still 'processing', still held by this
 * worker instance ($1) and still on the same attempt: a job rescued from this
 * worker (and maybe claimed again elsewhere), or cancelled while it ran, cannot be
 * finished by it. Whether a failure is final ($8) is decided by the worker, which
 * knows the task's retry policy (maxAttempts may override the row's).
 *
 * The claim takes its rows with SELECT ... FOR UPDATE SKIP LOCKED: workers skip
 * rows another claim holds instead of waiting on them.
 *
 * This is a named prepared statement, and withGenericPlan makes Postgres keep one
 * generic plan for it, which cannot see $9 or $11. It is written so that plan is the right one
 * (measured with EXPLAIN on 100,000 pending jobs, where the earlier form got a seq
 * scan, a sort and a hash join: ~100 ms per claim instead of ~1 ms):
 * - a worker of one queue filters on queue = $9[1], an equality on the leading
 *   column of jobs_dequeue_idx, so the index returns rows already in claim order
 *   and the scan stops after $11 of them. Workers of several queues use
 *   cycleManyQueues: the same scan per queue, merged (see dueJobs).
 * - the claimed ids reach the UPDATE as an array (id = ANY(ARRAY(...))), so the
 *   update is primary-key lookups whatever LIMIT $11 is guessed to be.
 *
 * $14 are jobs claimed ahead that have started since ($15: how many of this
 * claim start at once, see started_at in migration 0010). Every write locks its
 * rows SKIP LOCKED first (writable): nothing here ever waits on another session.
 *
 * Paused queues are never claimed, and queues with a global concurrency limit only
 * through claimLimited. The worker already leaves them out of $9 (it caches the
 * queues table), so the `<> ALL` line only guards against a stale cache. It sits on
 * the outer UPDATE, not in the inner SELECT, on purpose: the planner estimates
 * `queue <> ALL (<InitPlan>)` as matching ~0.1% of rows, and inside the SELECT that
 * made it drop the in-order index scan for a sequential scan and a sort of every
 * due job (so did a NOT EXISTS anti-join). Out here it is checked once per
 * candidate row (at most $11). A stale worker may lock such rows for the length of
 * its statement and leave them pending. `node --import tsx bench/claim-guard.ts`.
 */
export function cycleStatement(schema: string, filter: QueueFilter, completed: 'keep' | 'delete'): string {
  // The schema goes in after withGenericPlan: a schema's name may hold "$1".
  const jobs = ':SCHEMA.jobs';
  const claim = `${filter === 'one' ? CYCLE_CLAIM_ONE : CYCLE_CLAIM_MANY}`;
  return withGenericPlan(`WITH writable AS (
        -- The rows this cycle writes, locked first and SKIP LOCKED: a row that some
        -- other session holds (an open transaction that locked it) is left for a
        -- later cycle instead of waited for, so it never holds up the other results
        -- or the claim. The worker learns which ones from skipped_ids.
        --
        -- Whether a row is still this worker's is read here, from the row as locked,
        -- and not filtered on: with "status = 'processing'" in a WHERE clause the
        -- planner may answer it by scanning jobs_processing_idx, every running job of
        -- every worker (measured: 10,100 rows read for a cycle of 100 with 10,000 jobs
        -- running elsewhere). Here and in the updates below the only condition on the
        -- table is the id, so each row is one primary-key lookup.
        SELECT id, attempts, started_at IS NULL AS unstarted,
               status = 'processing' AND locked_by = $1::text AS mine,
               notify_on_finish AS watched
        FROM ${jobs} WHERE id = ANY($2::bigint[] || $4::bigint[] || $14::bigint[])
        FOR UPDATE SKIP LOCKED
      ), ${completion(completed)}, failed AS (
        UPDATE ${jobs} j
        SET status = CASE WHEN f.final THEN 'failed' ELSE 'pending' END,
            run_at = CASE WHEN f.final THEN j.run_at ELSE now() + f.delay_ms * interval '1 millisecond' END,
            finished_at = CASE WHEN f.final THEN now() END,
            last_error = f.error, locked_at = NULL, updated_at = now(),
            started_at = CASE WHEN f.final THEN ${startedAt('f')} END,
            progress = coalesce(f.progress, j.progress), -- $19: the attempt's last report, as for completions
            key_scope = ${releaseKey('true')}, -- the attempt ran: a job claimed ahead may still hold its key
            -- The history stays on the row for dead-letter inspection. The error
            -- text is the stack, whose first line is "Name: message". Capped: see keepRecent.
            -- started_at and worker: the attempt's start and who ran it, for the history.
            errors = ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', f.attempt, 'at', now(),
              'message', split_part(f.error, chr(10), 1), 'stack', f.error,
              'started_at', ${startedAt('f')}, 'worker', j.locked_by))
        FROM writable w JOIN unnest($4::bigint[], $5::int[], $6::text[], $7::float8[], $8::bool[], $17::float8[], $19::jsonb[])
          AS f(id, attempt, error, delay_ms, final, started_ms, progress) ON f.id = w.id AND f.attempt = w.attempts
        WHERE j.id = w.id AND w.mine
        RETURNING j.id, j.status, j.notify_on_finish
      ), started AS (
        -- $14: jobs claimed ahead that have since started in their worker, $20 when
        -- (the worker's clock, as its handler was told in ctx.job.started_at).
        UPDATE ${jobs} j SET started_at = coalesce(to_timestamp(st.ms / 1000.0), now()), key_scope = ${releaseKey('true')}
        FROM writable w JOIN unnest($14::bigint[], $20::float8[]) AS st(id, ms) ON st.id = w.id
        WHERE j.id = w.id AND w.mine AND w.unstarted
      ), ${CLAIM_TIME}, claimed AS (${claim}
      ), notified AS (
        -- Outcome notifications ($13 = 'sluice:<schema>:done'), only for jobs that
        -- Queue.waitFor() flagged and that are finished for good: the common case
        -- sends nothing. A plain SELECT CTE runs only when something needs its
        -- value, so applied filters on it (an unused output column would be dropped).
        SELECT count(pg_notify($13::text, w.id::text)) AS n FROM (
          SELECT id FROM completed WHERE notify_on_finish
          UNION ALL SELECT id FROM failed WHERE notify_on_finish AND status = 'failed'
        ) w
      ), applied AS (
        SELECT (SELECT coalesce(array_agg(id::text), '{}') FROM completed) AS completed_ids,
               (SELECT coalesce(array_agg(id::text), '{}') FROM failed) AS failed_ids,
               -- Results not written because another session held the row: not lost, retried.
               (SELECT coalesce(array_agg(x::text), '{}') FROM unnest($2::bigint[] || $4::bigint[]) AS x
                WHERE x NOT IN (SELECT id FROM writable) AND EXISTS (SELECT FROM ${jobs} WHERE id = x)) AS skipped_ids
        WHERE (SELECT n FROM notified) >= 0
      )
      -- The id arrays ride on one row only (the first claimed job's, or the single
      -- row when nothing was claimed): repeated on every row, the driver parsed
      -- batch x batch ids per cycle.
      SELECT CASE WHEN c.n IS NULL OR c.n = 1 THEN a.completed_ids END AS completed_ids,
             CASE WHEN c.n IS NULL OR c.n = 1 THEN a.failed_ids END AS failed_ids,
             CASE WHEN c.n IS NULL OR c.n = 1 THEN a.skipped_ids END AS skipped_ids,
             ${claimedColumns('c', 'c.n = 1', 'c.claimed_at')}
      FROM applied a LEFT JOIN (SELECT *, row_number() OVER (ORDER BY claim_order) AS n FROM claimed) c ON true
      ORDER BY c.n`).replaceAll(':SCHEMA', () => schema);
}
