-- publish() refuses the keys and headers that Outbox.publish refuses, and names
-- what is wrong (22023), instead of storing a message no relay can send.
--
-- Until now the SQL function stored any JSON object as headers. A header value
-- that is not a string, a line break in a value or in the key (which travels as
-- a header), or a name that is not a token (a space, a colon) passed, and the NATS
-- relay then failed on the message at every try (outside review 62). The relay
-- now makes such a message a dead letter at once (src/outbox/publishers); this
-- keeps it out of the outbox in the first place, with the same rules as the
-- JavaScript side (src/outbox/message.ts): header names are tokens, and none is
-- Sluice-Key or a Nats-* name (JetStream's controls: Nats-Rollup would purge a
-- subject, review 63); values are strings; neither values nor the key hold a
-- line break.

-- What is wrong with a message's key and headers, or NULL when nothing is.
CREATE FUNCTION :SCHEMA.outbox_message_problem(key text, headers jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN strpos(key, chr(10)) > 0 OR strpos(key, chr(13)) > 0 THEN 'key contains a line break'
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
        FROM jsonb_each(CASE WHEN jsonb_typeof(headers) = 'object' THEN headers END) h
      ) p
      WHERE problem IS NOT NULL
      LIMIT 1)
  END
$$;

-- The text and jsonb forms call this one, so they check too.
CREATE OR REPLACE FUNCTION :SCHEMA.publish(destination text, payload bytea, key text DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  problem text := :SCHEMA.outbox_message_problem(key, headers);
  new_id bigint;
BEGIN
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION 'publish: %', problem USING ERRCODE = '22023';
  END IF;
  INSERT INTO :SCHEMA.outbox AS o (destination, key, headers, payload)
  VALUES (destination, key, headers, payload)
  RETURNING o.id INTO new_id;
  RETURN new_id;
END
$$;
