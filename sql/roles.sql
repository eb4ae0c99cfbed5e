-- Optional least-privilege roles for Sluice. Not a migration: apply it yourself,
-- as the owner of the schema, after `sluice migrate` (it needs migrations 0011 and 0015),
-- with psql setting SCHEMA to the quoted schema name, in one transaction:
--   psql "$DATABASE_URL" -1 -v ON_ERROR_STOP=1 -v SCHEMA='"sluice"' -f node_modules/sluice/sql/roles.sql
-- and then give the group roles to the login roles your processes use:
--   GRANT sluice_worker TO app_worker;
--   GRANT sluice_enqueue TO app_web;
--   GRANT sluice_outbox_publish TO app_web;   GRANT sluice_outbox_relay TO app_relay;
-- Re-running it is harmless, and after an upgrade it is how the roles lose what an
-- older version of this file granted: every privilege below is revoked first.
-- All four roles are NOLOGIN groups. Creating them needs CREATEROLE: where the
-- schema's owner lacks it, have a role with CREATEROLE create the four first
-- (CREATE ROLE sluice_enqueue NOLOGIN; ... sluice_worker, sluice_outbox_publish,
-- sluice_outbox_relay); this file creates only those that do not exist.
--
-- Column privileges say which columns each role may write; migration 0011 adds
-- what they cannot say (a new row is a new job, a row changes only as a run
-- changes it, a payload limit), for every role that does not own the schema.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_enqueue') THEN
    CREATE ROLE sluice_enqueue NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_worker') THEN
    CREATE ROLE sluice_worker NOLOGIN;
  END IF;
END
$$;

-- REVOKE ALL on a table also revokes its column privileges.
REVOKE ALL ON :SCHEMA.jobs, :SCHEMA.queues, :SCHEMA.leader, :SCHEMA.cron_schedules,
  :SCHEMA.jobs_history, :SCHEMA.audit_log, :SCHEMA.migrations, :SCHEMA.workers, :SCHEMA.job_groups
  FROM sluice_enqueue, sluice_worker;
REVOKE ALL ON SEQUENCE :SCHEMA.jobs_id_seq FROM sluice_enqueue, sluice_worker;
REVOKE ALL ON FUNCTION :SCHEMA.enqueue_job FROM sluice_enqueue, sluice_worker;

-- Enqueue only: Queue.enqueue / enqueueMany (a plain INSERT, RETURNING the id and
-- run_at) and SELECT enqueue_job(...), with job keys in every mode (keep, replace,
-- error, while processing), which enqueue_job() does with its owner's rights.
-- It cannot read payloads, change, lock, claim or delete any job, or insert one
-- that is not new. Queue.getJob and Queue.waitFor are not covered (they read and
-- flag rows). The insert trigger's pg_notify needs no grant.
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_enqueue;
-- notify_on_finish: jobs enqueued waitable (migration 0045).
GRANT INSERT (queue, task, payload, run_at, max_attempts, priority, trace_context, group_key, notify_on_finish)
  ON :SCHEMA.jobs TO sluice_enqueue;
GRANT SELECT (id, run_at) ON :SCHEMA.jobs TO sluice_enqueue;
GRANT USAGE ON SEQUENCE :SCHEMA.jobs_id_seq TO sluice_enqueue;
GRANT EXECUTE ON FUNCTION :SCHEMA.enqueue_job TO sluice_enqueue;
-- The insert trigger's wake-up, and the Queue's deferred one, call wake_payload():
-- granted, not left to PUBLIC, so that a server whose functions PUBLIC may not
-- execute (ALTER DEFAULT PRIVILEGES ... REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC, a
-- common hardening) works as well (outside review 163).
GRANT EXECUTE ON FUNCTION :SCHEMA.wake_payload(text, timestamptz) TO sluice_enqueue;
-- Which migrations the schema has, and nothing else: a deploy step that runs
-- `sluice migrate` as the application's enqueue-only role then passes as a no-op
-- on an up-to-date schema (outside review 209: refused, permission denied).
GRANT SELECT ON :SCHEMA.migrations TO sluice_enqueue;

-- Worker: the cycle (results written, next batch claimed), claim_limited(),
-- heartbeats, progress, release on stop, snooze, and the maintenance lease and
-- rescuer. It reads jobs whole (a claim returns the row) but writes only the
-- columns a run changes, and only as a run changes them (0011): it cannot insert,
-- delete, cancel or reschedule jobs, touch finished ones, or change a job's queue,
-- task, payload, priority or key. Workers share this role and a job's locked_by
-- is not a credential, so it can write the outcome of any processing job.
-- The pruner is not covered: moving rows into jobs_history creates and drops its
-- partitions, which only the owner of the schema may do, so run workers with this
-- role as `maintenance: { pruner: false }` and prune from one process that
-- connects as the owner. A handler that enqueues follow-up jobs with a Queue
-- needs sluice_enqueue as well.
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_worker;
GRANT SELECT ON :SCHEMA.jobs TO sluice_worker;
GRANT UPDATE (status, attempts, run_at, locked_at, locked_by, started_at, finished_at, updated_at,
  last_error, errors, result, progress, key_scope) ON :SCHEMA.jobs TO sluice_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON :SCHEMA.leader TO sluice_worker;
