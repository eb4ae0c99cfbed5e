-- lock_outbox_keys(VARIADIC keys): the order locks of message keys, for producers
-- whose transactions overlap and publish for the same key.
--
-- The relay publishes in the order in which transactions took their ids (see the
-- README's outbox limits), which is commit order within a key only if a producer
-- takes its id after the previous producer of that key committed. An advisory lock
-- taken before the transaction has an id does that: taking it assigns none, so
-- the id comes after the lock is granted, and the lock is held until COMMIT.
-- Refused, so that the mistake shows:
-- - once the transaction has its id (a write, a row lock, and now and then a
--   sequence's nextval(), which logs ahead every 32 values): too late to help;
-- - a second time in one transaction: keys locked call by call, in different
--   orders by different producers, deadlock. One call sorts all of them.
--
-- The lock space is this schema's outbox (its row type's oid, which needs no
-- privilege on the table): advisory locks are database-wide, and a key of one
-- schema must not hold the same key of another. Keys are locked by their hash, in
-- order. NULL keys (messages that ask for no order) are skipped. Keys are checked
-- as publish() checks them (length, line breaks), and at most 1,000 are taken: each
-- is a lock held to the end of the transaction in the server's shared lock table.
CREATE FUNCTION :SCHEMA.lock_outbox_keys(VARIADIC keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  _space integer := pg_typeof(CAST(NULL AS :SCHEMA.outbox))::oid::integer;
  -- Set for the rest of the transaction (and undone with a savepoint rolled back,
  -- as the locks taken in it are released).
  _called text := 'sluice.outbox_keys_locked_' || abs(_space::bigint);
  _hash integer;
BEGIN
  -- No key, no lock: such a call does not use up the transaction's one call.
  IF NOT EXISTS (SELECT FROM unnest(keys) AS k WHERE k IS NOT NULL) THEN
    RETURN;
  END IF;
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'lock_outbox_keys: this transaction already has a transaction id (it wrote or locked a row, or drew from a sequence): lock the keys before anything else, or its messages can be published out of commit order'
      USING ERRCODE = '55000';
  END IF;
  IF current_setting(_called, true) = 'on' THEN
    RAISE EXCEPTION 'lock_outbox_keys: this transaction locked keys already: lock all of them in one call (keys locked call by call can deadlock)'
      USING ERRCODE = '55000';
  END IF;
  IF cardinality(keys) > 1000 THEN
    RAISE EXCEPTION 'lock_outbox_keys: at most 1000 keys at once, got %', cardinality(keys) USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT FROM unnest(keys) AS k WHERE length(k) > 1024) THEN
    RAISE EXCEPTION 'lock_outbox_keys: a key is longer than 1024 characters' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT FROM unnest(keys) AS k WHERE k ~ '[\r\n]') THEN
    RAISE EXCEPTION 'lock_outbox_keys: a key contains a line break' USING ERRCODE = '22023';
  END IF;
  PERFORM set_config(_called, 'on', true);
  FOR _hash IN SELECT DISTINCT hashtext(k) AS h FROM unnest(keys) AS k WHERE k IS NOT NULL ORDER BY h LOOP
    PERFORM pg_advisory_xact_lock(_space, _hash);
  END LOOP;
END
$$;
