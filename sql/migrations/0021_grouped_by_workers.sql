-- A queue becomes grouped when a worker first claims one of its grouped jobs, no
-- longer from the transaction that enqueued it.
--
-- mark_grouped_queue() (0016, a row trigger since 0020) wrote the queue's row in
-- the enqueuing transaction, and held that row's lock until the transaction
-- ended. Enqueues run in the caller's own transactions, which can be long (an
-- import, a request), so the first grouped job of a queue made every other
-- grouped enqueue into it wait, could deadlock two transactions that each
-- grouped two queues in opposite order, stopped the claims of a limited queue
-- (claim_queue() locks that row too, and passes a queue whose row it cannot
-- lock) and made `sluice queues pause` hang, all until the caller committed
-- (found by an outside review, 2026-12-01).
--
-- Now nothing is written at enqueue. A worker whose claim returns a grouped job
-- of a queue not known to be grouped calls mark_queue_grouped() in a statement
-- of its own (src/worker/grouped-queues.ts): the queue is flagged, and the
-- workers re-read the queues table, from then on claiming it round-robin. Until
-- then its jobs are claimed in the common order: the claims that find the
-- first grouped jobs take them first come, first served (at most one batch per
-- worker). Group settings still flag a queue at once (setQueueGroups and the
-- others, by an admin, in their own statements).
DROP TRIGGER jobs_mark_grouped ON :SCHEMA.jobs;
DROP FUNCTION :SCHEMA.mark_grouped_queue();

-- Owner's rights, because workers may not write the queues table's settings; the
-- channel is the worker's (channelFor in src/db/identifiers.ts). True when this
-- call flagged the queue. Only a queue that has a grouped job pending or running
-- is flagged (an index probe of jobs_group_dequeue_idx or jobs_group_processing_idx):
-- the worker role cannot flag, or create, any other.
CREATE FUNCTION :SCHEMA.mark_queue_grouped(_queue text, _channel text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF EXISTS (SELECT FROM :SCHEMA.queues q WHERE q.name = _queue AND q.grouped) THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (SELECT FROM :SCHEMA.jobs j WHERE j.queue = _queue AND j.status = 'processing' AND j.group_key IS NOT NULL)
     AND NOT EXISTS (SELECT FROM :SCHEMA.jobs j WHERE j.queue = _queue AND j.status = 'pending' AND j.group_key IS NOT NULL) THEN
    RETURN false;
  END IF;
  INSERT INTO :SCHEMA.queues AS q (name, grouped) VALUES (_queue, true)
  ON CONFLICT (name) DO UPDATE SET grouped = true, updated_at = now() WHERE NOT q.grouped;
  PERFORM pg_notify(_channel, '{"c":"queues"}');
  RETURN true;
END;
$$;
REVOKE ALL ON FUNCTION :SCHEMA.mark_queue_grouped(text, text) FROM PUBLIC;
