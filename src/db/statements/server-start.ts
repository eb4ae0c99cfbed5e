/**
 * When Postgres last started, crash restarts included. pg_postmaster_start_time()
 * stays put when a backend crashes and the server reinitialises (every session
 * lost, crash recovery run; outside review 111: a kill -9 of one backend, and the
 * rescuer took live workers' jobs at once), but the shared statistics are then
 * discarded and their reset time set; a clean restart keeps them. Readable by any
 * role, unlike the background processes' start in pg_stat_activity. A
 * pg_stat_reset_shared('bgwriter') moves it too, which at worst gives running jobs'
 * heartbeats a fresh start. Schema-free SQL, a scalar evaluated once per statement.
 */
export function serverStartedAt(): string {
  return 'greatest(pg_postmaster_start_time(), (SELECT stats_reset FROM pg_stat_bgwriter))';
}
