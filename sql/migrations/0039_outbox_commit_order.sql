-- Commit order within a key, without lock_outbox_keys() (issue 17).
--
-- The relay walks (txid, id): the order in which transactions took their ids. Two
-- producers of one key that overlap can commit in the other order (the one that
-- took its id first waits, say, for a row the other holds), and their messages
-- were published against commit order unless both called lock_outbox_keys()
-- before writing anything (migration 0032).
--
-- Now each transaction puts its keyed messages in order as it commits, in a
-- deferred trigger (it runs inside COMMIT, before the commit is visible, after the
-- deferred triggers queued before it: see queue_outbox_commit_order below):
-- 1. It locks its keys (a hash bucket of each; at most 256 locks however many
--    keys) in one sorted order, so two committing transactions cannot deadlock on
--    them. The locks are held until the commit is visible to everyone, so the next
--    committer of the key waits here until this one has committed.
-- 2. In the next statement (a new snapshot, so it sees every transaction that
--    committed before the locks were granted) it looks for committed messages of
--    its keys with a later txid: those committed first and must go first. If there
--    are any, its own messages of that key move to just past the latest of them
--    (txid + 1), keeping their ids (the message id a broker sees) and their order.
--
-- The watermark stays sound: a message only ever moves to a txid above its own
-- transaction's, so it is final once the horizon passes it (its transaction
-- having ended by then), and the relay cannot have passed it while the
-- transaction ran. A txid + 1 that no transaction has taken yet cannot hold the
-- horizon below it for long: the message at txid comes first in the walk, and the
-- relay's update of its watermark after publishing it takes a txid above it.
--
-- Only READ COMMITTED (Postgres's default) transactions are put in order: under
-- REPEATABLE READ and SERIALIZABLE the transaction's snapshot cannot see what
-- committed while it ran (and a serializable read of the outbox would add
-- serialization failures); those keep lock_outbox_keys().
--
-- Messages without a key ask for no order and are left out, as is every part
-- of this for them: the index is partial.
CREATE INDEX outbox_keyed_by_txid ON :SCHEMA.outbox (txid) WHERE key IS NOT NULL;

-- A message moved behind another (below) says so: at a txid it can share with a
-- transaction that is still running, it must not pass for one of that
-- transaction's own. (Telling them apart by xmin failed: a message moved inside a
-- savepoint carries the savepoint's xid, which can come after the txid it was
-- moved to; outside review 140.) Adding it with a constant default rewrites nothing.
ALTER TABLE :SCHEMA.outbox ADD COLUMN moved boolean NOT NULL DEFAULT false;

