-- Refusals from SQL that surfaced as a raw constraint violation (23514 or 23502,
-- naming only the constraint or column) now name what is wrong, with SQLSTATE
-- 22023 as the other argument checks of enqueue_job() and publish() do (outside
-- reviews 63 and 65):
--
-- 1. A job's run_at outside the years 1 to 9999 (0026's constraint), from
--    enqueue_job() or a plain INSERT or UPDATE. A trigger, not a change to
--    enqueue_job(): it covers every writer, and its WHEN clause is a comparison
--    that never calls the function for a time in range. BEFORE triggers run
--    before constraints are checked, so the named error comes first; the
--    constraint stays as the guarantee.
-- 2. publish() with headers that are not a JSON object (an array, a string, JSON
--    null): outbox_message_problem() now says so, as Outbox.publish does.
-- 3. An outbox row with no destination or one longer than 255 characters, no
--    payload, a key longer than 1024 characters, or headers that are not a JSON
--    object, from publish() or an INSERT.
--
-- And rows stored before 0026 with a run_at outside those years are brought to
-- the nearest time within them (review 65). 0026's constraint is NOT VALID, so it
-- let them stay, but checked every new version of such a row: a due one (4000 BC)
-- failed every claim of its queue, which then ran nothing at all. A time before
-- year 1 becomes year 1 (due, as it was); one after 9999 the end of 9999 (as good
-- as never, as it was). This reads the whole table once, before the trigger below
-- takes its lock: enqueues and claims go on meanwhile.
UPDATE :SCHEMA.jobs
SET run_at = CASE WHEN run_at < '0001-01-01 00:00:00+00' THEN '0001-01-01 00:00:00+00'::timestamptz
                  ELSE '9999-12-31 23:59:59.999999+00'::timestamptz END
WHERE run_at < '0001-01-01 00:00:00+00' OR run_at >= '10000-01-01 00:00:00+00';

CREATE FUNCTION :SCHEMA.refuse_run_at_out_of_range() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- In UTC, as the range is: in the session's time zone the same instant may read
  -- as a year inside it (9999-12-31 20:00-08) or with an odd local-mean-time offset.
  RAISE EXCEPTION 'sluice: run_at % UTC is outside the years 1 to 9999 (UTC)', NEW.run_at AT TIME ZONE 'UTC'
    USING ERRCODE = '22023';
END;
$$;

CREATE TRIGGER jobs_run_at_range BEFORE INSERT OR UPDATE OF run_at ON :SCHEMA.jobs FOR EACH ROW
  WHEN (NEW.run_at < '0001-01-01 00:00:00+00' OR NEW.run_at >= '10000-01-01 00:00:00+00')
  EXECUTE FUNCTION :SCHEMA.refuse_run_at_out_of_range();

-- 0025's checks of the key and of each header stay as they are, under a new name;
-- outbox_message_problem() (which publish() calls by name) checks the headers'
-- type first.
ALTER FUNCTION :SCHEMA.outbox_message_problem(text, jsonb) RENAME TO outbox_entries_problem;

CREATE FUNCTION :SCHEMA.outbox_message_problem(key text, headers jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN jsonb_typeof(headers) <> 'object'
      THEN format('headers must be a JSON object (or NULL for none), got %s', jsonb_typeof(headers))
    ELSE :SCHEMA.outbox_entries_problem(key, headers)
  END
$$;

CREATE FUNCTION :SCHEMA.refuse_outbox_row() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NEW.destination IS NULL OR length(NEW.destination) NOT BETWEEN 1 AND 255 THEN
    RAISE EXCEPTION 'publish: the destination must be 1 to 255 characters long, got %',
      CASE WHEN NEW.destination IS NULL THEN 'NULL' ELSE length(NEW.destination) || ' characters' END
      USING ERRCODE = '22023';
  ELSIF NEW.payload IS NULL THEN
    RAISE EXCEPTION 'publish: no payload (NULL); send an empty one for none' USING ERRCODE = '22023';
  ELSIF jsonb_typeof(NEW.headers) <> 'object' THEN
    RAISE EXCEPTION 'publish: headers must be a JSON object (or NULL for none), got %', jsonb_typeof(NEW.headers)
      USING ERRCODE = '22023';
  END IF;
  RAISE EXCEPTION 'publish: the key must be at most 1024 characters long, got %', length(NEW.key)
    USING ERRCODE = '22023';
END;
$$;

CREATE TRIGGER outbox_refuse_row BEFORE INSERT ON :SCHEMA.outbox FOR EACH ROW
  WHEN (NEW.destination IS NULL OR length(NEW.destination) NOT BETWEEN 1 AND 255 OR NEW.payload IS NULL
        OR length(NEW.key) > 1024 OR jsonb_typeof(NEW.headers) <> 'object')
  EXECUTE FUNCTION :SCHEMA.refuse_outbox_row();
