-- Optional least-privilege roles for Sluice. Not a migration: apply it yourself,
-- as the owner of the schema, after `sluice migrate`, with :SCHEMA replaced by the
-- quoted schema name, e.g.
--   sed 's/:SCHEMA/"sluice"/g' node_modules/sluice/sql/roles.sql | psql "$DATABASE_URL"
-- and then give the group roles to the login roles your processes use:
--   GRANT sluice_worker TO app_worker;
--   GRANT sluice_enqueue TO app_web;
-- Re-running it is harmless. Both roles are NOLOGIN groups.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_enqueue') THEN
    CREATE ROLE sluice_enqueue NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_worker') THEN
    CREATE ROLE sluice_worker NOLOGIN;
  END IF;
END
$$;

-- Enqueue only: Queue.enqueue / enqueueMany and SELECT enqueue_job(...), with or
-- without job keys. It can add jobs and learn their ids; it cannot read payloads,
-- claim, fail or delete jobs (the only change it can make is the payload and
-- run_at of a pending job, which is what jobKey mode 'replace' does).
-- Queue.getJob needs SELECT on jobs and jobs_history, not granted here.
-- The insert trigger's pg_notify needs no grant.
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_enqueue;
GRANT INSERT ON :SCHEMA.jobs TO sluice_enqueue;
GRANT USAGE ON SEQUENCE :SCHEMA.jobs_id_seq TO sluice_enqueue;
GRANT EXECUTE ON FUNCTION :SCHEMA.enqueue_job TO sluice_enqueue;
-- RETURNING id, and finding the holder of a job key (jobKey, mode 'keep'/'error').
GRANT SELECT (id, queue, status, job_key, key_scope) ON :SCHEMA.jobs TO sluice_enqueue;
-- jobKey mode 'replace': a pending holder takes the new payload and run_at (and
-- enqueue_job reads the row's tableoid to find the channel to notify).
GRANT UPDATE (payload, run_at, updated_at) ON :SCHEMA.jobs TO sluice_enqueue;
GRANT SELECT (tableoid) ON :SCHEMA.jobs TO sluice_enqueue;

-- Worker: claims (SELECT ... FOR UPDATE SKIP LOCKED needs UPDATE), heartbeats,
-- results, release on stop, and the maintenance lease and rescuer. No INSERT or
-- DELETE on jobs. The pruner is not covered: moving rows into jobs_history
-- creates and drops its partitions, which only the owner of the schema may do, so
-- run workers with this role as `maintenance: { pruner: false }` and prune from
-- one process that connects as the owner.
-- A handler that enqueues follow-up jobs needs sluice_enqueue as well.
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_worker;
GRANT SELECT, UPDATE ON :SCHEMA.jobs TO sluice_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON :SCHEMA.leader TO sluice_worker;
-- Paused and concurrency-limited queues: the claim reads them and claim_limited()
-- locks the queue's row (FOR UPDATE needs UPDATE). Pausing is the admin's job.
GRANT SELECT, UPDATE ON :SCHEMA.queues TO sluice_worker;
-- Workers given `schedules` write their definitions and ticks here, and enqueue
-- the ticks: grant such workers sluice_enqueue as well.
GRANT SELECT, INSERT, UPDATE ON :SCHEMA.cron_schedules TO sluice_worker;
