import { quoteSchema } from '../identifiers.js';
import { claimStatement, cycleStatement, releaseKey } from './cycle.js';
import { jobColumns, keepRecent } from './job-columns.js';
import { perSchema } from './per-schema.js';
import { serverStartedAt } from './server-start.js';

/**
 * What a worker sends: the cycle (results written + next batch claimed), the
 * limited claim, heartbeats, release on stop, snooze, progress, its queue-state
 * cache, the rescue its maintenance leader runs, and the wake-up after jobs went
 * back to pending. Values are always `$n` parameters; the schema is the only
 * text spliced in, quoted once.
 */
export interface WorkerStatements {
  readonly schema: string;
  /** The worker cycle for a worker of one queue. */
  readonly cycle: string;
  /** The worker cycle for a worker of several queues. */
  readonly cycleManyQueues: string;
  /** The cycles of a worker with `completedJobs: 'delete'`: completed rows are deleted. */
  readonly cycleDeletingCompleted: string;
  readonly cycleManyQueuesDeletingCompleted: string;
  /** A claim with no results to write, for a worker of one queue. */
  readonly claim: string;
  /** A claim with no results to write, for a worker of several queues. */
  readonly claimManyQueues: string;
  readonly heartbeat: string;
  readonly release: string;
  readonly releaseOrphans: string;
  readonly writtenByMe: string;
  readonly rescue: string;
  readonly rescueTimeouts: string;
  readonly notify: string;
  readonly claimLimited: string;
  readonly hasDueJobs: string;
  readonly snooze: string;
  readonly handBackAfterRestart: string;
  readonly queueState: string;
  readonly markGrouped: string;
  readonly progress: string;
}

