-- Groups: fair claims across the groups of a queue, per-group concurrency and
-- rate limits (queue-wide and per group), all cluster-wide.
--
-- A job may carry a group key (a tenant, a customer, an API account). In a queue
-- that has grouped jobs, workers take jobs round-robin across the groups with due
-- jobs, so one group's huge backlog gets its share and no more. Jobs without a
-- group form one group of their own there ('' below: a real key is never empty).
-- Queues that never saw a grouped job and have no rate limit are claimed exactly
-- as before.

ALTER TABLE :SCHEMA.jobs ADD COLUMN group_key text;
-- NOT VALID, then VALIDATE: every existing row is NULL, and validating apart takes
-- a lock that lets enqueues and claims go on while the table is read.
ALTER TABLE :SCHEMA.jobs ADD CONSTRAINT jobs_group_key_check CHECK (length(group_key) BETWEEN 1 AND 128) NOT VALID;
ALTER TABLE :SCHEMA.jobs VALIDATE CONSTRAINT jobs_group_key_check;

-- The fair claim's scan: the distinct groups of a queue in key order (a skip scan,
-- one index descent per group), and inside one group its jobs in claim order.
-- The expression maps "no group" to '' so that it is one group like the others and
-- the same index serves it. It covers every pending job, grouped or not: a queue
-- becomes grouped when its first grouped job arrives, and its older jobs must be
-- reachable then without a scan of the whole queue.
CREATE INDEX jobs_group_dequeue_idx ON :SCHEMA.jobs (queue, (coalesce(group_key, '')), priority DESC, run_at, id)
  WHERE status = 'pending';

-- Running jobs of one group, for group concurrency limits. Only grouped rows: the
-- running jobs without a group are counted through jobs_processing_idx (0012),
-- and ungrouped claims add no entry here. Keys never change while a job runs, so
-- heartbeats stay HOT.
CREATE INDEX jobs_group_processing_idx ON :SCHEMA.jobs (queue, group_key)
  WHERE status = 'processing' AND group_key IS NOT NULL;

