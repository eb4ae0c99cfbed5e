-- Jobs without a group in a grouped queue no longer wait behind older jobs that
-- a limit holds back.
--
-- Each round of claim_queue() began with the jobs without a group among the
-- queue's next max(32, batch) due jobs in claim order (0019). Older jobs of a
-- group at its concurrency limit, or under a rate limit, stay pending at the
-- head of that order, and once they filled the window the jobs without a group
-- (no limit of their own) started only as fast as that group did: with one
-- group limited to 1, they ran one at a time while 29 slots were idle, and
-- under a group's 5/s rate at ~9/s (outside review 151).
--
-- The window now counts only the jobs that may start: those without a group,
-- and those of groups neither at their concurrency limit when the claim began
-- (_full) nor rate-limited (the queue's default group rate, or a group's own).
-- It reads the due jobs in claim order until it has counted max(32, batch) of
-- them, and at most 256 rows. A group at its limit is known from the claim's
-- start: the claim that fills it still counts its jobs; the next one passes them.
-- When those 256 rows were mostly held back and held no job without a group, a
-- deeper look reads up to 20,000 rows for them (outside review 153: behind 600
-- held-back jobs they first started after 11.7 s, behind 2,000 not in 10 s). A
-- deeper look that finds none is not made again for a second (ungrouped_none_at,
-- kept by the claim that holds the queue's row), so a grouped queue with no such
-- jobs pays it once a second at most. Behind more than 20,000 held-back jobs, jobs
-- without a group wait for that group's pace.
--
-- claim_queue() as in 0040 with that change, the claim of jobs without a group
-- kept in order by their place in _ungrouped, enable_sort = off (see the end of
-- this file; outside review 154), and 0029's enable_seqscan = off again (a CREATE
-- OR REPLACE drops it).

-- When the last deeper look found no job without a group (see claim_queue()).
ALTER TABLE :SCHEMA.queues ADD COLUMN ungrouped_none_at timestamptz;

-- A worker role set up from sql/roles.sql moves the cursor: it keeps this too (as 0022).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_worker')
     AND has_column_privilege('sluice_worker', (SELECT typrelid FROM pg_type WHERE oid = pg_typeof(NULL:::SCHEMA.queues)),
                              'group_cursor', 'UPDATE') THEN
    GRANT UPDATE (ungrouped_none_at) ON :SCHEMA.queues TO sluice_worker;
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION :SCHEMA.claim_queue(_queue text, _worker text, _tasks text[], _max integer, _max_visits integer,
                                    _start_now integer, _finished bigint[])
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
  _resume boolean;             -- the group at the cursor has some of its turn left
  _turn integer := 0;          -- jobs the group at _cursor has had of its current turn
  _turn_before integer;
  _weight integer;
  _next text;
  _visits integer := 0;
  _round_first text;
  _round_groups integer := 0;  -- groups that gave jobs in the current round
  _round_weight integer := 0;  -- ... and the sum of their weights
  _share integer;              -- jobs per unit of weight in the current round (after the first)
  _round integer := 1;
  _take integer;
  _limit integer;
  _got integer;
  _lock_timeout text;
  _lock_queue integer;         -- the advisory lock space of this schema's queue, set at its first use
  _group_rated boolean;
  _busy boolean := false;      -- a group was passed because another claimer held it
  _rate_tokens integer;        -- whole tokens of the queue's bucket, when fewer than wanted
  _rate_wait timestamptz;      -- ... and when the next one is due
  _no_ungrouped boolean := false; -- no job without a group in reach for this claim
  _ids bigint[];
  _ungrouped bigint[];         -- jobs without a group in reach, in claim order
  _rated text[];               -- groups with a rate limit of their own (set at the first look for _ungrouped)
  _row record;
  _ahead integer;              -- jobs in reach that may start now: without a group, or of a group not held back
  _read integer;               -- rows the first look read
  _none_at timestamptz;        -- for queues.ungrouped_none_at, when _none_changed
  _none_changed boolean := false;
  _full text[] := '{}';        -- groups at their concurrency limit when the claim began
