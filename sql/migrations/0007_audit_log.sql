-- What people did to jobs and queues through the admin API (the dashboard, the
-- CLI, your own scripts): retry, cancel, delete, bulk retry, pause, resume.
--
-- A table of its own rather than a column on jobs: the record must outlive a
-- deleted job, and the pruner moves finished jobs to jobs_history. Each row is
-- written by the same statement as the action it records (a data-modifying
-- CTE), so an action never happens without its record, nor the other way round.
-- No foreign key to jobs for the same reason. A bulk retry writes one row per
-- job it touched, so every job's own history shows it.
CREATE TABLE :SCHEMA.audit_log (
  id      bigserial   PRIMARY KEY,
  at      timestamptz NOT NULL DEFAULT now(),
  -- NULL for actions on a whole queue (pause, resume).
  job_id  bigint,
  queue   text        NOT NULL,
  action  text        NOT NULL,
  -- Who asked, as the caller describes it, e.g. 'dashboard token 127.0.0.1' or 'cli'.
  actor   text        NOT NULL,
  CONSTRAINT audit_log_actor_check CHECK (length(actor) BETWEEN 1 AND 256)
);

-- A job's history is read by job id.
CREATE INDEX audit_log_job_idx ON :SCHEMA.audit_log (job_id, id) WHERE job_id IS NOT NULL;
