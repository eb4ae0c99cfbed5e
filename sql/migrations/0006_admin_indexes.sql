-- Indexes for the admin API (sluice jobs list/retry, the dashboard).
--
-- Listing walks the primary key newest-first (keyset pagination by id), which is
-- fast when the rows asked for are common. Failed and cancelled jobs are usually
-- rare among millions of completed ones, so "show me the failures" would scan
-- most of the table; this partial index holds only them, in id order. Jobs
-- enter it once, when they fail or are cancelled, so the hot path (claim,
-- complete) never pays for it.
CREATE INDEX jobs_failed_cancelled_idx ON :SCHEMA.jobs (status, id)
  WHERE status IN ('failed', 'cancelled');
