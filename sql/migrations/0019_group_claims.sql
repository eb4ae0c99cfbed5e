-- Grouped queues claimed ahead, like the common cycle (issue 16's throughput),
-- and a dequeue index entry less for every job without a group.
--
-- claim_queue() of 0016 marked every job it claimed as started (started_at), so a
-- worker could only ask it for its free slots: a grouped queue never had jobs
-- waiting in the worker for the next free slot, and its slots sat idle for every
-- round trip (bench/groups.ts measured a grouped drain at 34-62% of the same drain
-- without groups). It now takes _start_now, as the common claim does ($5/$15 in
-- src/db/statements/worker.ts): the first _start_now jobs it claims go into free
-- slots and start now, the rest are claimed ahead (started_at NULL) and start when
-- a slot frees, the worker writing their start with its next cycle.
--
-- Only jobs no limit counts may be claimed ahead. A job waiting in a worker is
-- 'processing', so it would hold one of its group's (or its queue's) concurrency
-- slots without running, and a rate limit counts starts at the claim, so a job
-- claimed ahead would spend its token early. Hence:
-- - a queue with a concurrency limit, a rate limit, or group defaults for either
--   claims at most _start_now jobs (nothing ahead);
-- - in a queue without those, a group with a limit of its own (job_groups) takes
--   only jobs that start now; when the claim has no start left for it, the claim
--   ends there and leaves the cursor before that group, so the next claim begins
--   with it instead of passing it over.
--
-- And limited groups are locked only when they may give jobs. 0016 took the
-- advisory lock of every limited group a claim visited, at its limit or not, and
-- a claim of a queue with fewer groups than its visits (32 at least) locked them
-- all: a second worker claiming at the same moment found every group held, got
-- nothing, and left its free slots idle until its next wake-up (bench/groups.ts
-- group-limit: 2,700 jobs of 20 ms on 30 slots took 6.6-8 s, 2.3 s without the
-- limit). A group is now counted before its lock, and passed unlocked when at its
-- limit; a claim that came back short because a group was held says to try again
-- in 5 ms (wait_until), as for a rate limit.
--
-- Second, enqueue cost. jobs_group_dequeue_idx (0016) held every pending job,
-- grouped or not, so that a queue's older jobs were in reach the moment it became
-- grouped: every enqueue into any queue paid a second dequeue index entry (an
-- INSERT of 10,000 ungrouped rows: ~155 ms of server time with it, ~89 ms
-- without, bench/groups.ts enqueue). It now holds only the grouped jobs, keyed by
-- the group itself. The jobs without a group in a grouped queue are found through
-- jobs_dequeue_idx, the common claim's index, as one more group of the round
-- robin: at the start of each round, claim_queue() looks at the queue's next
-- greatest(32, _max) due jobs in claim order and takes those without a group
-- (their weight and limits apply as before). At most one look per claim finds
-- none (the claim then stops looking), so a claim reads at most about one more
-- row per job it may take. So what a claim reads stays bounded, and
-- those jobs are in reach once they come near the head of the whole queue's claim
-- order: in a grouped queue they wait behind older jobs of every group, as they
-- would in a queue without groups, instead of taking a turn of their own at once.
-- Give them a group of their own to have that.
--
-- Rebuilt in place: writes to jobs wait while the index is built over the
-- grouped pending jobs (none in most databases).
DROP INDEX :SCHEMA.jobs_group_dequeue_idx;
CREATE INDEX jobs_group_dequeue_idx ON :SCHEMA.jobs (queue, group_key, priority DESC, run_at, id)
  WHERE status = 'pending' AND group_key IS NOT NULL;

CREATE FUNCTION :SCHEMA.claim_queue(_queue text, _worker text, _tasks text[], _max integer, _max_visits integer,
                                    _start_now integer)
