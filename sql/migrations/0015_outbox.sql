-- The transactional outbox (issue 17): a message written in the caller's
-- transaction, published to a broker (NATS JetStream, RabbitMQ) by a relay once
-- that transaction has committed. See docs/proposed/outbox.md for the design.
--
-- Order and the watermark. A bigserial id is not a safe watermark: id N+1 can
-- commit before id N, and a relay that moved past N+1 would never see N. Each
-- row records the transaction that wrote it (txid, an xid8 that never wraps) and
-- the relay reads only rows whose txid is below the xmin of its snapshot: every
-- transaction below that horizon has ended, so no row can ever appear behind a
-- position the relay has passed. The relay walks (txid, id) upwards and records
-- how far it got once per batch, never per message.
--
-- The primary key is that walk: (destination, txid, id). It is the only index, so
-- a publish costs one index insert; the relay's read is one range scan of it.
-- Published rows are deleted in bulk behind the slowest partition's watermark;
-- autovacuum is told to come after a fixed number of dead rows (not a fraction
-- of the table), so the space is reused and the table stays the size of the
-- backlog.
CREATE TABLE :SCHEMA.outbox (
  id          bigint GENERATED ALWAYS AS IDENTITY,
  txid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
  destination text NOT NULL CHECK (length(destination) BETWEEN 1 AND 255),
  key         text CHECK (key IS NULL OR length(key) <= 1024),
  headers     jsonb CHECK (headers IS NULL OR jsonb_typeof(headers) = 'object'),
  payload     bytea NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (destination, txid, id)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000);

-- One row per destination and partition: how far its relay got (the watermark),
-- and who relays it (a lease, renewed by the same UPDATE that moves the
-- watermark). Updated once per batch; fillfactor leaves room for HOT updates.
CREATE TABLE :SCHEMA.outbox_relays (
  destination  text NOT NULL,
  partition    integer NOT NULL CHECK (partition >= 0 AND partition < partitions),
  partitions   integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
  txid         xid8 NOT NULL DEFAULT '0',
  id           bigint NOT NULL DEFAULT 0,
  holder       text,
  expires_at   timestamptz,
  published    bigint NOT NULL DEFAULT 0,
  published_at timestamptz,
  PRIMARY KEY (destination, partition)
) WITH (fillfactor = 50);

-- Only messages the broker refused get a row here (their tries so far); a
-- message that keeps failing moves to outbox_dead_letters and its key goes on.
CREATE TABLE :SCHEMA.outbox_failures (
  id             bigint PRIMARY KEY,
  destination    text NOT NULL,
  attempts       integer NOT NULL,
  last_error     text,
  last_failed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE :SCHEMA.outbox_dead_letters (
  id          bigint PRIMARY KEY,
  txid        xid8 NOT NULL,
  destination text NOT NULL,
  key         text,
  headers     jsonb,
  payload     bytea NOT NULL,
  created_at  timestamptz NOT NULL,
  attempts    integer NOT NULL,
  last_error  text,
  dead_at     timestamptz NOT NULL DEFAULT now()
);

-- Wakes the relays of the destinations a statement wrote to, at COMMIT. Once per
-- statement (a bulk publish is one notification per destination), at most 32
-- destinations per statement: more is rare, and the relays' poll finds the rest.
-- The channel is 'sluice:<schema>:out' (<= 61 bytes for a 50-byte schema).
CREATE FUNCTION :SCHEMA.notify_outbox_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA || ':out', d.destination)
    FROM (SELECT DISTINCT destination FROM new_messages LIMIT 32) d;
  RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON :SCHEMA.outbox
  REFERENCING NEW TABLE AS new_messages
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.notify_outbox_inserted();

-- publish() for triggers and other languages: the message commits or rolls back
-- with the calling transaction. The payload is bytes, text (stored as UTF-8) or
-- jsonb (stored as its text); a quoted literal resolves to the text form.
CREATE FUNCTION :SCHEMA.publish(destination text, payload bytea, key text DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO :SCHEMA.outbox (destination, key, headers, payload)
  VALUES (destination, key, headers, payload)
  RETURNING id
$$;

CREATE FUNCTION :SCHEMA.publish(destination text, payload text, key text DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
  SELECT :SCHEMA.publish(destination, convert_to(payload, 'UTF8'), key, headers)
$$;

CREATE FUNCTION :SCHEMA.publish(destination text, payload jsonb, key text DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
  SELECT :SCHEMA.publish(destination, convert_to(payload::text, 'UTF8'), key, headers)
$$;
