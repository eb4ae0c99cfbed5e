-- An index on jobs_history that holds everything the stats count (queue, status,
-- finished_at), so getStats and `sluice stats` count the archived jobs by queue and
-- status with an index-only scan instead of reading the archived rows themselves
-- (their jsonb makes the table about 20 times the size of this index). The table
-- is insert-only and left by whole partitions, so its visibility map stays set
-- (autovacuum's insert threshold) and the scan seldom visits the heap. Created on
-- the parent, it is created on every partition, present and future.
CREATE INDEX jobs_history_counts_idx ON :SCHEMA.jobs_history (queue, status, finished_at);
