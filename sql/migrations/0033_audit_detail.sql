-- The audit log says what a setting was changed to, and when the change was made.
--
-- Rows of queue settings (concurrency_limit, group_defaults, rate_limit,
-- group_settings) held only the action, the queue and the actor, so a timeline
-- of a queue's limits could not be rebuilt from them (outside review 80).
-- `detail` holds the settings as the statement left them (NULL for the other
-- actions). And `at` was now(), the time the transaction began: a change made in
-- a transaction held open for a minute was logged a minute early. It is now the
-- time of the statement (clock_timestamp()); the change still takes effect at
-- COMMIT, which no column can know.
ALTER TABLE :SCHEMA.audit_log ADD COLUMN detail jsonb;
ALTER TABLE :SCHEMA.audit_log ALTER COLUMN at SET DEFAULT clock_timestamp();
