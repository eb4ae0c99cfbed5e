-- publish() refuses more than 100 headers, headers taking more than 32 KiB
-- ("name: value" and a line end each), and a header name longer than 255 bytes
-- (AMQP's limit), as Outbox.publish now does (src/outbox/message.ts, MAX_HEADERS,
-- MAX_HEADER_BYTES and MAX_HEADER_NAME_BYTES).
--
-- A message with 20,000 headers (220 KB, under the message size limit) was
-- accepted; nats.js sets headers in time quadratic in their count, so each try
-- blocked the relay's event loop past its ack timeout and failed as transient,
-- for ever, holding up the message's partition (outside review 96). RabbitMQ's
-- client refuses more than 64 KiB of properties. The relays also refuse such
-- rows (written into the table past publish()) as dead letters at once.
CREATE OR REPLACE FUNCTION :SCHEMA.outbox_message_problem(key text, headers jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN jsonb_typeof(headers) <> 'object'
      THEN format('headers must be a JSON object (or NULL for none), got %s', jsonb_typeof(headers))
    ELSE coalesce(:SCHEMA.outbox_entries_problem(key, headers), (
      SELECT CASE
        WHEN count(*) > 100 THEN format('it has %s headers, more than the 100 allowed', count(*))
        WHEN max(octet_length(h.key)) > 255
          THEN format('header name %s is longer than 255 bytes',
                      to_json(left(max(h.key) FILTER (WHERE octet_length(h.key) > 255), 20) || '…'))
        WHEN sum(octet_length(h.key) + octet_length(h.value #>> '{}') + 4) > 32768
          THEN format('its headers take %s bytes, more than the 32768 allowed',
                      sum(octet_length(h.key) + octet_length(h.value #>> '{}') + 4))
      END
      FROM jsonb_each(headers) h))
  END
$$;