RETURNS TABLE (job :SCHEMA.jobs, wait_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan -- see claim_queue() in 0016
AS $$
DECLARE
  q :SCHEMA.queues%ROWTYPE;
  g :SCHEMA.job_groups%ROWTYPE;
  _owned boolean;
  _at timestamptz := clock_timestamp();
  _starts integer := least(coalesce(_start_now, _max), _max);
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
  _busy boolean := false;      -- a group was passed because another claimer held it
  _no_ungrouped boolean := false; -- no job without a group in reach for this claim
  _ids bigint[];
  _ungrouped bigint[];         -- jobs without a group in reach, in claim order
BEGIN
  SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue FOR UPDATE SKIP LOCKED;
  _owned := FOUND;
  IF NOT _owned THEN
    SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue;
    IF NOT FOUND THEN
      -- No row: only the worker's local limit applies. claim_limited() starts
      -- every job it claims, so it is asked for the free slots only.
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _starts) c;
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
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _starts) c;
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
  -- Limits on the whole queue, or defaults for every group: nothing ahead.
  IF q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL OR q.group_concurrency IS NOT NULL
     OR q.group_rate_limit IS NOT NULL THEN
    _n := least(_n, _starts);
  END IF;

  _cursor := q.group_cursor;
  WHILE _n > 0 AND _visits < _max_visits LOOP
    IF _cursor IS NULL AND NOT _no_ungrouped THEN
      -- Each round begins with the jobs without a group, when some are in reach:
      -- among the queue's next greatest(32, _max) due jobs in claim order, found through
      -- jobs_dequeue_idx (see the top of this file). Kept for the claim below.
      _ungrouped := ARRAY(
        SELECT id FROM :SCHEMA.jobs
        WHERE id = ANY(ARRAY(
            SELECT id FROM :SCHEMA.jobs
            WHERE status = 'pending' AND queue = _queue AND task = ANY(_tasks) AND run_at <= now()
            ORDER BY priority DESC, run_at, id
            LIMIT greatest(32, _max)))
          AND group_key IS NULL
        ORDER BY priority DESC, run_at, id);
      IF cardinality(_ungrouped) = 0 THEN
        _no_ungrouped := true; -- for the rest of this claim
        CONTINUE;
      END IF;
      _next := '';
    ELSE
      -- The next group after the cursor: one descent of the partial index
      -- (a key is never empty, so every key sorts after '').
      SELECT group_key INTO _next FROM :SCHEMA.jobs
      WHERE status = 'pending' AND queue = _queue AND group_key IS NOT NULL AND group_key > coalesce(_cursor, '')
      ORDER BY group_key LIMIT 1;
      IF NOT FOUND THEN
        EXIT WHEN _cursor IS NULL; -- no grouped job pending, none without a group in reach
        _cursor := NULL;           -- past the last group: wrap around
        CONTINUE;
      END IF;
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

    SELECT * INTO g FROM :SCHEMA.job_groups WHERE queue = _queue AND group_key = _next;
    IF NOT FOUND THEN
      g := NULL;
    END IF;
    _limit := coalesce(g.concurrency_limit, q.group_concurrency);
    _group_rated := coalesce(g.rate_limit, q.group_rate_limit) IS NOT NULL;
    -- A limited group with no start left in this claim: end here, the cursor
    -- before it (see the top of this file).
    EXIT WHEN (_limit IS NOT NULL OR _group_rated) AND _total >= _starts;

    IF _round_first IS NULL THEN
      _round_first := _next;
    END IF;
    _visits := _visits + 1;
    _cursor := _next;
    _take := CASE WHEN _round = 1 THEN coalesce(g.weight, 1)
                  ELSE greatest(coalesce(g.weight, 1), ceil(_n::numeric / greatest(_last_round_groups, 1))::integer) END;
    _take := least(_take, _n);

    IF _limit IS NOT NULL OR _group_rated THEN
      _take := least(_take, _starts - _total);
      IF _limit IS NOT NULL THEN
        -- Counted once before the lock: a group at its limit is passed without
        -- taking its lock, so a claim locks only the groups it may take from.
        IF _next = '' THEN
          SELECT count(*) INTO _running FROM :SCHEMA.jobs
          WHERE queue = _queue AND status = 'processing' AND group_key IS NULL;
        ELSE
          SELECT count(*) INTO _running FROM :SCHEMA.jobs
          WHERE queue = _queue AND status = 'processing' AND group_key = _next;
        END IF;
        CONTINUE WHEN _running >= _limit;
      END IF;
      IF NOT pg_try_advisory_xact_lock(_lock_queue, hashtext(_next)) THEN
        _busy := true;
        CONTINUE; -- another claimer is in this group right now
      END IF;
      IF _limit IS NOT NULL THEN
        -- Again under the lock, from this statement's fresh snapshot: it sees every
        -- claim the lock's previous holder committed (see 0016).
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

    IF _next = '' THEN
      -- status again: FOR UPDATE checks it on a row's newest version, so a job
      -- someone claimed since _ungrouped was read is not taken twice.
      _ids := ARRAY(
        SELECT id FROM :SCHEMA.jobs
        WHERE id = ANY(_ungrouped) AND status = 'pending'
        ORDER BY priority DESC, run_at, id
        LIMIT _take
        FOR UPDATE SKIP LOCKED);
    ELSE
      -- One group's jobs in claim order, from jobs_group_dequeue_idx. Written as a
      -- range and ordered by group_key on purpose: with group_key = _next the
      -- group key is a constant of the ORDER BY, and the generic plan may then
      -- walk jobs_dequeue_idx (same order) filtering on the group, which it does
      -- whenever the statistics saw few groups (one big backlog at ANALYZE time):
      -- past every job of the other groups, 20,000 rows and 8-20 ms per visit,
      -- measured. Only the group index returns this order without a sort.
      _ids := ARRAY(
        SELECT id FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND group_key >= _next AND group_key <= _next
          AND task = ANY(_tasks) AND run_at <= now()
        ORDER BY group_key, priority DESC, run_at, id
        LIMIT _take
        FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN QUERY
      UPDATE :SCHEMA.jobs j
      SET status = 'processing', attempts = j.attempts + 1, locked_at = now(), locked_by = _worker,
          updated_at = now(),
          -- The claim's first _starts jobs start now, the rest are claimed ahead.
          started_at = CASE WHEN _total + p.n <= _starts THEN now() END,
          -- As in the common claim: a key held only while pending is given up on start (0002).
          key_scope = CASE WHEN j.key_scope = 'pending' THEN 'released' ELSE j.key_scope END
      FROM unnest(_ids) WITH ORDINALITY AS p(id, n)
      WHERE j.id = p.id
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
  IF _busy AND _n > 0 THEN
    -- Short because another claimer held a group that may have had jobs for this
    -- one: come back in a moment (its claim takes about a millisecond) instead of
    -- leaving free slots idle until some later wake-up.
    _wait := least(_wait, _at + interval '5 milliseconds');
  END IF;
  IF _wait IS NOT NULL THEN
    RETURN QUERY SELECT NULL:::SCHEMA.jobs, _wait;
  END IF;
END;
$$;

-- The five-argument form of 0016 stays for workers of the previous version still
-- running while the database moves on: every job it claims starts now, as before.
CREATE OR REPLACE FUNCTION :SCHEMA.claim_queue(_queue text, _worker text, _tasks text[], _max integer,
                                               _max_visits integer)
RETURNS TABLE (job :SCHEMA.jobs, wait_until timestamptz)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM :SCHEMA.claim_queue(_queue, _worker, _tasks, _max, _max_visits, _max)
$$;