-- Owner's rights: a publishing role may insert messages but not update them.
-- Generic plans, and no sequential scan: planning these statements at every
-- COMMIT cost more than running them, and a generic plan guesses that a third of
-- the table lies at or past this transaction's txid (it is the few messages
-- written since), which on a large backlog would read the whole table; the
-- index on txid is always the way. No nested loop: the plan guesses a handful of
-- messages at this txid (they are too new for the statistics), and a bulk publish
-- to move joined each of its messages against all the others, 13 s at COMMIT for
-- 10,000 (outside review 139); hash joins keep it linear.
CREATE FUNCTION :SCHEMA.order_outbox_commit() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
SET enable_nestloop = off AS $$
DECLARE
  -- A lock space of its own (lock_outbox_keys() uses the outbox's row type), so
  -- that these short locks never wait behind keys a producer holds for its whole
  -- transaction, nor the other way round.
  _space integer := pg_typeof(CAST(NULL AS :SCHEMA.outbox_relays))::oid::integer;
  _me xid8 := pg_current_xact_id();
  _upto bigint;
  _buckets integer[];
  _bucket integer;
  _count bigint;
  _destination text;
  _key text;
  _last xid8;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RETURN 9223372036854775807;
  END IF;
  -- A plain aggregate (DISTINCT in one sorts): no hash table sized by a guess.
  SELECT max(m.id), count(*), array_agg(DISTINCT hashtext(m.key) & 255) INTO _upto, _count, _buckets
    FROM :SCHEMA.outbox m
    WHERE m.txid = _me AND m.key IS NOT NULL AND NOT m.moved;
  IF _upto IS NULL THEN
    RETURN 0; -- none left at its txid: moved at an earlier statement
  END IF;
  -- In one (sorted) order in every transaction: no deadlock between two COMMITs.
  FOREACH _bucket IN ARRAY _buckets LOOP
    PERFORM pg_advisory_xact_lock(_space, _bucket);
  END LOOP;
  -- From here on each statement sees every transaction that committed before the
  -- locks were granted. Later: a message at this transaction's txid or above that
  -- it did not just write (moved there, or its own moved at an earlier statement).
  IF _count <= 8 THEN
    -- A few messages: one look for each along its destination's part of the
    -- primary key (a key twice is looked at twice: the second finds nothing to move).
    FOR _destination, _key IN
      SELECT m.destination, m.key FROM :SCHEMA.outbox m
      WHERE m.txid = _me AND m.key IS NOT NULL AND NOT m.moved
    LOOP
      SELECT max(c.txid) INTO _last FROM :SCHEMA.outbox c
        WHERE c.destination = _destination AND c.txid >= _me AND c.key = _key
          AND (c.txid > _me OR c.moved);
      IF _last IS NOT NULL THEN
        UPDATE :SCHEMA.outbox o SET txid = (_last::text::numeric + 1)::text::xid8, moved = true
          WHERE o.destination = _destination AND o.txid = _me AND o.key = _key
            AND NOT o.moved;
      END IF;
    END LOOP;
  ELSE
    -- Many (a bulk publish): one range scan and one hash join, not one scan per key.
    WITH mine AS MATERIALIZED (
      SELECT DISTINCT m.destination, m.key FROM :SCHEMA.outbox m
      WHERE m.txid = _me AND m.key IS NOT NULL AND NOT m.moved
    ), later AS MATERIALIZED (
      SELECT c.destination, c.key, max(c.txid) AS last FROM :SCHEMA.outbox c
      WHERE c.txid >= _me AND c.key IS NOT NULL AND (c.txid > _me OR c.moved)
      GROUP BY c.destination, c.key
    )
    UPDATE :SCHEMA.outbox o SET txid = (l.last::text::numeric + 1)::text::xid8, moved = true
    FROM later l JOIN mine USING (destination, key)
    WHERE o.txid = _me AND o.key IS NOT NULL AND NOT o.moved
      AND o.destination = l.destination AND o.key = l.key;
  END IF;
  RETURN _upto;
END;
$$;

-- The step runs last at COMMIT, after every deferred check queued before it (a
-- deferred foreign key's, say): a check that waits for another transaction's row
-- while this one holds its keys' locks would deadlock with that transaction's
-- COMMIT waiting for them (outside review 138). So the first keyed message's
-- trigger at COMMIT only queues the step, with an UPDATE that changes nothing:
-- triggers queued while COMMIT fires the deferred ones fire after all of them.
-- _done names the setting that holds the highest message id the step has covered
-- so far in this transaction (the largest bigint while the step is queued, so the
-- other messages' triggers return at once).
CREATE FUNCTION :SCHEMA.queue_outbox_commit_order(_destination text, _txid xid8, _id bigint, _done text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM set_config(_done, '9223372036854775807', true);
  UPDATE :SCHEMA.outbox SET txid = txid WHERE destination = _destination AND txid = _txid AND id = _id;
  IF NOT FOUND THEN
    -- Moved already, by the step at an earlier statement's end (SET CONSTRAINTS
    -- ... IMMEDIATE): nothing to queue on, so the step runs now.
    PERFORM set_config(_done, greatest(_id, :SCHEMA.order_outbox_commit())::text, true);
  END IF;
END;
$$;

-- Fired for each keyed message at COMMIT (at each statement's end under SET
-- CONSTRAINTS ... IMMEDIATE): queues the step once for the messages written
-- since it last ran, and returns at once for the rest.
CREATE FUNCTION :SCHEMA.queue_outbox_commit_order_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  _done text := 'sluice.outbox_ordered_' || abs(TG_RELID::bigint);
BEGIN
  IF NEW.id > coalesce(nullif(pg_catalog.current_setting(_done, true), '')::bigint, 0) THEN
    PERFORM :SCHEMA.queue_outbox_commit_order(NEW.destination, NEW.txid, NEW.id, _done);
  END IF;
  RETURN NULL;
END;
$$;

-- The step itself, fired by the UPDATE that changes nothing (the step's own
-- UPDATE moves txid and fires nothing); idempotent.
CREATE FUNCTION :SCHEMA.order_outbox_commit_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.set_config('sluice.outbox_ordered_' || abs(TG_RELID::bigint), :SCHEMA.order_outbox_commit()::text, true);
  RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER outbox_commit_order_queue AFTER INSERT ON :SCHEMA.outbox
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.key IS NOT NULL)
  EXECUTE FUNCTION :SCHEMA.queue_outbox_commit_order_trigger();

CREATE CONSTRAINT TRIGGER outbox_commit_order AFTER UPDATE OF txid ON :SCHEMA.outbox
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.txid = NEW.txid)
  EXECUTE FUNCTION :SCHEMA.order_outbox_commit_trigger();
