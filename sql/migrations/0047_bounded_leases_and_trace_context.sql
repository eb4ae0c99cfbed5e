-- Two limits on what a role that does not own the schema may write (outside review 266).
--
-- A lease reaches at most an hour ahead, the longest maintenance.leaseMs. The
-- worker role may write the leader table (it takes and renews the leases), and a
-- row written by hand with expires_at a hundred years ahead held the maintenance
-- and pruner leases for ever: no rescue, no pruning, and no worker could take
-- them over. Now such a lease ends within the hour like any other.
--
-- A job's trace_context is at most 16 KiB of JSON: W3C traceparent, tracestate (512
-- bytes) and baggage (8 KiB) fit. The enqueue role may insert the column, and a
-- 64 MB one went in, past the 1 MiB payload limit, for workers to load. NOT
-- VALID: rows already there are not read again; every new or changed row is checked.

CREATE OR REPLACE FUNCTION :SCHEMA.bound_lease() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NEW.expires_at > now() + interval '1 hour' THEN
    RAISE EXCEPTION 'sluice: a % lease may reach at most an hour ahead (expires_at %)', NEW.role, NEW.expires_at
      USING ERRCODE = 'check_violation',
            DETAIL = 'Leases are taken and renewed by workers for maintenance.leaseMs, at most 3600000 ms.';
  END IF;
  RETURN NEW;
END;
$$;

-- A lease written so already ends within the hour.
UPDATE :SCHEMA.leader SET expires_at = now() + interval '1 hour' WHERE expires_at > now() + interval '1 hour';

CREATE TRIGGER leader_bound_lease BEFORE INSERT OR UPDATE ON :SCHEMA.leader
  FOR EACH ROW EXECUTE FUNCTION :SCHEMA.bound_lease();

ALTER TABLE :SCHEMA.jobs ADD CONSTRAINT jobs_trace_context_size
  CHECK (trace_context IS NULL OR octet_length(trace_context::text) <= 16384) NOT VALID;
