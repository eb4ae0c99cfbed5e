-- The jobs a worker still answers for although another session holds their rows,
-- so that the rescuer leaves them to it, and does not count their attempt when
-- the worker stops or dies before it could hand them back.
--
-- A job whose row an application or psql session held longer than the visibility
-- timeout could not be heartbeated meanwhile; the moment the lock went, the
-- maintenance leader's rescuer could take it before its worker wrote the hand-back
-- (or the result it had buffered), spending the attempt of a job that was not at
-- fault: a job of one attempt became a dead letter, and a finished one ran again
-- (outside review 105: 3 of 32 such jobs). A worker that stopped or was killed
-- while the row was held spent the attempt the same way (review 104).
--
-- row_held: a worker lists those jobs as soon as a heartbeat finds their rows
-- held, and refreshes its row at the pace of its heartbeats while it lists any.
-- The rescuer skips the jobs a worker lists under its own id while its row was
-- refreshed within its visibility timeout; once the row is older, or stopped, it
-- rescues them with the attempt given back (not twice in a row, as for jobs that
-- never started).
--
-- stopped_at: a worker that stops with such jobs keeps its row, stopped, listing
-- them, instead of deleting it; the leader prunes it like a dead one.
ALTER TABLE :SCHEMA.workers
  ADD COLUMN row_held bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN stopped_at timestamptz;
