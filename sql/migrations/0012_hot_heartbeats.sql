-- Heartbeats that stay HOT.
--
-- A heartbeat rewrites locked_at of every job a worker holds, every few seconds.
-- While locked_at was the key of jobs_locked_idx, no such update could be HOT
-- (heap-only: the new row version on the same page, no index entry added), so
-- each one added an entry to every index of the table and left the old ones for
-- VACUUM. The rescuer only needs the processing rows, which are few (at most the
-- sum of the workers' concurrency and prefetch): it reads them through a partial
-- index keyed on a column that does not change while a job is processing, and
-- sorts the handful by locked_at itself. Keyed on queue, the same index serves
-- claim_limited()'s count of a queue's processing jobs. started_at, written when a
-- job claimed ahead starts (0010), is in no index either, so that write is HOT too.
DROP INDEX :SCHEMA.jobs_locked_idx;
CREATE INDEX jobs_processing_idx ON :SCHEMA.jobs (queue) WHERE status = 'processing';
