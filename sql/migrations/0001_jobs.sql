-- Sluice core schema. The schema placeholder is replaced by the quoted schema name
-- when the migration is applied, so one database can hold several independent
-- queues. Never in a comment: a name with a line break would end the comment
-- (outside review 171; src/migrate.ts refuses a migration that does it).

CREATE TABLE :SCHEMA.jobs (
  id           bigserial PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default',
  task         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}'::jsonb,
  status       text        NOT NULL DEFAULT 'pending',
  priority     integer     NOT NULL DEFAULT 0,
  run_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  attempts     integer     NOT NULL DEFAULT 0,
  max_attempts integer     NOT NULL DEFAULT 5,
  -- locked_at is the heartbeat of the worker that holds the job; locked_by names
  -- that worker instance. A completion only counts if locked_by and attempts still
  -- match the claim, so a worker whose lock was taken away cannot finish the job.
  locked_at    timestamptz,
  locked_by    text,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at  timestamptz,
  CONSTRAINT jobs_status_check CHECK (status IN ('pending', 'processing', 'completed', 'failed', 'cancelled')),
  CONSTRAINT jobs_queue_check CHECK (length(queue) BETWEEN 1 AND 128),
  CONSTRAINT jobs_task_check CHECK (length(task) BETWEEN 1 AND 128),
  CONSTRAINT jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000)
);

-- Exactly the dequeue scan: due pending jobs of one queue in priority/FIFO order.
-- Partial, so finished jobs never enter it and it stays small.
CREATE INDEX jobs_dequeue_idx ON :SCHEMA.jobs (queue, priority DESC, run_at, id)
  WHERE status = 'pending';

-- The rescuer looks for processing jobs whose heartbeat stopped.
CREATE INDEX jobs_locked_idx ON :SCHEMA.jobs (locked_at) WHERE status = 'processing';

-- Every claim and completion rewrites a row. Leaving free space on each page lets
-- Postgres keep the new version on the same page (cheaper, less index churn), and
-- vacuuming on a fixed number of dead rows instead of 20% of the table keeps a
-- large table of finished jobs from hiding a hot set full of dead tuples.
ALTER TABLE :SCHEMA.jobs SET (
  fillfactor = 80,
  autovacuum_vacuum_scale_factor = 0.0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_cost_delay = 0,
  autovacuum_analyze_scale_factor = 0.0,
  autovacuum_analyze_threshold = 5000
);

-- Wake idle workers once per INSERT statement, not once per row: one notification
-- per queue, carrying the queue name and the earliest run_at as a hint. NOTIFY is
-- transactional, so a rolled-back enqueue wakes no one. The channel includes the
-- schema so separate Sluice schemas in one database never wake each other.
CREATE FUNCTION :SCHEMA.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT queue, min(run_at) AS run_at FROM new_jobs WHERE status = 'pending' GROUP BY queue
  LOOP
    PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA,
      json_build_object('q', r.queue, 't', floor(extract(epoch FROM r.run_at) * 1000))::text);
  END LOOP;
  RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_inserted
  AFTER INSERT ON :SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.notify_jobs_inserted();

-- Enqueue from plain SQL: psql, triggers, any language.
--   SELECT sluice.enqueue_job('default', '{"task":"send_welcome","user_id":42}');
-- The task name comes from _payload->>'task' unless _task is given.
CREATE FUNCTION :SCHEMA.enqueue_job(
  _queue text,
  _payload jsonb,
  _run_at timestamptz DEFAULT clock_timestamp(),
  _max_attempts integer DEFAULT 5,
  _task text DEFAULT NULL,
  _priority integer DEFAULT 0
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  _id bigint;
  _name text := coalesce(_task, _payload->>'task');
BEGIN
  IF _name IS NULL OR _name = '' THEN
    RAISE EXCEPTION 'sluice.enqueue_job: no task name (pass _task or put "task" in the payload)'
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority)
  VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), coalesce(_run_at, clock_timestamp()),
          coalesce(_max_attempts, 5), coalesce(_priority, 0))
  RETURNING id INTO _id;
  RETURN _id;
END;
$$;
