-- Unique job keys, error history, results and progress, outcome notifications,
-- and recurring (cron) schedules.

ALTER TABLE :SCHEMA.jobs
  -- The caller's deduplication key (kept for inspection after it stops counting).
  ADD COLUMN job_key text,
  -- Whether job_key still blocks other jobs with the same key:
  --   'pending'  held while the job waits for its first run; the claim releases it
  --   'active'   held while the job is pending or processing (also across retries)
  --   'released' no longer held
  -- A job's key can only ever be given up, never taken back, by the statements
  -- workers run (claim, retry, release, rescue). That is what keeps those updates
  -- from ever violating jobs_job_key_idx; only an INSERT can take a key.
  ADD COLUMN key_scope text,
  -- One entry per failed attempt: {attempt, at, message, stack}. last_error keeps
  -- the newest one as text.
  ADD COLUMN errors jsonb NOT NULL DEFAULT '[]'::jsonb,
  -- What the handler returned (JSON), and the last progress it reported.
  ADD COLUMN result jsonb,
  ADD COLUMN progress jsonb,
  -- Set by Queue.waitFor(): the statement that finishes this job also sends a
  -- NOTIFY on 'sluice:<schema>:done'. Jobs nobody waits for cost no notification.
  ADD COLUMN notify_on_finish boolean NOT NULL DEFAULT false,
  ADD CONSTRAINT jobs_job_key_check CHECK (length(job_key) BETWEEN 1 AND 512),
  ADD CONSTRAINT jobs_key_scope_check CHECK (
    (job_key IS NULL AND key_scope IS NULL)
    OR (job_key IS NOT NULL AND key_scope IN ('pending', 'active', 'released')));

-- At most one job per key holds it. Partial, so jobs without a key and finished jobs
-- never enter it. Enqueue relies on it with INSERT ... ON CONFLICT: two concurrent
-- enqueues of one key serialise on the index entry instead of both inserting.
-- Keep the WHERE clause identical to the ON CONFLICT clause in enqueue_job().
CREATE UNIQUE INDEX jobs_job_key_idx ON :SCHEMA.jobs (job_key)
  WHERE key_scope IN ('pending', 'active') AND status IN ('pending', 'processing');

-- Enqueue from plain SQL, now with an optional key. The old call forms still work
-- (the new parameters come last and have defaults); the old function is dropped
-- first because a second overload with all-default parameters would make every
-- existing call ambiguous.
--   SELECT sluice.enqueue_job('default', '{"task":"sync_user","id":7}', _job_key => 'sync_user:7');
-- _job_key_mode says what happens when another job holds the key:
--   'keep'    leave it, return its id (default)
--   'replace' give the pending holder this payload and run_at, return its id
--             (a holder that is already running is left alone, as with 'keep')
--   'error'   raise unique_violation (SQLSTATE 23505, constraint jobs_job_key_idx)
-- _job_key_while_processing: also hold the key while the job runs (and between
-- its retries), not only until it first starts.
DROP FUNCTION :SCHEMA.enqueue_job(text, jsonb, timestamptz, integer, text, integer);

