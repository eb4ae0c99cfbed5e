-- A random identity for each schema's outbox, which the relay puts in every
-- message id: `<schema>:<identity>:<id>`.
--
-- The ids were `<schema>:<id>`, and JetStream drops a message whose id it saw
-- within the stream's duplicate window. Two databases with the default schema
-- publishing into one stream, or a schema dropped and made again, gave new
-- messages the ids of others published a moment before: JetStream dropped them
-- as duplicates and the relay counted them published (outside review 74). A
-- database restored from a backup keeps its identity: see the README.
CREATE TABLE :SCHEMA.outbox_identity (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  id       uuid NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO :SCHEMA.outbox_identity DEFAULT VALUES;
