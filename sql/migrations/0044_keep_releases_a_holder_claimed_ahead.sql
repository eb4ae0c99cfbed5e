-- enqueue_job() in 'keep' mode makes a holder a worker claimed ahead give its key
-- up, as 'replace' does (0024), and enqueues the caller's job.
--
-- 0042 locked a pending holder in the caller's transaction, so that it runs after
-- the commit, on the committed data. A holder claimed ahead (processing, not yet
-- written as started) was still returned: its worker may start it at any moment,
-- or may have started it already (the start is written with the worker's next
-- statement), on the data before the caller's transaction; once that committed,
-- no job was left for its change (outside review 200: under default prefetch, a
-- key's last change was never processed). Such a holder now gives its key up, as
-- if it had started, and the caller's job goes in as one of its own: at most one
-- run more for the key, never its last change lost. A holder handed back to
-- pending meanwhile is looked for again, and locked. 'error' still reports a
-- holder claimed ahead; with _job_key_while_processing it counts as running, and
-- 'keep' returns it, as before.
--
-- enqueue_job() as in 0042, with that change.

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_job(
  _queue text,
  _payload jsonb,
  _run_at timestamptz DEFAULT clock_timestamp(),
  _max_attempts integer DEFAULT 5,
  _task text DEFAULT NULL,
  _priority integer DEFAULT 0,
  _job_key text DEFAULT NULL,
  _job_key_mode text DEFAULT 'keep',
  _job_key_while_processing boolean DEFAULT false,
  _group_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  _id bigint;
  _status text;
  _held_queue text;
  _held_task text;
  _held_ahead boolean;         -- the holder is claimed ahead: processing, not started, its key held while pending
  _held_run_at timestamptz;
  _rel oid;
  _name text := coalesce(_task, _payload->>'task');
  _when timestamptz := coalesce(_run_at, clock_timestamp());
  _scope text := CASE WHEN _job_key_while_processing THEN 'active' ELSE 'pending' END;
BEGIN
  -- The checks the JavaScript side makes (job-values.ts), so that a call from SQL
  -- gets a named 22023 error instead of a raw constraint violation, or worse a
  -- value that breaks readers later (an infinite run_at broke stats and doctor).
  IF _name IS NULL OR _name = '' THEN
    RAISE EXCEPTION 'enqueue_job: no task name (pass _task or put "task" in the payload)'
      USING ERRCODE = '22023';
  END IF;
  IF _task IS NULL AND jsonb_typeof(_payload->'task') <> 'string' THEN
    RAISE EXCEPTION 'enqueue_job: the payload''s "task" must be a string, got a %', jsonb_typeof(_payload->'task')
      USING ERRCODE = '22023';
  END IF;
  IF _queue IS NULL OR length(_queue) NOT BETWEEN 1 AND 128 OR length(_name) > 128 THEN
    RAISE EXCEPTION 'enqueue_job: the queue and task names must be 1 to 128 characters long, got % and %',
      coalesce(length(_queue) || ' characters', 'NULL'), length(_name) || ' characters'
      USING ERRCODE = '22023';
  END IF;
  IF _max_attempts NOT BETWEEN 1 AND 1000 OR _priority NOT BETWEEN -32768 AND 32767 THEN
    RAISE EXCEPTION 'enqueue_job: _max_attempts must be 1 to 1000 and _priority -32768 to 32767, got % and %',
      _max_attempts, _priority
      USING ERRCODE = '22023';
  END IF;
  IF NOT isfinite(_when) THEN
    RAISE EXCEPTION 'enqueue_job: _run_at must be a finite time, got %', _when
      USING ERRCODE = '22023';
  END IF;
  IF (_job_key IS NOT NULL AND _job_key_mode IS NULL) OR _job_key_mode NOT IN ('keep', 'replace', 'error') THEN
    RAISE EXCEPTION 'enqueue_job: _job_key_mode must be keep, replace or error, got %', _job_key_mode
      USING ERRCODE = '22023';
  END IF;
  IF _group_key IS NOT NULL AND length(_group_key) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'enqueue_job: _group_key must be 1 to 128 characters long (NULL: no group), got %',
      CASE WHEN _group_key = '' THEN 'an empty string' ELSE length(_group_key) || ' characters' END
      USING ERRCODE = '22023';
  END IF;
  IF _job_key IS NOT NULL AND length(_job_key) NOT BETWEEN 1 AND 512 THEN
    RAISE EXCEPTION 'enqueue_job: _job_key must be 1 to 512 characters long (NULL: no key), got %',
      CASE WHEN _job_key = '' THEN 'an empty string' ELSE length(_job_key) || ' characters' END
      USING ERRCODE = '22023';
  END IF;
  IF _job_key IS NULL THEN
    INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority, group_key)
    VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), _when, coalesce(_max_attempts, 5), coalesce(_priority, 0),
            _group_key)
    RETURNING id INTO _id;
    RETURN _id;
  END IF;
  FOR _round IN 1..10 LOOP
    INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority, job_key, key_scope, group_key)
    VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), _when, coalesce(_max_attempts, 5),
            coalesce(_priority, 0), _job_key, _scope, _group_key)
    ON CONFLICT (job_key) WHERE key_scope IN ('pending', 'active') AND status IN ('pending', 'processing')
    DO NOTHING
    RETURNING id INTO _id;
    IF _id IS NOT NULL THEN
      RETURN _id;
    END IF;

    IF _job_key_mode = 'replace' THEN
      UPDATE :SCHEMA.jobs
      SET payload = coalesce(_payload, '{}'::jsonb), run_at = _when, updated_at = clock_timestamp()
      WHERE job_key = _job_key AND key_scope IN ('pending', 'active') AND status = 'pending'
      RETURNING id, queue, tableoid, task INTO _id, _held_queue, _rel, _held_task;
      IF _id IS NOT NULL AND _held_task <> _name THEN
        -- The holder keeps its task: the new payload would reach the other task's
        -- handler (see the top of this file). The error undoes the UPDATE.
        RAISE EXCEPTION 'enqueue_job: job % holds key % for task %, not %: replace keeps the holder''s task',
          _id, _job_key, _held_task, _name
          USING ERRCODE = '22023';
      END IF;
      IF _id IS NOT NULL THEN
        PERFORM pg_notify('sluice:' || n.nspname, :SCHEMA.wake_payload(_held_queue, _when))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = _rel;
        RETURN _id;
      END IF;
    END IF;

    IF _job_key_mode = 'keep' THEN
      SELECT id, queue, tableoid, run_at INTO _id, _held_queue, _rel, _held_run_at FROM :SCHEMA.jobs
      WHERE job_key = _job_key AND key_scope IN ('pending', 'active') AND status = 'pending'
      FOR SHARE;
      IF _id IS NOT NULL THEN
        -- Claims passed it by while it was locked: idle workers hear of it at the
        -- commit (a notification is sent then), not at their next poll.
        PERFORM pg_notify('sluice:' || n.nspname, :SCHEMA.wake_payload(_held_queue, _held_run_at))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = _rel;
        RETURN _id;
      END IF;
    END IF;

    IF _job_key_mode IN ('replace', 'keep') THEN
      -- The holder was claimed ahead by a worker, which holds it in memory and
      -- starts it when a slot frees (or has started it, not yet written): 'replace'
      -- cannot give it the new payload, and under 'keep' it may run before the
      -- caller commits. It gives its key up now, as if it had started, and the
      -- caller's job goes in as one of its own (see the top of this file).
      UPDATE :SCHEMA.jobs
      SET key_scope = 'released', updated_at = clock_timestamp()
      WHERE job_key = _job_key AND key_scope = 'pending' AND status = 'processing' AND started_at IS NULL;
      CONTINUE WHEN FOUND;
    END IF;

    SELECT id, status, task, started_at IS NULL AND key_scope = 'pending'
    INTO _id, _status, _held_task, _held_ahead FROM :SCHEMA.jobs
    WHERE job_key = _job_key AND key_scope IN ('pending', 'active') AND status IN ('pending', 'processing');
    -- A holder that 'replace' or 'keep' could have changed or locked after all:
    -- handed back to pending (or claimed ahead again) between the statements above.
    -- Its id returned here would keep the old payload, or run before the caller's
    -- commit: go round again (see the top of this file and of 0038).
    CONTINUE WHEN (_job_key_mode = 'replace' AND _held_task = _name
        AND (_status = 'pending' OR (_status = 'processing' AND _held_ahead)))
      OR (_job_key_mode = 'keep' AND (_status = 'pending' OR (_status = 'processing' AND _held_ahead)));
    IF _id IS NOT NULL AND _job_key_mode = 'replace' AND _held_task <> _name THEN
      -- A running holder (jobKeyWhileProcessing) is kept as is and its id returned:
      -- under another task that dropped the new payload in silence (outside review 76).
      RAISE EXCEPTION 'enqueue_job: job % holds key % for task %, not %: replace keeps the holder''s task',
        _id, _job_key, _held_task, _name
        USING ERRCODE = '22023';
    END IF;
    IF _id IS NOT NULL THEN
      IF _job_key_mode = 'error' THEN
        RAISE EXCEPTION 'enqueue_job: job % already holds key %', _id, _job_key
          USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_job_key_idx',
                DETAIL = format('existing job id: %s', _id);
      END IF;
      RETURN _id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'enqueue_job: could not insert or find the holder of key %', _job_key
    USING ERRCODE = '40001';
END;
$$;