-- Paused and concurrency-limited queues: the claim reads them, and claim_limited()
-- locks a limited queue's row, for which Postgres wants UPDATE on some column:
-- updated_at. Grouped and rate-limited queues (0016): claim_queue() moves the
-- round-robin cursor (and the turn at it, 0022, and when it last found no job
-- without a group, 0041) and spends the token buckets of the queue and of its groups.
-- Pausing, resuming, limits and group settings stay the admin's: a claim adds a
-- group's row with its name alone (outside review 266: a worker login inserted one
-- with a limit of one job a day for a tenant).
GRANT SELECT, UPDATE (updated_at, group_cursor, group_turn_taken, tokens, tokens_at, ungrouped_none_at) ON :SCHEMA.queues TO sluice_worker;
GRANT SELECT, INSERT (queue, group_key), UPDATE (tokens, tokens_at) ON :SCHEMA.job_groups TO sluice_worker;
-- Workers given `schedules` write their definitions and ticks here and enqueue
-- the ticks through enqueue_job().
GRANT SELECT, INSERT, UPDATE ON :SCHEMA.cron_schedules TO sluice_worker;
-- Each worker keeps its own row in the registry (migration 0017); the leader deletes dead ones.
GRANT SELECT, INSERT, UPDATE, DELETE ON :SCHEMA.workers TO sluice_worker;
-- Worker.start() refuses a schema behind the package's migrations (outside review 172:
-- without this, a worker of this role started on one, and its schedules failed every second).
GRANT SELECT ON :SCHEMA.migrations TO sluice_worker;
GRANT EXECUTE ON FUNCTION :SCHEMA.enqueue_job TO sluice_worker;
-- A worker that claims the first grouped job of a queue flags it grouped (0021).
GRANT EXECUTE ON FUNCTION :SCHEMA.mark_queue_grouped(text, text) TO sluice_worker;
-- The claims of limited, grouped and rate-limited queues, and the wake-ups a worker
-- sends (granted, not left to PUBLIC: see wake_payload() above).
GRANT EXECUTE ON FUNCTION :SCHEMA.wake_payload(text, timestamptz),
  :SCHEMA.claim_limited(text, text, text[], integer, bigint[]),
  :SCHEMA.claim_queue(text, text, text[], integer, integer, integer, bigint[]),
  :SCHEMA.running_jobs(text, text, text, bigint[]),
  :SCHEMA.refill_tokens(double precision, timestamptz, integer, integer, integer, timestamptz) TO sluice_worker;

-- The transactional outbox (migration 0015): two more NOLOGIN groups.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_outbox_publish') THEN
    CREATE ROLE sluice_outbox_publish NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sluice_outbox_relay') THEN
    CREATE ROLE sluice_outbox_relay NOLOGIN;
  END IF;
END
$$;

REVOKE ALL ON :SCHEMA.outbox, :SCHEMA.outbox_relays, :SCHEMA.outbox_failures, :SCHEMA.outbox_dead_letters
  FROM sluice_outbox_publish, sluice_outbox_relay;

-- Publish only: Outbox.publish / publishMany and SELECT publish(...) in the
-- application's transaction. It may add messages (the id, txid and created_at are
-- the defaults: it cannot place a message behind a relay's watermark) and read back
-- their ids, nothing else: it cannot read, change or delete any message, nor move
-- a watermark. The identity column's sequence needs no grant; neither does the
-- insert trigger's pg_notify. publish() runs with the caller's rights (this grant).
-- lock_outbox_keys() (Outbox.lockKeys) runs with the caller's rights and touches
-- no table.
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_outbox_publish;
GRANT INSERT (destination, key, headers, payload) ON :SCHEMA.outbox TO sluice_outbox_publish;
GRANT SELECT (id) ON :SCHEMA.outbox TO sluice_outbox_publish;
-- The functions it calls, and those its insert triggers call with its rights
-- (granted, not left to PUBLIC: see wake_payload() above).
GRANT EXECUTE ON FUNCTION :SCHEMA.publish(text, jsonb, text, jsonb), :SCHEMA.publish(text, text, text, jsonb),
  :SCHEMA.publish(text, bytea, text, jsonb), :SCHEMA.lock_outbox_keys(text[]),
  :SCHEMA.outbox_message_problem(text, jsonb), :SCHEMA.outbox_entries_problem(text, jsonb),
  :SCHEMA.queue_outbox_commit_order(text, xid8, bigint, text), :SCHEMA.order_outbox_commit() TO sluice_outbox_publish;

-- Relay: `sluice relay` / OutboxRelay. It reads messages, deletes published ones,
-- keeps the watermark and lease rows (creates them for a new destination, and
-- replaces them when the partition count changes while no relay runs),
-- counts failures and moves poison messages to the dead letters. It cannot add or
-- change messages. VACUUM needs the table's owner (Postgres 17: or the MAINTAIN
-- privilege): run a relay with this role with `vacuumEvery: 0` and leave the outbox
-- to autovacuum (migration 0015 sets it to come after a fixed number of dead rows).
GRANT USAGE ON SCHEMA :SCHEMA TO sluice_outbox_relay;
GRANT SELECT, DELETE ON :SCHEMA.outbox TO sluice_outbox_relay;
GRANT SELECT, INSERT (destination, partition, partitions, txid, id), DELETE,
  UPDATE (holder, expires_at, txid, id, published, published_at) ON :SCHEMA.outbox_relays TO sluice_outbox_relay;
GRANT SELECT, INSERT, UPDATE, DELETE ON :SCHEMA.outbox_failures TO sluice_outbox_relay;
GRANT SELECT, INSERT ON :SCHEMA.outbox_dead_letters TO sluice_outbox_relay;
GRANT SELECT ON :SCHEMA.outbox_identity TO sluice_outbox_relay; -- migration 0031
