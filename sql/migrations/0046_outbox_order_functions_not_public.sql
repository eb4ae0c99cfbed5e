-- The outbox's commit-order functions (0039) are no longer PUBLIC's to call.
--
-- queue_outbox_commit_order() and order_outbox_commit() run with the owner's
-- rights (a publishing role may insert messages, not update them), and a new
-- function may be executed by PUBLIC. Any role with USAGE on the schema
-- (sluice_worker, sluice_enqueue, an application's own) could call them directly:
-- lock any outbox message (the UPDATE that changes nothing), stalling the relay
-- behind it, tell whether a (destination, txid, id) exists, and set a setting
-- of its choice as the owner, a superuser where the schema was migrated as one
-- (outside review 239). They are now granted to sluice_outbox_publish alone
-- (sql/roles.sql did so already), and the owner keeps them. The insert and
-- update triggers that call them run with the rights of whoever writes the
-- outbox: a role that publishes without sluice_outbox_publish needs the same
-- grants (see README, "Security and least privilege").
--
-- queue_outbox_commit_order() also sets only its own settings now, whoever calls it.

CREATE OR REPLACE FUNCTION :SCHEMA.queue_outbox_commit_order(_destination text, _txid xid8, _id bigint, _done text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF _done NOT LIKE 'sluice.outbox\_ordered\_%' THEN
    RAISE EXCEPTION 'queue_outbox_commit_order: % is not a setting of the outbox''s commit order', _done
      USING ERRCODE = '22023';
  END IF;
  PERFORM set_config(_done, '9223372036854775807', true);
  UPDATE :SCHEMA.outbox SET txid = txid WHERE destination = _destination AND txid = _txid AND id = _id;
  IF NOT FOUND THEN
    -- Moved already, by the step at an earlier statement's end (SET CONSTRAINTS
    -- ... IMMEDIATE): nothing to queue on, so the step runs now.
    PERFORM set_config(_done, greatest(_id, :SCHEMA.order_outbox_commit())::text, true);
  END IF;
END;
$$;

-- A publishing role set up by a roles.sql older than 0039 had these from PUBLIC
-- only: given them here, so that its keyed messages still commit.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_outbox_publish')
     AND has_table_privilege('sluice_outbox_publish', (SELECT typrelid FROM pg_type WHERE oid = pg_typeof(NULL:::SCHEMA.outbox)), 'INSERT') THEN
    GRANT EXECUTE ON FUNCTION :SCHEMA.queue_outbox_commit_order(text, xid8, bigint, text),
      :SCHEMA.order_outbox_commit() TO sluice_outbox_publish;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION :SCHEMA.queue_outbox_commit_order(text, xid8, bigint, text), :SCHEMA.order_outbox_commit()
  FROM PUBLIC;
