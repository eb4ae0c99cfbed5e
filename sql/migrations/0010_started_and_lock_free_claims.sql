-- Two things a worker must never do: wait on a row lock that is not its own, and
-- spend the attempt of a job whose handler never started.
--
-- started_at: when the job's handler started on its current attempt, NULL while
-- it is pending, or processing but claimed ahead and still waiting for a slot in
-- its worker. The claim sets it for the jobs that go straight into free slots;
-- the worker writes it for a job claimed ahead when that job starts (with its
-- next cycle). So 'processing' with started_at NULL is "claimed, waiting", which
-- the admin views show apart from running jobs, and the rescuer gives a job whose
-- handler never started its attempt back (see the rescue statement in
-- src/db/statements/worker.ts). No default: adding the column rewrites nothing.
ALTER TABLE :SCHEMA.jobs ADD COLUMN started_at timestamptz;

-- claim_limited() as in 0003, except that it never waits on a lock:
-- - the queue's row is taken FOR UPDATE SKIP LOCKED. Held by another claimer of
--   the same queue, that claimer is claiming right now, so nothing is lost by
--   coming back later; held by some other session (an admin's open transaction),
--   only this queue waits, never the worker's other queues or its result writes.
-- - pending rows are taken in claim order with SKIP LOCKED. With a global limit
--   only the unbroken prefix of the candidates is claimed: a row locked by someone
--   else ends the batch instead of being jumped, so a serial queue still runs in
--   order. With local limits only (no row serialises the claimers), locked rows
--   are jumped, as the common claim does.
-- Every job it claims starts at once (limited queues are never claimed ahead).
CREATE OR REPLACE FUNCTION :SCHEMA.claim_limited(_queue text, _worker text, _tasks text[], _max integer)
RETURNS SETOF :SCHEMA.jobs
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  _limit integer;
  _paused boolean;
  _running integer;
  _n integer := _max;
  _candidates bigint[];
  _claim bigint[] := '{}';
  _id bigint;
BEGIN
  SELECT concurrency_limit, paused INTO _limit, _paused
  FROM :SCHEMA.queues WHERE name = _queue FOR UPDATE SKIP LOCKED;
  IF NOT FOUND AND EXISTS (SELECT FROM :SCHEMA.queues WHERE name = _queue) THEN
    RETURN; -- the row exists but someone holds it: try again on a later cycle
  END IF;
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
  _candidates := ARRAY(
    SELECT id FROM :SCHEMA.jobs
    WHERE status = 'pending' AND queue = _queue AND task = ANY(_tasks) AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT _n);
  FOREACH _id IN ARRAY _candidates LOOP
    -- status is checked again on the row's newest version: a row claimed and
    -- committed by someone else since this function's snapshot is not taken.
    PERFORM FROM :SCHEMA.jobs WHERE id = _id AND status = 'pending' FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
      _claim := _claim || _id;
    ELSIF _limit IS NOT NULL THEN
      EXIT;
    END IF;
  END LOOP;
  RETURN QUERY
    UPDATE :SCHEMA.jobs j
    SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = _worker,
        updated_at = now(), started_at = now(),
        -- As in the common claim: a key held only while pending is given up on start (0002).
        key_scope = CASE WHEN j.key_scope = 'pending' THEN 'released' ELSE j.key_scope END
    WHERE j.id = ANY(_claim)
    RETURNING j.*;
END;
$$;
