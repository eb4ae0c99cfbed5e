-- The payload limit for roles that do not own the schema (0011) was a parameter,
-- sluice.max_payload_bytes, pinned on check_payload_limit() with a SET clause.
-- Since Postgres 15 only a superuser, or a role granted SET ON PARAMETER, may pin
-- a custom parameter on a function: a schema owner that is not a superuser could
-- not migrate (0011 failed: permission denied to set parameter; outside review
-- 118), nor change the limit with ALTER FUNCTION ... SET. 0011 now creates the
-- function without the clause, and the limit is a constant in its body, written
-- by set_max_payload_bytes(): the owner calls it, as it replaces the function
-- (no other role may). A session still cannot lift the limit for itself.
CREATE FUNCTION :SCHEMA.set_max_payload_bytes(_bytes bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- At least 8192: the trigger only looks at payloads over 8 kB. At most 1 GiB, jsonb's own limit.
  IF _bytes IS NULL OR _bytes < 8192 OR _bytes > 1073741824 THEN
    RAISE EXCEPTION 'sluice.set_max_payload_bytes: the limit must be 8192 to 1073741824 bytes, not %', _bytes
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  EXECUTE replace($body$
CREATE OR REPLACE FUNCTION :SCHEMA.check_payload_limit() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  _limit CONSTANT bigint := __LIMIT__;
  _size integer := pg_column_size(NEW.payload);
BEGIN
  IF _size > _limit AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
    RAISE EXCEPTION 'sluice: a payload of % bytes is over the limit of % bytes for roles that do not own %',
      _size, _limit, TG_RELID::regclass
      USING ERRCODE = 'program_limit_exceeded',
            HINT = 'The owner can raise it: SELECT <schema>.set_max_payload_bytes(<bytes>).';
  END IF;
  RETURN NEW;
END;
$$$body$, '__LIMIT__', _bytes::text);
  RETURN _bytes;
END;
$fn$;
REVOKE ALL ON FUNCTION :SCHEMA.set_max_payload_bytes(bigint) FROM PUBLIC;

-- The limit an owner pinned before (1 MiB unless changed) carries over; CREATE OR
-- REPLACE drops the SET clause.
SELECT :SCHEMA.set_max_payload_bytes(coalesce(
  (SELECT substr(c, length('sluice.max_payload_bytes=') + 1)::bigint
   FROM pg_proc p, unnest(p.proconfig) c
   WHERE p.proname = 'check_payload_limit'
     AND p.pronamespace = (SELECT typnamespace FROM pg_type WHERE oid = pg_typeof(NULL:::SCHEMA.jobs))
     AND c LIKE 'sluice.max_payload_bytes=%'),
  1048576));