ALTER TABLE :SCHEMA.queues
  -- Set when the first grouped job arrives (trigger below) or by a group setting:
  -- from then on the queue is claimed by claim_queue(), never by the common cycle.
  ADD COLUMN grouped boolean NOT NULL DEFAULT false,
  -- Most jobs of any one group running at once (a group's own setting overrides it).
  ADD COLUMN group_concurrency integer,
  -- At most rate_limit starts per rate_interval_ms across the queue, with up to
  -- rate_burst of them at once (the bucket's size; see claim_queue()).
  ADD COLUMN rate_limit integer,
  ADD COLUMN rate_interval_ms integer,
  ADD COLUMN rate_burst integer,
  -- The same, for each group of the queue (a group's own setting overrides it).
  ADD COLUMN group_rate_limit integer,
  ADD COLUMN group_rate_interval_ms integer,
  ADD COLUMN group_rate_burst integer,
  -- The queue's token bucket: tokens left as of tokens_at (NULL: full).
  ADD COLUMN tokens float8,
  ADD COLUMN tokens_at timestamptz,
  -- The round-robin position: the group the last claim visited last.
  ADD COLUMN group_cursor text,
  ADD CONSTRAINT queues_group_concurrency_check CHECK (group_concurrency BETWEEN 1 AND 10000),
  ADD CONSTRAINT queues_rate_check CHECK (
    (rate_limit IS NULL AND rate_interval_ms IS NULL AND rate_burst IS NULL)
    OR (rate_limit BETWEEN 1 AND 1000000 AND rate_interval_ms BETWEEN 1 AND 86400000 AND rate_burst BETWEEN 1 AND 1000000)),
  ADD CONSTRAINT queues_group_rate_check CHECK (
    (group_rate_limit IS NULL AND group_rate_interval_ms IS NULL AND group_rate_burst IS NULL)
    OR (group_rate_limit BETWEEN 1 AND 1000000 AND group_rate_interval_ms BETWEEN 1 AND 86400000
        AND group_rate_burst BETWEEN 1 AND 1000000));

-- One row per group that has settings of its own or a rate-limit bucket. Groups
-- without a row have weight 1 and the queue's group defaults.
CREATE TABLE :SCHEMA.job_groups (
  queue             text        NOT NULL,
  group_key         text        NOT NULL, -- '' for the jobs without a group
  -- Jobs taken from this group each time the round robin passes it.
  weight            integer     NOT NULL DEFAULT 1,
  concurrency_limit integer,
  rate_limit        integer,
  rate_interval_ms  integer,
  rate_burst        integer,
  tokens            float8,
  tokens_at         timestamptz,
  updated_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, group_key),
  CONSTRAINT job_groups_weight_check CHECK (weight BETWEEN 1 AND 1000),
  CONSTRAINT job_groups_concurrency_limit_check CHECK (concurrency_limit BETWEEN 1 AND 10000),
  CONSTRAINT job_groups_rate_check CHECK (
    (rate_limit IS NULL AND rate_interval_ms IS NULL AND rate_burst IS NULL)
    OR (rate_limit BETWEEN 1 AND 1000000 AND rate_interval_ms BETWEEN 1 AND 86400000 AND rate_burst BETWEEN 1 AND 1000000))
);

-- Flags a queue as grouped when its first grouped job is inserted, and tells the
-- workers to re-read the queues table (the control message of src/notify/codec.ts).
-- A statement trigger of its own beside notify_jobs_inserted(): once a queue is
-- flagged, each INSERT costs one pass over its transition table and one read of
-- the queues rows, never a lock. Owner's rights, because the roles that enqueue
-- may not write the queues table.
CREATE FUNCTION :SCHEMA.mark_grouped_queues() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  _new text[];
BEGIN
  _new := ARRAY(
    SELECT DISTINCT n.queue FROM new_jobs n
    WHERE n.group_key IS NOT NULL
      AND NOT EXISTS (SELECT FROM :SCHEMA.queues q WHERE q.name = n.queue AND q.grouped));
  IF cardinality(_new) = 0 THEN
    RETURN NULL;
  END IF;
  INSERT INTO :SCHEMA.queues AS q (name, grouped) SELECT unnest(_new), true
  ON CONFLICT (name) DO UPDATE SET grouped = true, updated_at = now() WHERE NOT q.grouped;
  PERFORM pg_notify('sluice:' || TG_TABLE_SCHEMA, '{"c":"queues"}');
  RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_mark_grouped
  AFTER INSERT ON :SCHEMA.jobs
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.mark_grouped_queues();

-- enqueue_job() as in 0009/0011 with one more argument, _group_key. A new
-- argument means a new function: the old one is dropped, and whoever could
-- execute it (sql/roles.sql's roles) is granted the new one.
CREATE TEMPORARY TABLE sluice_enqueue_job_grantees ON COMMIT DROP AS
  SELECT a.grantee::regrole::text AS grantee
  FROM pg_proc p, aclexplode(p.proacl) a
  -- The function is found without a string literal holding the schema's name (a
  -- quote in the name would end the literal): its schema is that of the jobs row type.
  WHERE p.proname = 'enqueue_job' AND p.pronargs = 9
    AND p.pronamespace = (SELECT typnamespace FROM pg_type WHERE oid = pg_typeof(NULL:::SCHEMA.jobs))
    AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;

DROP FUNCTION :SCHEMA.enqueue_job(text, jsonb, timestamptz, integer, text, integer, text, text, boolean);

CREATE FUNCTION :SCHEMA.enqueue_job(
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
    INSERT INTO :SCHEMA.jobs (queue, task, payload, run_at, max_attempts, priority, group_key)
    VALUES (_queue, _name, coalesce(_payload, '{}'::jsonb), _when, coalesce(_max_attempts, 5), coalesce(_priority, 0),
            _group_key)
    RETURNING id INTO _id;
    RETURN _id;
  END IF;
  IF _job_key_mode IS NULL OR _job_key_mode NOT IN ('keep', 'replace', 'error') THEN
    RAISE EXCEPTION 'sluice.enqueue_job: _job_key_mode must be keep, replace or error, got %', _job_key_mode
      USING ERRCODE = '22023';
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
      RETURNING id, queue, tableoid INTO _id, _held_queue, _rel;
      IF _id IS NOT NULL THEN
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
REVOKE EXECUTE ON FUNCTION :SCHEMA.enqueue_job(text, jsonb, timestamptz, integer, text, integer, text, text, boolean, text)
  FROM PUBLIC;
DO $$
DECLARE
  _role text;
BEGIN
  FOR _role IN SELECT grantee FROM sluice_enqueue_job_grantees LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s',
      (SELECT p.oid::regprocedure FROM pg_proc p
       WHERE p.proname = 'enqueue_job' AND p.pronargs = 10
         AND p.pronamespace = (SELECT typnamespace FROM pg_type WHERE oid = pg_typeof(NULL:::SCHEMA.jobs))),
      _role);
  END LOOP;
END
$$;

-- A token bucket as of _at: tokens after refilling at _rate per _interval_ms up to
-- _burst (NULL tokens: a new bucket, full), and when the next whole token is due
-- (NULL when one is there now).
CREATE FUNCTION :SCHEMA.refill_tokens(
  _tokens float8, _tokens_at timestamptz, _rate integer, _interval_ms integer, _burst integer, _at timestamptz,
  OUT tokens float8, OUT next_at timestamptz)
LANGUAGE sql IMMUTABLE AS $$
  SELECT t, CASE WHEN t >= 1 THEN NULL
                 ELSE _at + (1 - t) * _interval_ms / _rate * interval '1 millisecond' END
  FROM (SELECT CASE WHEN _tokens IS NULL THEN _burst::float8
                    ELSE least(_burst::float8, _tokens + greatest(0, extract(epoch FROM _at - _tokens_at) * 1000)
                                                         * _rate / _interval_ms) END AS t) b
$$;

-- Claims up to _max due jobs of a queue that has groups, a rate limit or a
-- concurrency limit. Returns the claimed rows (job), and at most one row with no
-- job and wait_until set: something was held back by a rate limit (or the
-- queue's row was busy) and may be claimable then, so the worker sets a timer
-- instead of polling.
--
-- Queues with only a concurrency limit (not grouped, no rate limit) go to
-- claim_limited() unchanged (0010), which keeps a serial queue in order.
--
-- The fair claim. Groups are visited in key order starting after the queue's
-- cursor, wrapping around: each visit finds the next group with pending jobs by one
-- descent of jobs_group_dequeue_idx (a skip scan), then takes that group's first
-- due jobs in claim order (`weight` of them; on later rounds of the same claim an
-- even share of what is still wanted). The cost is a few index descents per visit
-- and at most _max_visits visits, whatever the backlog or the number of groups:
-- nothing ranks the backlog. Groups with no due job (all delayed, or held by
-- their limits) cost a visit each, which is what the bound is for; the cursor
-- moves past them, so the next claim goes on from there.
--
-- Exact limits under concurrent claims, without ever waiting on a lock:
-- - the queue's row is locked FOR UPDATE SKIP LOCKED. It guards the global
--   concurrency limit, the queue's token bucket and the cursor. Held by another
--   claimer (or an admin's transaction), a queue with a queue-wide limit claims
--   nothing now; a grouped queue without one claims anyway, from the cursor as it
--   was, and leaves the cursor alone (the jobs the holder is taking are skipped).
-- - a group with a concurrency or rate limit is entered only under a transaction
--   advisory lock on (queue, group), taken with pg_try_advisory_xact_lock: held by
--   another claimer, the group is skipped this time. Under that lock the count of
--   its running jobs comes from a fresh snapshot (each statement of a VOLATILE
--   plpgsql function takes one), so it includes every claim committed by the
--   previous holder, as in 0003. Two different groups may share a lock key
--   (hashtext): they then merely take turns.
-- - rows are claimed FOR UPDATE SKIP LOCKED, as in the common claim.
--
-- plan_cache_mode = force_generic_plan: plpgsql plans each statement with the
-- actual values for its first executions and keeps doing so while those custom
-- plans look cheaper, and planning the skip scan's range condition probes the
-- index's ends (get_actual_variable_range), which costs more as the backlog grows:
-- measured at batch 20 over 10,000 groups, 3.7 ms per claim at 10,000 pending jobs
-- and 14 ms at 1,000,000, nearly all of it planning. Every statement here is
-- written for its generic plan (equality on the index's leading columns, then its
-- order), so planning once per session is enough.
CREATE FUNCTION :SCHEMA.claim_queue(_queue text, _worker text, _tasks text[], _max integer, _max_visits integer)
RETURNS TABLE (job :SCHEMA.jobs, wait_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  q :SCHEMA.queues%ROWTYPE;
  g :SCHEMA.job_groups%ROWTYPE;
  _owned boolean;
  _at timestamptz := clock_timestamp();
  _n integer := _max;          -- still wanted
  _total integer := 0;         -- claimed so far
  _bucket record;
  _wait timestamptz;
  _cursor text;                -- the group visited last
  _next text;
  _visits integer := 0;
  _round_first text;
  _round_groups integer := 0;  -- groups that gave jobs in the current round
  _last_round_groups integer := 0;
  _round integer := 1;
  _take integer;
  _limit integer;
  _running integer;
  _got integer;
  _lock_queue integer := hashtext(_queue);
  _group_rated boolean;
BEGIN
  SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue FOR UPDATE SKIP LOCKED;
  _owned := FOUND;
  IF NOT _owned THEN
    SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue;
    IF NOT FOUND THEN
      -- No row: only the worker's local limit applies.
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _max) c;
      RETURN;
    END IF;
    IF q.paused THEN
      RETURN;
    END IF;
    IF q.rate_limit IS NOT NULL THEN
      -- The holder is spending the bucket: come back when its next token is due
      -- (as of the last committed state), or at once if one is there.
      _bucket := :SCHEMA.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms, q.rate_burst, _at);
      RETURN QUERY SELECT NULL:::SCHEMA.jobs, greatest(coalesce(_bucket.next_at, _at), _at + interval '5 milliseconds');
      RETURN;
    END IF;
    IF q.concurrency_limit IS NOT NULL OR NOT q.grouped THEN
      RETURN; -- as claim_limited(): the holder is claiming now, a later cycle tries again
    END IF;
  ELSE
    IF q.paused THEN
      RETURN;
    END IF;
    IF NOT q.grouped AND q.rate_limit IS NULL THEN
      -- A row this transaction holds can be locked again, so claim_limited()'s own
      -- FOR UPDATE SKIP LOCKED finds it.
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _max) c;
      RETURN;
    END IF;
    IF q.concurrency_limit IS NOT NULL THEN
      SELECT count(*) INTO _running FROM :SCHEMA.jobs WHERE queue = _queue AND status = 'processing';
      _n := least(_n, q.concurrency_limit - _running);
    END IF;
    IF q.rate_limit IS NOT NULL THEN
      _bucket := :SCHEMA.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms, q.rate_burst, _at);
      IF _n > floor(_bucket.tokens) THEN
        _n := floor(_bucket.tokens)::integer;
        _wait := _bucket.next_at;
        IF _wait IS NULL THEN -- whole tokens there, fewer than wanted: the next one is due after them
          _wait := _at + (floor(_bucket.tokens) + 1 - _bucket.tokens) * q.rate_interval_ms / q.rate_limit
                         * interval '1 millisecond';
        END IF;
      END IF;
    END IF;
  END IF;

  _cursor := q.group_cursor;
  WHILE _n > 0 AND _visits < _max_visits LOOP
    IF _cursor IS NULL THEN
      SELECT coalesce(group_key, '') INTO _next FROM :SCHEMA.jobs
      WHERE status = 'pending' AND queue = _queue
      ORDER BY coalesce(group_key, '') LIMIT 1;
    ELSE
      SELECT coalesce(group_key, '') INTO _next FROM :SCHEMA.jobs
      WHERE status = 'pending' AND queue = _queue AND coalesce(group_key, '') > _cursor
      ORDER BY coalesce(group_key, '') LIMIT 1;
    END IF;
    IF NOT FOUND THEN
      EXIT WHEN _cursor IS NULL; -- nothing pending at all
      _cursor := NULL;           -- past the last group: wrap around
      CONTINUE;
    END IF;
    IF _next = _round_first THEN
      -- A full round. Another only if this one gave jobs; its groups then share
      -- what is still wanted evenly, so one busy group takes the rest of the batch
      -- in one visit instead of one job per round.
      EXIT WHEN _round_groups = 0;
      _last_round_groups := _round_groups;
      _round_groups := 0;
      _round := _round + 1;
    END IF;
    IF _round_first IS NULL THEN
      _round_first := _next;
    END IF;
    _visits := _visits + 1;
    _cursor := _next;

    SELECT * INTO g FROM :SCHEMA.job_groups WHERE queue = _queue AND group_key = _next;
    IF NOT FOUND THEN
      g := NULL;
    END IF;
    _take := CASE WHEN _round = 1 THEN coalesce(g.weight, 1)
                  ELSE greatest(coalesce(g.weight, 1), ceil(_n::numeric / greatest(_last_round_groups, 1))::integer) END;
    _take := least(_take, _n);
    _limit := coalesce(g.concurrency_limit, q.group_concurrency);
    _group_rated := coalesce(g.rate_limit, q.group_rate_limit) IS NOT NULL;

    IF _limit IS NOT NULL OR _group_rated THEN
      IF NOT pg_try_advisory_xact_lock(_lock_queue, hashtext(_next)) THEN
        CONTINUE; -- another claimer is in this group right now
      END IF;
      IF _limit IS NOT NULL THEN
        IF _next = '' THEN
          SELECT count(*) INTO _running FROM :SCHEMA.jobs
          WHERE queue = _queue AND status = 'processing' AND group_key IS NULL;
        ELSE
          SELECT count(*) INTO _running FROM :SCHEMA.jobs
          WHERE queue = _queue AND status = 'processing' AND group_key = _next;
        END IF;
        _take := least(_take, _limit - _running);
        CONTINUE WHEN _take <= 0;
      END IF;
      IF _group_rated THEN
        IF g.queue IS NULL THEN
          INSERT INTO :SCHEMA.job_groups (queue, group_key) VALUES (_queue, _next) ON CONFLICT DO NOTHING;
        END IF;
        SELECT * INTO g FROM :SCHEMA.job_groups WHERE queue = _queue AND group_key = _next FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND; -- an admin is changing its settings
        IF g.rate_limit IS NOT NULL THEN
          _bucket := :SCHEMA.refill_tokens(g.tokens, g.tokens_at, g.rate_limit, g.rate_interval_ms, g.rate_burst, _at);
        ELSE
          _bucket := :SCHEMA.refill_tokens(g.tokens, g.tokens_at, q.group_rate_limit, q.group_rate_interval_ms,
                                           q.group_rate_burst, _at);
        END IF;
        IF _bucket.next_at IS NOT NULL THEN
          _wait := least(_wait, _bucket.next_at);
          CONTINUE;
        END IF;
        _take := least(_take, floor(_bucket.tokens)::integer);
      END IF;
    END IF;

    RETURN QUERY
      UPDATE :SCHEMA.jobs j
      SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = _worker,
          updated_at = now(), started_at = now(),
          -- As in the common claim: a key held only while pending is given up on start (0002).
          key_scope = CASE WHEN j.key_scope = 'pending' THEN 'released' ELSE j.key_scope END
      WHERE j.id = ANY(ARRAY(
        SELECT id FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND coalesce(group_key, '') = _next
          AND task = ANY(_tasks) AND run_at <= now()
        ORDER BY priority DESC, run_at, id
        LIMIT _take
        FOR UPDATE SKIP LOCKED))
      RETURNING j, NULL::timestamptz;
    GET DIAGNOSTICS _got = ROW_COUNT;
    IF _got > 0 THEN
      _n := _n - _got;
      _total := _total + _got;
      _round_groups := _round_groups + 1;
      IF _group_rated THEN
        UPDATE :SCHEMA.job_groups SET tokens = _bucket.tokens - _got, tokens_at = _at
        WHERE queue = _queue AND group_key = _next;
      END IF;
    END IF;
  END LOOP;

  IF _owned THEN
    IF q.rate_limit IS NOT NULL THEN
      _bucket := :SCHEMA.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms, q.rate_burst, _at);
      UPDATE :SCHEMA.queues SET tokens = _bucket.tokens - _total, tokens_at = _at, group_cursor = _cursor
      WHERE name = _queue;
    ELSIF _cursor IS DISTINCT FROM q.group_cursor THEN
      UPDATE :SCHEMA.queues SET group_cursor = _cursor WHERE name = _queue;
    END IF;
  END IF;
  IF _wait IS NOT NULL THEN
    RETURN QUERY SELECT NULL:::SCHEMA.jobs, _wait;
  END IF;
END;
$$;
