-- Times other roles write may not reach past what the package itself ever
-- writes (outside review 267, after 0047 bounded the maintenance lease).
--
-- The worker role writes jobs.locked_at (claims and heartbeats), the token
-- buckets of queues and groups, its row in the workers registry; the relay role
-- the outbox partitions' leases. Written by hand far ahead, each froze what it
-- guards: a job with locked_at 'infinity' stayed processing, never rescued, and
-- `sluice doctor` called it fine; a bucket with tokens -1e9, or tokens_at a
-- century ahead, starved its queue or group (or failed every claim of the queue:
-- "interval out of range"); a registry row seen a century ahead, or with an
-- interval of 24 days, counted as a live worker, so a hand-written maintenance
-- lease in its name passed doctor's check; a relay lease to 'infinity' held its
-- partition for good.
--
-- Sluice writes each from the server's clock at the time (clock_timestamp()) or
-- the start of its transaction: the bounds below leave a minute for that, and an
-- hour for leases (the longest leaseMs). A bucket never goes below zero: a claim
-- takes at most the whole tokens it finds.
--
-- NOT VALID: rows already there are not read again (the jobs table may be large);
-- every row written from now on is checked.

ALTER TABLE :SCHEMA.jobs ADD CONSTRAINT jobs_locked_at_bound
  CHECK (locked_at IS NULL OR locked_at <= clock_timestamp() + interval '1 minute') NOT VALID;

-- Finite too: tokens_at '-infinity' failed every claim of the queue ("cannot subtract
-- infinite timestamps"), and NaN compares above every number (outside review 269).
ALTER TABLE :SCHEMA.queues ADD CONSTRAINT queues_tokens_bound
  CHECK ((tokens IS NULL OR (tokens >= 0 AND tokens < 'Infinity'))
    AND (tokens_at IS NULL OR (isfinite(tokens_at) AND tokens_at <= clock_timestamp() + interval '1 minute'))) NOT VALID;

ALTER TABLE :SCHEMA.job_groups ADD CONSTRAINT job_groups_tokens_bound
  CHECK ((tokens IS NULL OR (tokens >= 0 AND tokens < 'Infinity'))
    AND (tokens_at IS NULL OR (isfinite(tokens_at) AND tokens_at <= clock_timestamp() + interval '1 minute'))) NOT VALID;

-- visibility_timeout_ms: the rescuer waits a worker's own visibility timeout before
-- taking its jobs, so a row with a huge one would keep them from rescue; at most the
-- option's 24 h.
ALTER TABLE :SCHEMA.workers ADD CONSTRAINT workers_liveness_bound
  CHECK (interval_ms <= 3600000 AND last_seen_at <= clock_timestamp() + interval '1 minute'
    AND (visibility_timeout_ms IS NULL OR visibility_timeout_ms <= 86400000)) NOT VALID;

ALTER TABLE :SCHEMA.outbox_relays ADD CONSTRAINT outbox_relays_lease_bound
  CHECK (expires_at IS NULL OR expires_at <= clock_timestamp() + interval '1 hour 1 minute') NOT VALID;

-- Those written so already end now, as 0047 did for the maintenance lease.
UPDATE :SCHEMA.jobs SET locked_at = clock_timestamp()
  WHERE status = 'processing' AND locked_at > clock_timestamp() + interval '1 minute';
UPDATE :SCHEMA.queues SET tokens = NULL, tokens_at = NULL
  WHERE tokens < 0 OR tokens >= 'Infinity' OR NOT isfinite(tokens_at) OR tokens_at > clock_timestamp() + interval '1 minute';
UPDATE :SCHEMA.job_groups SET tokens = NULL, tokens_at = NULL
  WHERE tokens < 0 OR tokens >= 'Infinity' OR NOT isfinite(tokens_at) OR tokens_at > clock_timestamp() + interval '1 minute';
DELETE FROM :SCHEMA.workers
  WHERE interval_ms > 3600000 OR last_seen_at > clock_timestamp() + interval '1 minute'
    OR visibility_timeout_ms > 86400000;
UPDATE :SCHEMA.outbox_relays SET expires_at = clock_timestamp() + interval '1 hour'
  WHERE expires_at > clock_timestamp() + interval '1 hour 1 minute';
