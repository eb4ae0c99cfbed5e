-- Two refusals from SQL that surfaced as a raw check-constraint violation (23514,
-- naming only the constraint) now name what is wrong, with SQLSTATE 22023 as the
-- other argument checks of enqueue_job() and publish() do (outside review 63):
--
-- 1. A job's run_at outside the years 1 to 9999 (0026's constraint), from
--    enqueue_job() or a plain INSERT or UPDATE. A trigger, not a change to
--    enqueue_job(): it covers every writer, and its WHEN clause is a comparison
--    that never calls the function for a time in range. BEFORE triggers run
--    before constraints are checked, so the named error comes first; the
--    constraint stays as the guarantee.
-- 2. publish() with headers that are not a JSON object (an array, a string, JSON
--    null): outbox_message_problem() now says so, as Outbox.publish does.

CREATE FUNCTION :SCHEMA.refuse_run_at_out_of_range() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'sluice: run_at % is outside the years 1 to 9999 (UTC)', NEW.run_at
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
