-- Queue control: pause/resume and cluster-wide concurrency limits.
--
-- One row per queue that has been configured; a queue without a row is running
-- and unlimited, so enqueueing never has to create or read a row here. The table
-- stays tiny (one row per configured queue), which is what lets the common claim
-- check it with a cheap anti-join (see `cycle` in src/db/queries.ts).
CREATE TABLE :SCHEMA.queues (
  name              text        PRIMARY KEY,
  paused            boolean     NOT NULL DEFAULT false,
  -- Most jobs of this queue processing at once across all workers; NULL = no limit.
  concurrency_limit integer,
  updated_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT queues_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT queues_concurrency_limit_check CHECK (concurrency_limit BETWEEN 1 AND 10000)
);

-- Claims up to _max due jobs of one queue that has a concurrency limit (global in
-- this table, or local to the calling worker, which then passes its free local
-- slots as _max). Returns the claimed rows.
--
-- Why a function and not one statement: under READ COMMITTED a statement sees the
-- snapshot taken when it started. Two workers claiming at once would both lock the
-- queue row in turn, but the second one's count of processing jobs would still
-- come from its old snapshot, missing the jobs the first just claimed. In a
-- VOLATILE plpgsql function every statement takes a fresh snapshot, so the count
-- that follows the row lock sees everything committed by whoever held it before.
-- The queue row lock serialises the claimers of that queue only; other queues and
-- unlimited claims never touch it.
CREATE FUNCTION :SCHEMA.claim_limited(_queue text, _worker text, _tasks text[], _max integer)
RETURNS SETOF :SCHEMA.jobs
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  _limit integer;
  _paused boolean;
  _running integer;
  _n integer := _max;
BEGIN
  SELECT concurrency_limit, paused INTO _limit, _paused
  FROM :SCHEMA.queues WHERE name = _queue FOR UPDATE;
  IF _paused THEN
    RETURN;
  END IF;
  IF _limit IS NOT NULL THEN
    SELECT count(*) INTO _running FROM :SCHEMA.jobs WHERE queue = _queue AND status = 'processing';
    _n := least(_max, _limit - _running);
  END IF;
  IF _n <= 0 THEN
    RETURN;
  END IF;
  -- Same order as the common claim. With a global limit the claimers of this
  -- queue are serialised on its row above, so a pending row can only be locked
  -- by something else for a moment (a cancel, a worker with a stale cache whose
  -- common claim skips it): wait for it rather than SKIP LOCKED past it, which
  -- would start the next job first and break a serial queue's order. With only
  -- local limits (no row, nothing serialises workers) skip, like the common claim.
  RETURN QUERY EXECUTE format($q$
    UPDATE :SCHEMA.jobs j
    SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = $1,
        updated_at = now(),
        -- As in the common claim: a key held only while pending is given up on start (0002).
        key_scope = CASE WHEN j.key_scope = 'pending' THEN 'released' ELSE j.key_scope END
    FROM (
      SELECT id FROM :SCHEMA.jobs
      WHERE status = 'pending' AND queue = $2 AND task = ANY($3) AND run_at <= now()
      ORDER BY priority DESC, run_at, id
      LIMIT $4
      FOR UPDATE %s
    ) c
    WHERE j.id = c.id
    RETURNING j.*$q$, CASE WHEN _limit IS NULL THEN 'SKIP LOCKED' ELSE '' END)
    USING _worker, _queue, _tasks, _n;
END;
$$;
