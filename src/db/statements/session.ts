/**
 * Session settings Sluice gives the connections of pools it makes.
 *
 * `client_connection_check_interval` (PostgreSQL 14+): while a statement runs, the
 * server checks every interval that its client is still connected and ends the
 * session when it is not. A statement waiting on a lock otherwise outlives its
 * client: a worker SIGKILLed while its claim waited behind a LOCK TABLE claimed
 * jobs when the lock went, and a job of one attempt that claim started failed
 * without running once the rescuer took it (outside review 147). A non-zero
 * setting the role, database or connection string gives is kept. One DO block, as
 * the first statement of each new connection: older servers skip it, and a server
 * on a platform without the check (Windows) refuses the value, which is caught.
 */
export const CHECK_CLIENT_CONNECTION_MS = 1_000;

export const checkClientConnection = `DO $sluice$
BEGIN
  IF current_setting('server_version_num')::int >= 140000
     AND current_setting('client_connection_check_interval') = '0' THEN
    PERFORM set_config('client_connection_check_interval', '${CHECK_CLIENT_CONNECTION_MS}', false);
  END IF;
EXCEPTION WHEN invalid_parameter_value OR undefined_object THEN
  NULL;
END
$sluice$`;
