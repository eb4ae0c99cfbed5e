-- Wake-ups for every due time of a statement, not only its earliest.
--
-- The insert trigger sent one wake-up per queue with the statement's earliest
-- run_at. A worker keeps every due time it is told, but was told only the first:
-- an enqueueMany of jobs delayed by 0.5, 1, 1.5 and 2 s started the first on time
-- and the rest at the next poll. Now the trigger also sends the distinct future
-- run_at values of the statement (the earliest 32; NOTIFY folds identical payloads
-- within a transaction), so each one wakes a worker when it falls due. Rows due at
-- once still cost one wake-up per queue.
CREATE OR REPLACE FUNCTION :SCHEMA.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  IF current_setting('sluice.wake', true) = 'deferred' THEN
    RETURN NULL;
  END IF;
  FOR r IN
    SELECT queue, min(run_at) AS run_at FROM new_jobs WHERE status = 'pending' GROUP BY queue
    UNION
    (SELECT DISTINCT queue, run_at FROM new_jobs WHERE status = 'pending' AND run_at > clock_timestamp()
     ORDER BY queue, run_at LIMIT 32)
  LOOP
    PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA, :SCHEMA.wake_payload(r.queue, r.run_at));
  END LOOP;
  RETURN NULL;
END;
$$;
