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

CREATE OR REPLACE FUNCTION :SCHEMA.outbox_message_problem(key text, headers jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN strpos(key, chr(10)) > 0 OR strpos(key, chr(13)) > 0 THEN 'key contains a line break'
    WHEN jsonb_typeof(headers) <> 'object'
      THEN format('headers must be a JSON object (or NULL for none), got %s', jsonb_typeof(headers))
    ELSE (
      SELECT problem FROM (
        SELECT CASE
          WHEN h.key !~ '^[!#-''*+.0-9A-Z^_`a-z|~-]+$' THEN format('header name %s is not a token', to_json(h.key))
          WHEN lower(h.key) = 'sluice-key' OR lower(h.key) LIKE 'nats-%'
            THEN format('header %s is reserved (Nats-* headers are JetStream''s controls, Sluice-Key carries the key)', h.key)
          WHEN jsonb_typeof(h.value) <> 'string' THEN format('header %s must be a string, got %s', h.key, jsonb_typeof(h.value))
          WHEN strpos(h.value #>> '{}', chr(10)) > 0 OR strpos(h.value #>> '{}', chr(13)) > 0
            THEN format('header %s contains a line break', h.key)
        END AS problem
        FROM jsonb_each(headers) h
      ) p
      WHERE problem IS NOT NULL
      LIMIT 1)
  END
$$;
