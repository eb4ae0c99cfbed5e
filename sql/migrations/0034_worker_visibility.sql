-- Each worker's jobs are rescued after that worker's own visibility timeout.
--
-- The maintenance leader rescued every expired lock with its own
-- visibilityTimeoutMs. A worker configured with a longer one (the CLI's 30 s
-- default beside a library worker at 2 s) heartbeats at a pace the leader took
-- for death: its jobs were rescued every few seconds while it ran them, and it
-- claimed them again, attempt after attempt, until they failed as dead letters
-- whose every run had succeeded (outside review 85).
--
-- A worker now writes its visibility timeout into its row of the registry, and
-- the rescuer gives each processing job the timeout of the worker named in its
-- locked_by, the leader's own where that worker has no row (a role without rights
-- on the table, a row pruned long after the worker died). The rescuer reads the
-- registry in a statement of its own, so a role that may not read it still rescues,
-- as before, with its own timeout.
ALTER TABLE :SCHEMA.workers ADD COLUMN visibility_timeout_ms integer
  CONSTRAINT workers_visibility_check CHECK (visibility_timeout_ms > 0);