CREATE FUNCTION :SCHEMA.enqueue_job(
  _queue text,
  _payload jsonb,
  _run_at timestamptz DEFAULT clock_timestamp(),
  _max_attempts integer DEFAULT 5,
  _task text DEFAULT NULL,
  _priority integer DEFAULT 0,
  _job_key text DEFAULT NULL,
  _job_key_mode text DEFAULT 'keep',
  _job_key_while_processing boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  _id bigint;
  _status text;
  _held_queue text;
  _rel oid;
  _name text := coalesce(_task, _payload->>'task');
  _when timestamptz := coalesce(_run_at, clock_timestamp());
  _scope text := CASE WHEN _job_key_while_processing THEN 'active' ELSE 'pending' END;
BEGIN
  IF _name IS NULL OR _name = '' THEN
    RAISE EXCEPTION 'sluice.enqueue_job: no task name (pass _task or put "task" in the payload)'
      USING ERRCODE = '22023';
  END IF;
  IF _job_key IS NULL THEN
    INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority)
    VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), _when, coalesce(_max_attempts, 5), coalesce(_priority, 0))
    RETURNING id INTO _id;
    RETURN _id;
  END IF;
  IF _job_key_mode IS NULL OR _job_key_mode NOT IN ('keep', 'replace', 'error') THEN
    RAISE EXCEPTION 'sluice.enqueue_job: _job_key_mode must be keep, replace or error, got %', _job_key_mode
      USING ERRCODE = '22023';
  END IF;
  -- Insert, or find who holds the key. The holder can finish between the two
  -- steps (then the key is free and the next round inserts), so loop; a few rounds
  -- are plenty, the bound only guards against a snapshot that never sees the
  -- holder (REPEATABLE READ raises a serialization failure before that anyway).
  FOR _round IN 1..10 LOOP
    INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority, job_key, key_scope)
    VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), _when, coalesce(_max_attempts, 5),
            coalesce(_priority, 0), _job_key, _scope)
    ON CONFLICT (job_key) WHERE key_scope IN ('pending', 'active') AND status IN ('pending', 'processing')
    DO NOTHING
    RETURNING id INTO _id;
    IF _id IS NOT NULL THEN
      RETURN _id;
    END IF;

    IF _job_key_mode = 'replace' THEN
      -- Only a job that has not started can take a new payload. The row lock
      -- makes a concurrent claim wait (or skip it), so a worker never runs a
      -- half-replaced job.
      UPDATE :SCHEMA.jobs
      SET payload = coalesce(_payload, '{}'::jsonb), run_at = _when, updated_at = clock_timestamp()
      WHERE job_key = _job_key AND key_scope IN ('pending', 'active') AND status = 'pending'
      RETURNING id, queue, tableoid INTO _id, _held_queue, _rel;
      IF _id IS NOT NULL THEN
        -- An UPDATE fires no insert trigger: wake the queue's workers for the new
        -- run_at ourselves, on the channel the trigger uses ('sluice:' || schema;
        -- the schema is looked up from the row's table, never spliced into text).
        PERFORM pg_notify('sluice:' || n.nspname,
          json_build_object('q', _held_queue, 't', floor(extract(epoch FROM _when) * 1000))::text)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = _rel;
        RETURN _id;
      END IF;
    END IF;

    SELECT id, status INTO _id, _status FROM :SCHEMA.jobs
    WHERE job_key = _job_key AND key_scope IN ('pending', 'active') AND status IN ('pending', 'processing');
    IF _id IS NOT NULL THEN
      IF _job_key_mode = 'error' THEN
        RAISE EXCEPTION 'sluice.enqueue_job: job % already holds key %', _id, _job_key
          USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_job_key_idx',
                DETAIL = format('existing job id: %s', _id);
      END IF;
      RETURN _id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'sluice.enqueue_job: could not insert or find the holder of key %', _job_key
    USING ERRCODE = '40001';
END;
$$;

-- Recurring schedules. Schedules are defined in code; each worker that has them
-- writes their definitions here at start (so `sluice cron list` can show them) and
-- enqueues their ticks. last_tick is the newest tick already enqueued: a worker
-- enqueues ticks only in the transaction that moves last_tick past them, with the
-- row locked, so each tick becomes exactly one job however many workers run, and a
-- restart carries on from last_tick (optionally backfilling what it missed).
CREATE TABLE :SCHEMA.cron_schedules (
  name         text PRIMARY KEY,
  cron         text        NOT NULL,
  timezone     text        NOT NULL,
  task         text        NOT NULL,
  queue        text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}'::jsonb,
  priority     integer     NOT NULL DEFAULT 0,
  max_attempts integer     NOT NULL DEFAULT 5,
  backfill     integer     NOT NULL DEFAULT 0,
  last_tick    timestamptz NOT NULL,
  next_tick    timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT cron_schedules_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT cron_schedules_backfill_check CHECK (backfill BETWEEN 0 AND 1000)
);
