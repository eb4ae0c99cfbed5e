-- The workers registry: one row per running Worker, so the dashboard can show
-- who is alive and what each serves, and so a pending job whose task no live
-- worker of its queue handles can be named instead of waiting in silence.
--
-- A worker inserts its row at start, sets last_seen_at every interval_ms (one
-- small UPDATE, never one per job) and deletes it on stop. A worker that died
-- without stopping leaves its row behind: readers count a row as alive only
-- while last_seen_at is within a few of its own intervals, and the maintenance
-- leader deletes rows long past that. interval_ms is stored per row because
-- workers of one schema may be configured differently, and a reader (the
-- dashboard, `sluice doctor`) has no other way to know how often a row should
-- have been refreshed.
CREATE TABLE :SCHEMA.workers (
  -- The worker's instance id, the value it writes to jobs.locked_by.
  id           text        PRIMARY KEY,
  host         text        NOT NULL,
  pid          integer     NOT NULL,
  queues       text[]      NOT NULL,
  tasks        text[]      NOT NULL,
  concurrency  integer     NOT NULL,
  version      text        NOT NULL,
  interval_ms  integer     NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT workers_id_check CHECK (length(id) BETWEEN 1 AND 128),
  CONSTRAINT workers_interval_check CHECK (interval_ms > 0)
);

