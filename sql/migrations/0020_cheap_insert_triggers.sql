-- Insert triggers that cost nothing when they have nothing to do.
--
-- Two statement triggers ran on every INSERT into jobs: notify_jobs_inserted()
-- (0004/0009/0013), which returns at once for a deferred wake-up, and
-- mark_grouped_queues() (0016), which finds nothing to flag unless the rows carry
-- a group key. Each still cost a PL/pgSQL call plus a transition table: measured
-- back to back on one connection, a single deferred enqueue spent ~320 µs of
-- server CPU with both, ~290 without the second and ~205 without either.
--
-- - The wake-up trigger gets a WHEN: a statement that set sluice.wake = 'deferred'
--   (the Queue's own concurrent enqueues, migration 0004) never calls it. Same
--   function, same transition table for everyone else.
-- - Flagging a grouped queue becomes a row trigger whose WHEN looks at the row's
--   group key: jobs without a group (the common case) never call it; each grouped
--   row costs one primary-key probe of the queues table, and only the first
--   grouped row of a queue writes and notifies.
DROP TRIGGER jobs_notify_inserted ON :SCHEMA.jobs;
CREATE TRIGGER jobs_notify_inserted
  AFTER INSERT ON :SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT
  WHEN (current_setting('sluice.wake', true) IS DISTINCT FROM 'deferred')
  EXECUTE FUNCTION :SCHEMA.notify_jobs_inserted();

DROP TRIGGER jobs_mark_grouped ON :SCHEMA.jobs;
DROP FUNCTION :SCHEMA.mark_grouped_queues();

-- Owner's rights, because the roles that enqueue may not write the queues table.
CREATE FUNCTION :SCHEMA.mark_grouped_queue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF EXISTS (SELECT FROM :SCHEMA.queues q WHERE q.name = NEW.queue AND q.grouped) THEN
    RETURN NULL;
  END IF;
  INSERT INTO :SCHEMA.queues AS q (name, grouped) VALUES (NEW.queue, true)
  ON CONFLICT (name) DO UPDATE SET grouped = true, updated_at = now() WHERE NOT q.grouped;
  PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA, '{"c":"queues"}');
  RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_mark_grouped
  AFTER INSERT ON :SCHEMA.jobs
  FOR EACH ROW
  WHEN (NEW.group_key IS NOT NULL)
  EXECUTE FUNCTION :SCHEMA.mark_grouped_queue();