BEGIN
  _finished := coalesce(_finished, '{}');
  SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue FOR UPDATE SKIP LOCKED;
  _owned := FOUND;
  IF NOT _owned THEN
    SELECT * INTO q FROM :SCHEMA.queues WHERE name = _queue;
    IF NOT FOUND THEN
      -- No row: only the worker's local limit applies. claim_limited() starts
      -- every job it claims, so it is asked for the free slots only.
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _starts, _finished) c;
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
      -- The holder is claiming now: come back in a moment. 0019 returned nothing,
      -- and a worker with nothing running waited for its next wake-up, with its
      -- slots idle (0.2-0.6 s gaps in a queue given a limit above what the workers
      -- can run, outside review).
      RETURN QUERY SELECT NULL:::SCHEMA.jobs, _at + interval '5 milliseconds';
      RETURN;
    END IF;
  ELSE
    IF q.paused THEN
      RETURN;
    END IF;
    IF NOT q.grouped AND q.rate_limit IS NULL THEN
      -- A row this transaction holds can be locked again, so claim_limited()'s own
      -- FOR UPDATE SKIP LOCKED finds it.
      RETURN QUERY SELECT c, NULL::timestamptz FROM :SCHEMA.claim_limited(_queue, _worker, _tasks, _starts, _finished) c;
      RETURN;
    END IF;
    IF q.concurrency_limit IS NOT NULL THEN
      _n := least(_n, q.concurrency_limit - :SCHEMA.running_jobs(_queue, NULL, _worker, _finished));
    END IF;
    IF q.rate_limit IS NOT NULL THEN
      _bucket := :SCHEMA.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms, q.rate_burst, _at);
      IF _n > floor(_bucket.tokens) THEN
        _n := floor(_bucket.tokens)::integer;
        _rate_tokens := _n;
        _rate_wait := _bucket.next_at;
        IF _rate_wait IS NULL THEN -- whole tokens there, fewer than wanted: the next one is due after them
          _rate_wait := _at + (floor(_bucket.tokens) + 1 - _bucket.tokens) * q.rate_interval_ms / q.rate_limit
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

  -- Every group at its limit, from one pass over the queue's running jobs (as many
  -- as run cluster-wide, whatever the backlog or the number of groups). 0022
  -- counted each visited group's running jobs, and read its settings, one group
  -- at a time: with most groups full, the claim of one freed slot visited them
  -- all, at ~70 µs each for the count.
  IF q.group_concurrency IS NOT NULL
     OR EXISTS (SELECT FROM :SCHEMA.job_groups WHERE queue = _queue AND concurrency_limit IS NOT NULL) THEN
    _full := ARRAY(
      SELECT r.group_key
      FROM (SELECT group_key, count(*) AS n FROM :SCHEMA.jobs
            WHERE queue = _queue AND status = 'processing' AND group_key IS NOT NULL
              AND NOT (id = ANY(_finished) AND locked_by = _worker)
            GROUP BY group_key) r
      LEFT JOIN :SCHEMA.job_groups jg ON jg.queue = _queue AND jg.group_key = r.group_key
      WHERE r.n >= coalesce(jg.concurrency_limit, q.group_concurrency));
  END IF;

  _cursor := q.group_cursor;
  -- A group part-way through its turn is visited first ('' is the jobs without a
  -- group, whose turn is not resumed: they are found afresh each round).
  _resume := _cursor IS NOT NULL AND _cursor <> '' AND q.group_turn_taken > 0;
  _turn := CASE WHEN _resume THEN q.group_turn_taken ELSE 0 END;
  -- A claim that holds nothing yet goes on to 1,024 groups (or one full round,
  -- which ends the loop below): see the top of this file.
  WHILE _n > 0 AND _visits < CASE WHEN _total = 0 THEN greatest(_max_visits, 1024) ELSE _max_visits END LOOP
    IF _cursor IS NULL AND NOT _no_ungrouped THEN
      -- Each round begins with the jobs without a group, when some are in reach
      -- (see 0019 and the top of this file). Kept for the claim below.
      IF _rated IS NULL THEN
        _rated := CASE WHEN q.group_rate_limit IS NULL THEN ARRAY(
          SELECT group_key FROM :SCHEMA.job_groups
          WHERE queue = _queue AND group_key IS NOT NULL AND rate_limit IS NOT NULL) ELSE '{}' END;
      END IF;
      _ungrouped := '{}';
      _ahead := 0;
      _read := 0;
      FOR _row IN
        SELECT id, group_key FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND task = ANY(_tasks) AND run_at <= now()
        ORDER BY priority DESC, run_at, id
        LIMIT 256
      LOOP
        _read := _read + 1;
        IF _row.group_key IS NULL THEN
          _ungrouped := _ungrouped || _row.id;
          _ahead := _ahead + 1;
        ELSIF NOT (_row.group_key = ANY(_full) OR q.group_rate_limit IS NOT NULL OR _row.group_key = ANY(_rated)) THEN
          _ahead := _ahead + 1;
        END IF;
        EXIT WHEN _ahead >= greatest(32, _max);
      END LOOP;
      IF cardinality(_ungrouped) = 0 AND _read >= 256 AND _ahead < greatest(32, _max)
         AND (q.ungrouped_none_at IS NULL OR q.ungrouped_none_at < _at - interval '1 second') THEN
        -- 256 rows read, most of them held back: look deeper for jobs without a group,
        -- up to 20,000 rows (a pipelined scan: it stops at the first max(32, batch)
        -- found). When it finds none, the next second's claims do not look again.
        _ungrouped := ARRAY(
          SELECT w.id FROM (
            SELECT id, group_key FROM :SCHEMA.jobs
            WHERE status = 'pending' AND queue = _queue AND task = ANY(_tasks) AND run_at <= now()
            ORDER BY priority DESC, run_at, id
            LIMIT 20000) w
          WHERE w.group_key IS NULL
          LIMIT greatest(32, _max));
        _none_at := CASE WHEN cardinality(_ungrouped) = 0 THEN _at END;
        _none_changed := _none_at IS DISTINCT FROM q.ungrouped_none_at;
      END IF;
      IF cardinality(_ungrouped) = 0 THEN
        _no_ungrouped := true; -- for the rest of this claim
        CONTINUE;
      END IF;
      _next := '';
    ELSE
      -- The next group after the cursor (or the cursor's own, resumed): one
      -- descent of the partial index (a key is never empty, so every key sorts after '').
      IF _resume THEN
        SELECT group_key INTO _next FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND group_key IS NOT NULL AND group_key >= _cursor
        ORDER BY group_key LIMIT 1;
      ELSE
        SELECT group_key INTO _next FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND group_key IS NOT NULL AND group_key > coalesce(_cursor, '')
        ORDER BY group_key LIMIT 1;
      END IF;
      IF NOT FOUND THEN
        _resume := false;
        EXIT WHEN _cursor IS NULL; -- no grouped job pending, none without a group in reach
        _cursor := NULL;           -- past the last group: wrap around
        CONTINUE;
      END IF;
    END IF;
    -- The rest of a turn only for the group that had its start: if it has no job
    -- pending any more, the next group begins a turn of its own.
    _turn_before := CASE WHEN _resume AND _next = _cursor THEN _turn ELSE 0 END;
    _resume := false;
    IF _next = _round_first THEN
      -- A full round. Another only if this one gave jobs; its groups then share
      -- what is still wanted by weight, so one busy group takes the rest of the
      -- batch in one visit instead of one job per round.
      EXIT WHEN _round_groups = 0;
      -- Set once per round, so the first group of the round does not take more
      -- than its share of what the others are still owed.
      _share := greatest(1, ceil(_n::numeric / _round_weight)::integer);
      _round_groups := 0;
      _round_weight := 0;
      _round := _round + 1;
    END IF;

    IF _next = ANY(_full) THEN
      -- Limited and full: passed below without reading its settings.
      g := NULL;
      _limit := 0;
      _group_rated := false;
    ELSE
      SELECT * INTO g FROM :SCHEMA.job_groups WHERE queue = _queue AND group_key = _next;
      IF NOT FOUND THEN
        g := NULL;
      END IF;
      _limit := coalesce(g.concurrency_limit, q.group_concurrency);
      _group_rated := coalesce(g.rate_limit, q.group_rate_limit) IS NOT NULL;
    END IF;
    -- A limited group with no start left in this claim: end here, the cursor
    -- before it (see 0019), and the turn there as it was.
    EXIT WHEN (_limit IS NOT NULL OR _group_rated) AND _total >= _starts;

    IF _round_first IS NULL THEN
      _round_first := _next;
    END IF;
    _visits := _visits + 1;
    _cursor := _next;
    _turn := 0; -- a group passed below (at its limit, held, out of tokens) has had its turn
    _weight := coalesce(g.weight, 1);
    -- A weight lowered to what the group has had of its turn already: its turn is over.
    CONTINUE WHEN _turn_before > 0 AND _turn_before >= _weight;
    -- Later rounds share what is still wanted by weight (0016 shared it evenly,
    -- which diluted weights in every claim of more than one round; outside review).
    _take := CASE WHEN _round = 1 THEN _weight - _turn_before
                  ELSE _weight * _share END;
    _take := least(_take, _n);

    IF _limit IS NOT NULL OR _group_rated THEN
      _take := least(_take, _starts - _total);
      -- Full when the claim began: passed without taking its lock, so a claim
      -- locks only the groups it may take from.
      CONTINUE WHEN _next = ANY(_full);
      IF _lock_queue IS NULL THEN
        -- The queues table's oid in the key: advisory locks are database-wide, and
        -- schemas with the same queue and group names held each other's groups.
        SELECT hashtext(_queue) # tableoid::integer INTO _lock_queue FROM :SCHEMA.queues WHERE name = _queue;
      END IF;
      IF NOT pg_try_advisory_xact_lock(_lock_queue, hashtext(_next)) THEN
        _busy := true;
        CONTINUE; -- another claimer is in this group right now
      END IF;
      IF _limit IS NOT NULL THEN
        -- Again under the lock, from this statement's fresh snapshot: it sees every
        -- claim the lock's previous holder committed (see 0016).
        _take := least(_take, _limit - :SCHEMA.running_jobs(_queue, _next, _worker, _finished));
        CONTINUE WHEN _take <= 0;
      END IF;
      IF _group_rated THEN
        IF g.queue IS NULL THEN
          -- Another session's uncommitted row for this group (setGroupSettings in an
          -- open transaction) makes the INSERT wait for that transaction's end, and
          -- the whole claim with it: give up at once and pass the group, as a row
          -- locked elsewhere is passed (outside review 73: a worker stalled for as
          -- long as an admin's transaction stayed open).
          BEGIN
            _lock_timeout := current_setting('lock_timeout');
            PERFORM set_config('lock_timeout', '1ms', true);
            INSERT INTO :SCHEMA.job_groups (queue, group_key) VALUES (_queue, _next) ON CONFLICT DO NOTHING;
            PERFORM set_config('lock_timeout', _lock_timeout, true);
          EXCEPTION WHEN lock_not_available THEN
            _busy := true;
            CONTINUE;
          END;
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
      -- status again: FOR UPDATE checks it on a row's newest version (see 0019).
      -- _ungrouped is in claim order: kept by its ordinality, by primary key (with
      -- enable_sort off, ORDER BY priority here made a walk of jobs_dequeue_idx).
      _ids := ARRAY(
        SELECT j.id FROM unnest(_ungrouped) WITH ORDINALITY AS u(id, n)
          JOIN :SCHEMA.jobs j ON j.id = u.id
        WHERE j.status = 'pending'
        ORDER BY u.n
        LIMIT _take
        FOR UPDATE OF j SKIP LOCKED);
    ELSE
      -- One group's jobs in claim order, from jobs_group_dequeue_idx, written as a
      -- range on purpose (see 0019).
      _ids := ARRAY(
        SELECT id FROM :SCHEMA.jobs
        WHERE status = 'pending' AND queue = _queue AND group_key >= _next AND group_key <= _next
          AND task = ANY(_tasks) AND run_at <= now()
        ORDER BY group_key, priority DESC, run_at, id
        LIMIT _take
        FOR UPDATE SKIP LOCKED);
    END IF;
    -- A group with nothing due skips the UPDATE (a statement run on no rows): an
    -- empty claim may now visit a thousand such groups.
    _got := 0;
    IF cardinality(_ids) > 0 THEN
      RETURN QUERY
        WITH claim_time AS MATERIALIZED (SELECT clock_timestamp() AS at)
        UPDATE :SCHEMA.jobs j
        SET status = 'processing', attempts = j.attempts + 1, locked_at = t.at, locked_by = _worker,
            updated_at = t.at,
            started_at = CASE WHEN _total + p.n <= _starts THEN t.at END,
            key_scope = CASE WHEN j.key_scope = 'pending' AND _total + p.n <= _starts THEN 'released' ELSE j.key_scope END
        FROM unnest(_ids) WITH ORDINALITY AS p(id, n), claim_time t
        WHERE j.id = p.id
        RETURNING j, NULL::timestamptz;
      GET DIAGNOSTICS _got = ROW_COUNT;
    END IF;
    IF _got > 0 AND cardinality(_finished) > 0 THEN
      -- Running again, in this worker: counted from now on (see the top of this file).
      _finished := ARRAY(SELECT unnest(_finished) EXCEPT SELECT unnest(_ids));
    END IF;
    IF _got > 0 THEN
      _n := _n - _got;
      _total := _total + _got;
      _round_groups := _round_groups + 1;
      _round_weight := _round_weight + _weight;
      -- Part of a first-round turn, the group giving all it was asked for: the
      -- rest of its turn is the next claim's to give.
      IF _round = 1 AND _next <> '' AND _got = _take AND _turn_before + _got < _weight THEN
        _turn := _turn_before + _got;
      END IF;
      IF _group_rated THEN
        UPDATE :SCHEMA.job_groups SET tokens = _bucket.tokens - _got, tokens_at = _at
        WHERE queue = _queue AND group_key = _next;
      END IF;
    END IF;
  END LOOP;

  IF _owned THEN
    IF q.rate_limit IS NOT NULL THEN
      _bucket := :SCHEMA.refill_tokens(q.tokens, q.tokens_at, q.rate_limit, q.rate_interval_ms, q.rate_burst, _at);
      UPDATE :SCHEMA.queues SET tokens = _bucket.tokens - _total, tokens_at = _at, group_cursor = _cursor,
                                group_turn_taken = _turn
      WHERE name = _queue;
    ELSIF _cursor IS DISTINCT FROM q.group_cursor OR _turn <> q.group_turn_taken THEN
      UPDATE :SCHEMA.queues SET group_cursor = _cursor, group_turn_taken = _turn WHERE name = _queue;
    END IF;
    IF _none_changed THEN
      -- A statement of its own, after a deeper look only. A worker role granted the
      -- columns above and not this one (roles.sql before 0041, under another name)
      -- claims all the same, and looks deeper again next time.
      BEGIN
        UPDATE :SCHEMA.queues SET ungrouped_none_at = _none_at WHERE name = _queue;
      EXCEPTION WHEN insufficient_privilege THEN
        NULL;
      END;
    END IF;
  END IF;
  IF _rate_tokens IS NOT NULL AND _total >= _rate_tokens THEN
    -- Every token spent: more may be due when the next one is. A claim that found
    -- fewer jobs than tokens has nothing waiting for one: no timer (see the top).
    _wait := least(_wait, _rate_wait);
  END IF;
  IF _busy AND _n > 0 THEN
    -- Short because another claimer held a group that may have had jobs for this
    -- one: come back in a moment instead of leaving free slots idle.
    _wait := least(_wait, _at + interval '5 milliseconds');
  END IF;
  IF _wait IS NOT NULL THEN
    RETURN QUERY SELECT NULL:::SCHEMA.jobs, _wait;
  END IF;
END;
$$;

ALTER FUNCTION :SCHEMA.claim_queue(text, text, text[], integer, integer, integer, bigint[]) SET enable_seqscan = off;
-- The look for the next group (ORDER BY group_key LIMIT 1) must walk
-- jobs_group_dequeue_idx. Planned on statistics taken when the table was small
-- (or never: this server's autovacuum may be off), its generic plan read the
-- queue's every pending row through jobs_dequeue_idx and sorted them, at each
-- group visit: 20-35 ms a claim behind 20,000 jobs of limited groups, a grouped
-- queue's throughput down 4-8x (outside review 154). Every ordered read of this
-- function has an index in its order; the rest need no sort.
ALTER FUNCTION :SCHEMA.claim_queue(text, text, text[], integer, integer, integer, bigint[]) SET enable_sort = off;
