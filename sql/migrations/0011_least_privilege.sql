-- Least privilege that Postgres enforces, for the roles of sql/roles.sql.
--
-- sql/roles.sql grants column privileges: the enqueue role may INSERT only the
-- columns a new job is made of (queue, task, payload, run_at, max_attempts,
-- priority, trace_context) and UPDATE nothing; the worker role may UPDATE only
-- the columns a run changes (status, attempts, locks, outcome), never queue,
-- task, payload, priority or the key. What column privileges cannot say is said
-- here, for every role that is not the owner of the jobs table, whatever it was
-- granted:
--   - enqueue_job() runs with its owner's rights, so a job key works in every
--     mode without INSERT on job_key or UPDATE on payload and run_at;
--   - a new row is a new job (pending, no attempt, lock, outcome or errors);
--   - an existing row changes only as a run changes it: a pending job is
--     claimed, a processing one gets a heartbeat, progress, an outcome, or goes
--     back to pending; finished jobs are left alone; a job key is only given up;
--   - a payload is at most sluice.max_payload_bytes (below).
--
-- The owner's path costs no extra statement: the triggers' WHEN conditions are
-- plain comparisons on the row, false for every row an owner's enqueue or a
-- worker's cycle writes, so their functions run only for rows that break a rule
-- (or carry a payload over 8 kB). Measured on 30,000-row inserts and claims:
-- within the noise, where a plpgsql trigger run on every row doubled the cost of
-- an insert. enqueue_job() (keyed enqueues) does pay for its pinned search_path,
-- below.

-- enqueue_job() keeps its body (0009) and runs as its owner. Every value it
-- writes is an argument checked by the table's constraints (queue, task and
-- key lengths, max_attempts) and by the triggers below (payload size); the state
-- columns always take their defaults. search_path is pinned, as for any SECURITY
-- DEFINER function, so a caller's own functions or operators never run with the
-- owner's rights. That costs about 10 us per call on Postgres 15 (measured on
-- 2,000 calls: setting and restoring search_path, and revalidating the
-- function's plans against it); the plain INSERT of unkeyed jobs is untouched.
-- EXECUTE was granted to PUBLIC by default, which would now let any role with
-- USAGE on the schema enqueue: only the roles given it keep it.
ALTER FUNCTION :SCHEMA.enqueue_job(text, jsonb, timestamptz, integer, text, integer, text, text, boolean)
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION :SCHEMA.enqueue_job(text, jsonb, timestamptz, integer, text, integer, text, text, boolean)
  FROM PUBLIC;

-- Runs only when a row breaks the rules below (see the triggers' WHEN): allowed
-- for the table's owner (or a member of it, a superuser, or a SECURITY DEFINER
-- function of the owner such as enqueue_job() and its 'replace'), refused for
-- everyone else. The owner is read from the catalog each time, so ALTER TABLE
-- ... OWNER TO needs nothing more.
CREATE FUNCTION :SCHEMA.guard_job_state() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'USAGE') THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' THEN
    RAISE EXCEPTION 'sluice: only the owner of % may insert a job that is not new', TG_RELID::regclass
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'A new job is pending, with 0 attempts, no lock, start, finish, result, progress or errors, and notify_on_finish false.';
  END IF;
  RAISE EXCEPTION 'sluice: only the owner of % may change job % this way (status % to %, key_scope % to %)',
    TG_RELID::regclass, OLD.id, OLD.status, NEW.status, OLD.key_scope, NEW.key_scope
    USING ERRCODE = 'insufficient_privilege',
          DETAIL = 'Other roles can only claim a pending job (its attempts + 1) and change a processing one (heartbeat, progress, outcome, retry, release, snooze, rescue); a job key can only be given up.';
END;
$$;

-- A new row must be a new job. Keep this condition in step with the DETAIL above.
CREATE TRIGGER jobs_guard_insert BEFORE INSERT ON :SCHEMA.jobs FOR EACH ROW
  WHEN (NOT (NEW.status = 'pending' AND NEW.attempts = 0 AND NEW.locked_at IS NULL AND NEW.locked_by IS NULL
             AND NEW.started_at IS NULL AND NEW.finished_at IS NULL AND NEW.result IS NULL
             AND NEW.progress IS NULL AND NEW.last_error IS NULL AND NEW.errors = '[]'::jsonb
             AND NOT NEW.notify_on_finish))
  EXECUTE FUNCTION :SCHEMA.guard_job_state();

-- The steps of a run, which need no check: a claim (pending to processing, one
-- more attempt) and anything that starts from processing and does not cancel.
-- Everything else (retry, cancel, reschedule a pending job, rewrite a finished
-- one, take a key back) is the owner's: the admin API, enqueue_job()'s 'replace',
-- Queue.waitFor(). A worker's cycle, heartbeat, release, snooze, progress and
-- rescue are all steps of a run, so the worker role runs them unchecked.
CREATE TRIGGER jobs_guard_update BEFORE UPDATE ON :SCHEMA.jobs FOR EACH ROW
  WHEN (NOT ((OLD.status = 'pending' AND NEW.status = 'processing' AND NEW.attempts = OLD.attempts + 1
              OR OLD.status = 'processing' AND NEW.status IN ('processing', 'completed', 'failed', 'pending'))
             AND (NEW.key_scope IS NOT DISTINCT FROM OLD.key_scope OR NEW.key_scope = 'released')))
  EXECUTE FUNCTION :SCHEMA.guard_job_state();

-- The largest payload a session may write unless it can act as the table's owner
-- (is a member of that role; a SECURITY DEFINER function does not count, so the
-- limit also holds through enqueue_job()). Queue's maxPayloadBytes is checked in
-- the client, where a role that sends its own SQL skips it; this is the same
-- default, 1 MiB, measured as Postgres holds the value (pg_column_size of the
-- jsonb, which for a value the statement computed is its uncompressed size).
-- This migration pinned the limit on the function as a parameter
-- (SET sluice.max_payload_bytes = '1048576'), which Postgres 15 refuses to a schema
-- owner that is not a superuser: it is a constant now, which 0037 rewrites into
-- the function's body (set_max_payload_bytes(), keeping a limit pinned before).
CREATE FUNCTION :SCHEMA.check_payload_limit() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  _limit CONSTANT bigint := 1048576;
  _size integer := pg_column_size(NEW.payload);
BEGIN
  IF _size > _limit AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
    RAISE EXCEPTION 'sluice: a payload of % bytes is over the limit of % bytes for roles that do not own %',
      _size, _limit, TG_RELID::regclass
      USING ERRCODE = 'program_limit_exceeded',
            HINT = 'The owner can raise it: SELECT <schema>.set_max_payload_bytes(<bytes>) (migration 0037).';
  END IF;
  RETURN NEW;
END;
$$;

-- UPDATE OF payload: a worker's updates never name the payload, so they never
-- even evaluate the condition.
CREATE TRIGGER jobs_payload_limit BEFORE INSERT OR UPDATE OF payload ON :SCHEMA.jobs FOR EACH ROW
  WHEN (pg_column_size(NEW.payload) > 8192)
  EXECUTE FUNCTION :SCHEMA.check_payload_limit();
