-- One builder for the wake-up payload.
--
-- A wake-up tells the workers LISTENing on the schema's channel ('sluice:' ||
-- schema) that a queue has jobs due from some time on: {"q": queue, "t": run_at
-- in ms since the epoch, floored}. Every sender used to build that JSON itself:
-- the insert trigger (0001, 0004), enqueue_job()'s 'replace' path (0002), and
-- the wake, notify and watchJob statements of src/db/statements/. They all call
-- wake_payload() now, and src/notify/codec.ts is the one reader of what it
-- writes. The text is the same as before (json_build_object's spacing and all),
-- so workers of the previous release read it unchanged.
--
-- STABLE, not IMMUTABLE: json_build_object and extract on a timestamptz are
-- only STABLE. A plain SQL function like this one is inlined where it is called.
-- EXECUTE is granted to PUBLIC by default, so the roles of sql/roles.sql can call
-- it (the insert trigger runs it with the rights of whoever inserts).
CREATE FUNCTION :SCHEMA.wake_payload(_queue text, _run_at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT json_build_object('q', _queue, 't', floor(extract(epoch FROM _run_at) * 1000))::text
$$;

-- The insert trigger as in 0004 (deferred wake-ups skipped), with the payload from
-- wake_payload().
CREATE OR REPLACE FUNCTION :SCHEMA.notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  IF current_setting('sluice.wake', true) = 'deferred' THEN
    RETURN NULL;
  END IF;
  FOR r IN
    SELECT queue, min(run_at) AS run_at FROM new_jobs WHERE status = 'pending' GROUP BY queue
  LOOP
    PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA, :SCHEMA.wake_payload(r.queue, r.run_at));
  END LOOP;
  RETURN NULL;
END;
$$;

-- enqueue_job() as in 0002; only the wake-up of the 'replace' path changed. Same
-- signature and defaults, so CREATE OR REPLACE keeps every grant on it.
CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_job(
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
        PERFORM pg_notify('sluice:' || n.nspname, :SCHEMA.wake_payload(_held_queue, _when))
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
