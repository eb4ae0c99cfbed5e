-- A job may be inserted with notify_on_finish set (Queue.enqueue's `waitable`):
-- flagged for waitFor() from its insert, so a worker with completedJobs 'delete'
-- keeps its row when it completes and announces it. Flagged by waitFor() after the
-- enqueue instead, the flag lost the race to the worker under load: of 200
-- callers that each enqueued and then waited, 147-200 got JobNotFoundError for a
-- job that had completed (outside review 219). The flag only asks for a
-- notification and a kept row, so any role may set it on a new job now; the
-- insert guard (0011) no longer counts it. Its DETAIL says so.

CREATE OR REPLACE FUNCTION :SCHEMA.guard_job_state() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'USAGE') THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' THEN
    RAISE EXCEPTION 'sluice: only the owner of % may insert a job that is not new', TG_RELID::regclass
      USING ERRCODE = 'insufficient_privilege',
            DETAIL = 'A new job is pending, with 0 attempts, no lock, start, finish, result, progress or errors.';
  END IF;
  RAISE EXCEPTION 'sluice: only the owner of % may change job % this way (status % to %, key_scope % to %)',
    TG_RELID::regclass, OLD.id, OLD.status, NEW.status, OLD.key_scope, NEW.key_scope
    USING ERRCODE = 'insufficient_privilege',
          DETAIL = 'Other roles can only claim a pending job (its attempts + 1) and change a processing one (heartbeat, progress, outcome, retry, release, snooze, rescue); a job key can only be given up.';
END;
$$;

-- Keep this condition in step with the DETAIL above.
DROP TRIGGER jobs_guard_insert ON :SCHEMA.jobs;
CREATE TRIGGER jobs_guard_insert BEFORE INSERT ON :SCHEMA.jobs FOR EACH ROW
  WHEN (NOT (NEW.status = 'pending' AND NEW.attempts = 0 AND NEW.locked_at IS NULL AND NEW.locked_by IS NULL
             AND NEW.started_at IS NULL AND NEW.finished_at IS NULL AND NEW.result IS NULL
             AND NEW.progress IS NULL AND NEW.last_error IS NULL AND NEW.errors = '[]'::jsonb))
  EXECUTE FUNCTION :SCHEMA.guard_job_state();
