-- lock_outbox_keys(VARIADIC keys): the order locks of message keys, for producers
-- whose transactions overlap and publish for the same key.
--
-- The relay publishes in the order in which transactions took their ids (see the
-- README's outbox limits), which is commit order within a key only if a producer
-- takes its id after the previous producer of that key committed. An advisory lock
-- taken before the transaction's first write does that: it takes no transaction id,
-- so the id comes after the lock is granted, and the lock is held until COMMIT.
-- Taken after a write it is too late, and silently so: refused instead.
--
-- The lock space is this schema's outbox (its row type's oid, which needs no
-- privilege on the table): advisory locks are database-wide,
-- and a key of one schema must not hold the same key of another. Keys are locked
-- by their hash, in order, so two producers of the same keys cannot deadlock.
-- NULL keys (messages that ask for no order) are skipped.
CREATE FUNCTION :SCHEMA.lock_outbox_keys(VARIADIC keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  _hash integer;
BEGIN
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'lock_outbox_keys: this transaction has already written or locked a row; lock the keys before its first write, or its messages can be published out of commit order'
      USING ERRCODE = '55000';
  END IF;
  FOR _hash IN SELECT DISTINCT hashtext(k) AS h FROM unnest(keys) AS k WHERE k IS NOT NULL ORDER BY h LOOP
    PERFORM pg_advisory_xact_lock(pg_typeof(CAST(NULL AS :SCHEMA.outbox))::oid::integer, _hash);
  END LOOP;
END
$$;
