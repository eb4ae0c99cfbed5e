-- Indexes on jobs_history for the admin API and the dashboard.
--
-- The admin API's window counts and the dashboard's throughput chart read the
-- jobs finished in the last hour, most of which the pruner has already moved
-- to jobs_history. That table is partitioned by purge_after, which says nothing
-- about when a row finished, so without this index every such read would scan
-- all of the history. jobs_history is insert-only (rows arrive in batches from
-- the pruner and leave by whole partitions), so the index costs one entry per
-- archived job and never bloats. Created on the parent, it is created on every
-- partition, present and future.
CREATE INDEX jobs_history_finished_idx ON :SCHEMA.jobs_history (finished_at);

-- The job browser lists archived jobs too, newest first and filtered by status
-- ("the failed ones"): walking (status, id) finds a rare status without reading
-- the millions of completed rows around it.
CREATE INDEX jobs_history_status_idx ON :SCHEMA.jobs_history (status, id);
