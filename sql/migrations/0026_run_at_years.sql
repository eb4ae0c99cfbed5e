-- A job's run_at lies within the years 1 to 9999 (UTC), as the JavaScript side
-- already requires (src/time-range.ts): enqueue_job() from SQL, or a plain INSERT,
-- stored times such as year 294276 or 4000 BC (outside review 61), which
-- JavaScript cannot hold ("Invalid Date" in `sluice jobs show`).
--
-- NOT VALID: the check applies to every row written from now on without reading
-- the table (a long scan under lock on a big queue); rows already there are not
-- checked. Retries and snoozes write now() plus a delay the worker bounds, so they
-- never fail it.
ALTER TABLE :SCHEMA.jobs ADD CONSTRAINT jobs_run_at_years_1_to_9999
  CHECK (run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00') NOT VALID;
