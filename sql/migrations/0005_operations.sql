-- Operations: keep the hot jobs table small, elect one maintenance leader, carry
-- trace context.

-- Autovacuum settings of the hot table (0001: fillfactor 80, vacuum after a fixed
-- 5,000 dead rows, no cost delay) were reviewed against bench/bloat.ts and kept:
-- with the pruner moving finished rows out, 1,000,000 jobs at ~900 jobs/s left the
-- jobs table at 28-32 MB throughout, dead tuples swinging between ~20k and ~140k
-- (each job leaves ~3 dead versions: claim, completion, prune). The bound is set by
-- autovacuum_naptime (server-wide, 1 min: a vacuum per minute, 18 in the run), not
-- by the table's threshold, which is reached within seconds; lowering it further
-- would change nothing. See README "Bloat benchmark".

-- Finished rows are found by the pruner through this index, oldest first. Partial,
-- so pending and running rows never enter it. coalesce() because a row marked
-- finished by code that forgot finished_at must still leave the hot table.
CREATE INDEX jobs_finished_idx ON :SCHEMA.jobs ((coalesce(finished_at, updated_at)))
  WHERE status IN ('completed', 'failed', 'cancelled');

-- W3C trace context ({"traceparent": ..., "tracestate": ...}) of the span that
-- enqueued the job, so the worker's span joins the same trace. NULL without tracing.
ALTER TABLE :SCHEMA.jobs ADD COLUMN trace_context jsonb;

-- Finished jobs moved out of the hot table. The whole row is kept as jsonb (so a
-- later migration that adds a column to jobs needs no change here, and getJob can
-- rebuild a jobs row with jsonb_populate_record); a few columns are copied out
-- for filtering.
--
-- Partitioned by purge_after (finished_at + the retention of the row's queue and
-- status), one partition per UTC day: a partition holds exactly the rows that
-- expire that day, so expiry is DROP TABLE of a whole partition, never a row-by-row
-- DELETE that vacuum must clean up. Partitioning by finished_at instead would
-- force per-status retention (completed 1 day, failed 30 days) back to row deletes.
CREATE TABLE :SCHEMA.jobs_history (
  id          bigint      NOT NULL,
  queue       text        NOT NULL,
  task        text        NOT NULL,
  status      text        NOT NULL,
  finished_at timestamptz NOT NULL,
  purge_after timestamptz NOT NULL,
  job         jsonb       NOT NULL
) PARTITION BY RANGE (purge_after);

CREATE INDEX jobs_history_id_idx ON :SCHEMA.jobs_history (id);

-- Creates the partition for one UTC day if it is missing; true when it made one.
-- The schema is passed as text (not spliced in here) so any schema name is
-- quoted by format(%I). Two pruners racing (a lease changing hands) both succeed.
CREATE FUNCTION :SCHEMA.create_history_partition(_schema text, _day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  _name text := 'jobs_history_' || to_char(_day, 'YYYYMMDD');
BEGIN
  IF to_regclass(format('%I.%I', _schema, _name)) IS NOT NULL THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.jobs_history FOR VALUES FROM (%L) TO (%L)',
    _schema, _name, _schema,
    _day::timestamp AT TIME ZONE 'UTC', (_day + 1)::timestamp AT TIME ZONE 'UTC');
  RETURN true;
EXCEPTION WHEN duplicate_table OR unique_violation THEN
  RETURN false;
END;
$$;

-- Drops every daily partition whose whole range lies before _now and returns the
-- names dropped. lock_timeout: dropping a partition needs an exclusive lock on it
-- and on the parent; rather than queue behind a long reader (and block everyone
-- queued behind us), give up and try again on the next tick.
CREATE FUNCTION :SCHEMA.drop_expired_history(_schema text, _now timestamptz) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  _name text;
BEGIN
  PERFORM set_config('lock_timeout', '2s', true);
  FOR _name IN
    SELECT c.relname FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = format('%I.jobs_history', _schema)::regclass
      AND c.relname ~ '^jobs_history_[0-9]{8}$'
      AND (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= _now
    ORDER BY c.relname
  LOOP
    EXECUTE format('DROP TABLE %I.%I', _schema, _name);
    RETURN NEXT _name;
  END LOOP;
END;
$$;

-- The maintenance lease: one row per role; the holder renews expires_at well before
-- it passes. A holder that dies stops renewing and any worker takes over once the
-- row has expired. A row (not a session advisory lock) so it works through
-- transaction-mode poolers and needs no dedicated connection.
CREATE TABLE :SCHEMA.leader (
  role       text PRIMARY KEY,
  holder     text        NOT NULL,
  elected_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