/** The statements of a worker for one schema, built once per schema. */
export const workerStatements = perSchema((schema: string): WorkerStatements => {
  const s = quoteSchema(schema);
  const jobs = `${s}.jobs`;
  const queues = `${s}.queues`;
  return {
    schema,

    // Paused queues are never claimed, and queues with a global concurrency limit
    // only through claimLimited (see cycleStatement).
    cycle: cycleStatement(s, 'one', 'keep'),
    cycleManyQueues: cycleStatement(s, 'many', 'keep'),
    cycleDeletingCompleted: cycleStatement(s, 'one', 'delete'),
    cycleManyQueuesDeletingCompleted: cycleStatement(s, 'many', 'delete'),
    claim: claimStatement(s, 'one'),
    claimManyQueues: claimStatement(s, 'many'),

    // Renews the lock of every job this worker holds, in one statement, stamped
    // with the time it actually runs (clock_timestamp(), not the transaction's
    // start). Rows another session holds locked are skipped, never waited for: a
    // wait would delay the renewal of all the others past their visibility
    // timeout. They come back with renewed = false (still this worker's in the
    // snapshot, not renewed), cancelled ones with renewed NULL (the handler is told
    // the job was cancelled, as by the cancel's NOTIFY, which a worker without
    // LISTEN never hears: outside review 238); ids not returned at all were taken
    // away (rescued, finished): their handlers are told to stop.
    heartbeat: `WITH mine AS (
        SELECT id FROM ${jobs}
        WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1
        FOR UPDATE SKIP LOCKED
      ), renewed AS (
        UPDATE ${jobs} j SET locked_at = clock_timestamp() FROM mine WHERE j.id = mine.id RETURNING j.id
      )
      SELECT id::text AS id, true AS renewed FROM renewed
      UNION ALL
      SELECT id::text, false FROM ${jobs}
      WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1 AND id NOT IN (SELECT id FROM mine)
      UNION ALL
      SELECT id::text, NULL FROM ${jobs} WHERE id = ANY($2::bigint[]) AND status = 'cancelled'`,

    // On stop, jobs that did not finish go back to pending without spending the
    // attempt the claim took: the worker, not the job, gave up. run_at is kept:
    // the job was due already, and keeps its place in its queue's order.
    // Rows another session holds locked are skipped (the worker tries again).
    release: `WITH mine AS (
        SELECT id FROM ${jobs} WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1
        FOR UPDATE SKIP LOCKED
      ), released AS (
        UPDATE ${jobs} j
        SET status = 'pending', attempts = j.attempts - 1, locked_at = NULL, locked_by = NULL,
            updated_at = now(), started_at = NULL
        FROM mine WHERE j.id = mine.id
        RETURNING j.id, j.queue
      )
      SELECT id::text AS id, queue, true AS released FROM released
      UNION ALL
      SELECT id::text, queue, false FROM ${jobs}
      WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1 AND id NOT IN (SELECT id FROM mine)`,

    // Rows locked to this worker that it does not hold: a claim committed with its
    // reply lost (Postgres crashed, the connection was cut), so the worker never
    // heard of them. They never ran, so they go back to pending with the attempt
    // the claim took given back, now rather than after the visibility timeout
    // (the rescuer would count the attempt of those the claim started). $2: every
    // job the worker holds; sent only while no claim of its own is in flight.
    releaseOrphans: `WITH orphans AS (
        SELECT id FROM ${jobs}
        WHERE status = 'processing' AND locked_by = $1 AND id <> ALL($2::bigint[])
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${jobs} j
      SET status = 'pending', attempts = j.attempts - 1, locked_at = NULL, locked_by = NULL,
          updated_at = now(), started_at = NULL
      FROM orphans WHERE j.id = orphans.id
      RETURNING j.id::text AS id, j.queue`,

    // Where results this worker sent in a statement whose reply was lost stand: a
    // row it finished keeps locked_by (a completion or failure clears only
    // locked_at), so status and attempts say whether that write committed.
    writtenByMe: `SELECT id::text AS id, status, attempts FROM ${jobs}
      WHERE id = ANY($2::bigint[]) AND locked_by = $1`,

    // Jobs whose heartbeat is older than the visibility timeout: their worker died
    // or hung. Back to pending (the attempt stays spent), or failed when none are
    // left. SKIP LOCKED so that several rescuers never fight over the same rows.
    //
    // A job whose handler never started (claimed ahead, started_at NULL: its
    // worker died before a slot freed) gets its attempt back and is always
    // pending again: it did not run, so it cannot have failed. A job that crashes
    // its worker as soon as it starts still runs out of attempts: one that started
    // from a free slot has started_at set by the claim itself.
    //
    // No heartbeat can land while Postgres is down, so right after a restart every
    // running job looks stale although its worker is alive and about to reconnect.
    // Heartbeats therefore count as no older than the server's start: workers get a
    // full visibility timeout after a restart to heartbeat again before anything
    // of theirs is rescued. Neither time says when a crash recovery ended, which may
    // outlast the timeout: $8, no older than the rescuing worker last found
    // Postgres down, ms ago (NULL: never); $9, a lock from before the server's start no
    // older than the rescuing worker's own start, ms ago (a worker started after the
    // recovery did not see it; outside review 113).
    //
    // Whose visibility timeout: the worker's that holds the job, from $3/$4 (the
    // registry's, read by rescueTimeouts), else the rescuer's own ($1). A leader with
    // a shorter one rescued the jobs of live workers configured longer (migration 0034).
    //
    // $5/$6/$7: (worker, job, alive) for the jobs workers list as theirs though
    // another session holds their rows (no heartbeat could renew them; migration
    // 0036). Those of a live worker are left to it: it hands them back, or writes
    // their results, once the rows are free (outside review 105: the rescuer took
    // them the moment the lock went). Those of a worker that stopped or died with
    // the row held get their attempt back, as jobs that never started do: the
    // attempt was lost to someone else's lock, not to the job (review 104).
    //
    // $10: a statement that waited longer than this many ms before it ran (behind
    // a table lock: LOCK TABLE, a migration, VACUUM FULL; now() is when it was
    // sent) counts every heartbeat as fresh and rescues nothing: the workers'
    // heartbeats waited behind the same lock, and at its release the rescuer took
    // the jobs of live workers before their heartbeats or results landed (outside
    // review 145: handlers that had returned during a 13 s lock failed, or ran
    // again). The leader then waits a visibility timeout (rescuerTask).
    //
    // $11: workers whose jobs this pass leaves alone whatever their locks say: those
    // the registry counts alive, in a leader's first visibility timeout (rescuerTask;
    // review 146: a leader elected during such a lock had not waited behind it, and
    // took live workers' jobs as it ended). Empty otherwise.
    rescue: `UPDATE ${jobs} j
      SET status = CASE WHEN NOT stale.refund AND j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
          attempts = CASE WHEN stale.refund THEN j.attempts - 1 ELSE j.attempts END,
          finished_at = CASE WHEN NOT stale.refund AND j.attempts >= j.max_attempts THEN now() END,
          last_error = stale.message,
          errors = ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', now(),
            'message', stale.message, 'unstarted', stale.unstarted, 'refunded', stale.refund,
            'started_at', j.started_at, 'worker', j.locked_by)),
          locked_at = NULL, locked_by = NULL, updated_at = now(),
          -- A job that never started keeps its place in claim order: it was due, and
          -- waited only for a slot of the worker that died (outside review 86: such jobs
          -- queued behind every job due since). One that ran lines up behind the jobs
          -- due now, as a retry does: a job that kills its worker goes to the back.
          run_at = CASE WHEN stale.refund THEN j.run_at ELSE now() END,
          -- A job failed for good keeps its last attempt's start, as a failure written by its worker does.
          started_at = CASE WHEN NOT stale.refund AND j.attempts >= j.max_attempts THEN j.started_at END
      FROM (
        -- Not "the worker died": a live one leaves a job whose handler ignored its
        -- abort to the rescuer too (outside review 108).
        SELECT r.id, r.refund, r.unstarted, 'lock expired: worker ' || coalesce(r.locked_by, '?') || ' stopped heartbeating'
            || CASE WHEN NOT r.refund THEN ' it (the worker died, hung or was cut off, or left the job to the rescuer; its handler may have '
                    || 'finished, its result not written)'
                    WHEN r.unstarted THEN ' before the job''s start was recorded (attempt not counted; a job claimed ahead may have started, its start not yet written)'
                    ELSE ' while another session held the job''s row or its table locked (attempt not counted)' END AS message
        FROM (
          -- refund: the handler never started (started_at NULL), or its worker left
          -- the job while another session held the row, and the previous rescue was
          -- not one of these too. A job claimed ahead, started, and killing its
          -- worker before its start was written would otherwise never spend an
          -- attempt; this way it spends one at least every second crash.
          SELECT p.id, p.locked_by, p.started_at IS NULL AS unstarted,
            (p.started_at IS NULL OR h.alive IS NOT NULL)
              -- 'refunded' since migration 0036; before it, 'unstarted' said the same.
              AND coalesce((p.errors -> -1 ->> 'refunded')::boolean, (p.errors -> -1 ->> 'unstarted')::boolean, false) = false AS refund
          FROM ${jobs} p
            LEFT JOIN unnest($3::text[], $4::float8[]) AS v(worker, ms) ON v.worker = p.locked_by
            LEFT JOIN unnest($5::text[], $6::bigint[], $7::boolean[]) AS h(worker, id, alive)
              ON h.id = p.id AND h.worker = p.locked_by
          WHERE p.status = 'processing'
            AND greatest(p.locked_at, ${serverStartedAt()}, now() - $8::float8 * interval '1 millisecond',
                  CASE WHEN p.locked_at < ${serverStartedAt()} THEN now() - $9::float8 * interval '1 millisecond' END,
                  CASE WHEN clock_timestamp() - now() > $10::float8 * interval '1 millisecond' THEN clock_timestamp() END)
              < now() - coalesce(v.ms, $1::float8) * interval '1 millisecond'
            AND h.alive IS NOT TRUE
            AND coalesce(p.locked_by <> ALL($11::text[]), true)
          ORDER BY p.locked_at
          LIMIT $2
          FOR UPDATE OF p SKIP LOCKED
        ) r
      ) stale
      WHERE j.id = stale.id
      RETURNING j.id::text AS id, j.queue, j.status`,

    // The visibility timeouts the registry holds that differ from the rescuer's
    // own ($1), for the rescue's $3/$4: workers that heartbeat no faster than their
    // own timeout asks are not rescued at the leader's pace (migration 0034). And
    // the jobs workers answer for whose rows another session holds, for $5/$6/$7
    // (0036), each with whether its worker still answers for it: a row that lists
    // such jobs is refreshed at the pace of heartbeats, so it counts while it was
    // refreshed within the worker's visibility timeout, as a job's lock does (and
    // no older than the server's start, as for locks), and the worker has not stopped.
    // $3: the missed intervals after which a row counts as dead, for "aliveWorkers".
    rescueTimeouts: `SELECT t.workers, t.ms, h.held_by AS "heldBy", h.held::text[] AS held, h.alive, a.ids AS "aliveWorkers"
      FROM (SELECT array_agg(id) AS workers, array_agg(visibility_timeout_ms::float8) AS ms
            FROM ${s}.workers WHERE visibility_timeout_ms <> $1::int) t,
        (SELECT array_agg(w.id) AS ids FROM ${s}.workers w
         WHERE w.stopped_at IS NULL AND w.last_seen_at > now() - $3::float8 * w.interval_ms * interval '1 millisecond') a,
        (SELECT array_agg(w.id) AS held_by, array_agg(r.id) AS held,
            array_agg(w.stopped_at IS NULL AND greatest(w.last_seen_at, ${serverStartedAt()}, now() - $2::float8 * interval '1 millisecond')
              > now() - coalesce(w.visibility_timeout_ms, $1::int) * interval '1 millisecond') AS alive
            FROM ${s}.workers w CROSS JOIN LATERAL unnest(w.row_held) AS r(id)) h`,

    // Wakes workers of a queue after jobs went back to pending outside an INSERT.
    // The payload comes from wake_payload() (migration 0009), like every wake-up.
    // A boolean, not pg_notify's void, which Prisma cannot read (outside review 214: retryJob through prismaAdapter).
    notify: `SELECT pg_notify($1, ${s}.wake_payload(q, now())) IS NULL AS notified
      FROM unnest($2::text[]) AS q`,

    // Claims from one queue with a concurrency limit, groups or a rate limit: see
    // claim_queue() in sql/migrations/0016_groups.sql (fair claims, group and rate
    // limits) and claim_limited() in 0003 and 0010 (why a function; never waiting on
    // a lock). A row without an id carries wait_until: a rate limit held jobs back
    // until then. Each claim visits at most 4 groups per job wanted (at least 32).
    // $5: how many of the claim start now; the rest are claimed ahead where no
    // limit counts them (claim_queue() in 0019). $6: jobs this worker finished
    // whose results are being written beside this claim, not counted as running (0022).
    claimLimited: `SELECT ${jobColumns('(c.job)')}, c.wait_until
      FROM ${s}.claim_queue($2, $1, $3::text[], $4, greatest(32, 4 * $4), $5, $6::bigint[]) c`,

    // Whether limited queues ($1) whose claims found nothing have due jobs of these
    // tasks ($2) all the same: held back by a limit, not empty (see LimitedClaims.quiet).
    hasDueJobs: `SELECT EXISTS (
        SELECT 1 FROM ${jobs} WHERE status = 'pending' AND queue = ANY($1::text[])
          AND task = ANY($2::text[]) AND run_at <= clock_timestamp()
      ) AS due`,

    // A handler asked to run again later: back to pending without spending the
    // attempt the claim took. Guarded like a result ($1 worker, $3 attempt). A row
    // another session holds is skipped: run_at NULL with mine = true says "try
    // again"; mine = false says the job is no longer this worker's. $6: for a
    // hand-back, what its error history says (outside review 116: a job handed back
    // for a held row left no trace of the run it lost), else NULL.
    snooze: `WITH target AS (
        SELECT id FROM ${jobs} WHERE id = $2 AND attempts = $3 AND status = 'processing' AND locked_by = $1
        FOR UPDATE SKIP LOCKED
      ), snoozed AS (
        UPDATE ${jobs} j
        SET status = 'pending', attempts = j.attempts - 1, locked_at = NULL, locked_by = NULL, updated_at = now(),
            started_at = NULL, run_at = coalesce($4::timestamptz, now() + $5::float8 * interval '1 millisecond'),
            key_scope = ${releaseKey('true')},
            last_error = coalesce($6::text, j.last_error),
            errors = CASE WHEN $6::text IS NULL THEN j.errors
              ELSE ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', now(),
                'message', $6::text, 'refunded', true, 'started_at', j.started_at, 'worker', j.locked_by)) END
        FROM target WHERE j.id = target.id
        RETURNING j.run_at
      )
      SELECT (SELECT run_at FROM snoozed) AS run_at,
        EXISTS (SELECT FROM ${jobs} WHERE id = $2 AND attempts = $3 AND status = 'processing' AND locked_by = $1) AS mine`,

    // A job whose lock its worker could not renew while Postgres was unreachable,
    // its handler aborted (see Dispatcher.unrenewed): back to pending with the
    // attempt given back when the server restarted since the lock was last renewed
    // (the outage was Postgres's, not the job's; outside review 110: a 7 s restart
    // made a job of one attempt a dead letter). Not twice in a row, as the rescuer's
    // refunds: a job that crashes Postgres itself still runs out of attempts.
    // $5 (the worker's beats went out and Postgres did not answer them: a lock on
    // the jobs table, an outage; outside review 145) gives it back whether or not
    // the server restarted, with that message: the job is still this worker's, so
    // no other run of it began, and the handler did nothing to earn the failure.
    // Otherwise (a blocked event loop, or the refund just used: restarted or $5
    // says which) the row is left as it is and charge says so: the worker writes
    // the failure as usual.
    // The worker stops heartbeating such a job once aborted, so locked_at is still
    // the last renewal from before the outage.
    handBackAfterRestart: `WITH target AS (
        SELECT id, restarted, CASE WHEN restarted THEN $4::text ELSE $5::text END AS message,
            (restarted OR $5::text IS NOT NULL)
              AND coalesce((errors -> -1 ->> 'refunded')::boolean, (errors -> -1 ->> 'unstarted')::boolean, false) = false
            AS refund
        FROM (SELECT id, errors, locked_at < ${serverStartedAt()} AS restarted FROM ${jobs}
              WHERE id = $2 AND attempts = $3 AND status = 'processing' AND locked_by = $1
              FOR UPDATE SKIP LOCKED) mine
      ), handed AS (
        UPDATE ${jobs} j
        SET status = 'pending', attempts = j.attempts - 1, locked_at = NULL, locked_by = NULL, updated_at = now(),
            started_at = NULL, last_error = target.message,
            errors = ${keepRecent('j.errors')} || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', now(),
              'message', target.message, 'refunded', true, 'started_at', j.started_at, 'worker', j.locked_by))
        FROM target WHERE j.id = target.id AND target.refund
        RETURNING j.run_at
      )
      SELECT (SELECT run_at FROM handed) AS run_at, coalesce((SELECT NOT refund FROM target), false) AS charge,
        coalesce((SELECT restarted FROM target), false) AS restarted,
        EXISTS (SELECT FROM ${jobs} WHERE id = $2 AND attempts = $3 AND status = 'processing' AND locked_by = $1) AS mine,
        -- No longer this worker's because an earlier try of this hand-back committed, its
        -- reply lost (a statement timeout racing a lock's release; outside review 147):
        -- the row's newest history entry is that hand-back, which one its message says.
        -- Not while the row is still this run's: that entry is then the hand-back of
        -- an earlier run of the same attempt (refunded, so numbered alike), and this
        -- one is charged (outside review 161: told handed back, it stayed processing).
        (SELECT CASE WHEN x.errors -> -1 ->> 'message' = $4::text THEN 'restart' ELSE 'unanswered' END
         FROM ${jobs} x
         WHERE x.id = $2 AND x.errors -> -1 ->> 'worker' = $1 AND (x.errors -> -1 ->> 'attempt')::int = $3
           AND (x.errors -> -1 ->> 'refunded')::boolean
           AND x.errors -> -1 ->> 'message' IN ($4::text, $5::text)
           AND NOT (x.status = 'processing' AND x.locked_by = $1 AND x.attempts = $3)) AS handed_before`,

    // What a worker caches about its queues: which are paused, globally limited,
    // grouped or rate-limited (the last three are claimed by claimLimited).
    // strict: some limit counts every job claimed (a concurrency or rate limit on
    // the queue, group defaults, or a group's own): claim_queue() claims nothing
    // ahead there, so the worker refills each freed slot at once (FetchLoop).
    // no_ahead: the queue's own limits, under which claim_queue() claims nothing ahead at all.
    queueState: `SELECT q.name, q.paused, q.concurrency_limit, q.grouped OR q.rate_limit IS NOT NULL AS grouped,
        q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL OR q.group_concurrency IS NOT NULL
          OR q.group_rate_limit IS NOT NULL AS no_ahead,
        q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL OR q.group_concurrency IS NOT NULL
          OR q.group_rate_limit IS NOT NULL
          OR EXISTS (SELECT FROM ${s}.job_groups g WHERE g.queue = q.name
                       AND (g.concurrency_limit IS NOT NULL OR g.rate_limit IS NOT NULL)) AS strict
      FROM ${queues} q
      WHERE q.name = ANY($1::text[]) AND (q.paused OR q.concurrency_limit IS NOT NULL OR q.grouped OR q.rate_limit IS NOT NULL)`,

    // A claim returned a grouped job of a queue not known to be grouped: flag it
    // and tell the workers ($2, the schema's channel) to re-read (migration 0021).
    markGrouped: `SELECT ${s}.mark_queue_grouped($1, $2) AS flagged`,

    // Latest progress of running jobs, one statement for all of a worker's reports.
    // Ignored once the job is no longer this worker's (finished, rescued). Rows
    // another session holds locked are skipped, never waited for; the ids written
    // come back, and the worker sends the others again (the worker's own cycle
    // writing a job's start held its row as the first report came, which was lost).
    progress: `UPDATE ${jobs} j SET progress = p.progress
      FROM unnest($2::bigint[], $3::jsonb[]) AS p(id, progress)
      WHERE j.id = p.id AND j.id IN (
        SELECT id FROM ${jobs} WHERE id = ANY($2::bigint[]) AND status = 'processing' AND locked_by = $1
        FOR UPDATE SKIP LOCKED)
      RETURNING j.id::text AS id`,
  };
});
