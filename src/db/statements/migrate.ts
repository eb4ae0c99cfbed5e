import { quoteSchema } from '../identifiers.js';
import { perSchema } from './per-schema.js';

/**
 * What `migrate` runs around the migration files (sql/migrations/*.sql, whose
 * ":SCHEMA" it replaces with the quoted schema), and the check that a schema
 * has been migrated.
 */
export interface MigrateStatements {
  /** Serialises migrations of one schema ($1: a key naming it) until the transaction ends. */
  readonly lock: string;
  /**
   * Whether the schema ($1, its name) has its migrations table already (then
   * nothing needs creating), and who owns it, null if it does not exist: the
   * refusal names them.
   */
  readonly installed: string;
  readonly createSchema: string;
  readonly createMigrationsTable: string;
  readonly appliedVersions: string;
  /** The newest version applied: one row, null when none. */
  readonly newestApplied: string;
  /** $1 version, $2 name. */
  readonly recordVersion: string;
  /** Fails (42P01 or 3F000) unless the schema has been migrated; reads no rows. */
  readonly probe: string;
  /**
   * $1 the schema's quoted name with `.jobs`: whether the jobs table exists, from the
   * catalog, taking no lock on it (see the dashboard's status).
   */
  readonly catalogProbe: string;
  /** `probe` on the outbox, which the relay's role may read (it may not read jobs). */
  readonly outboxProbe: string;
  /**
   * The worker's probe ($1: the quoted schema; $2: it runs maintenance; $3: it has
   * schedules): fails as `probe` does unless the schema has been migrated; else one
   * row, the role's name and the privileges the worker needs that it lacks ('' when
   * none), as text: what sql/roles.sql grants sluice_worker for claims and results,
   * the maintenance lease, and schedules, but for what a worker does without (UPDATE
   * of queues.ungrouped_none_at, the workers registry). The pruner, which needs the
   * owner, is not asked about. Tables and columns a schema does not have yet are not
   * asked for.
   */
  readonly workerPrivileges: string;
}

/** The migration statements for one schema, built once per schema. */
export const migrateStatements = perSchema((schema: string): MigrateStatements => {
  const s = quoteSchema(schema);
  return {
    lock: 'SELECT pg_advisory_xact_lock(hashtext($1))',
    // From the catalogs, which need no USAGE on the schema: to_regclass() was refused
    // for a role without it, before the owner could be named.
    installed: `SELECT EXISTS (SELECT FROM pg_class WHERE relnamespace = n.oid AND relname = 'migrations') AS installed,
        pg_get_userbyid(n.nspowner) AS owner
      FROM (SELECT) AS one LEFT JOIN pg_namespace n ON n.nspname = $1`,
    createSchema: `CREATE SCHEMA IF NOT EXISTS ${s}`,
    createMigrationsTable: `CREATE TABLE IF NOT EXISTS ${s}.migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`,
    appliedVersions: `SELECT version FROM ${s}.migrations`,
    newestApplied: `SELECT max(version) AS version FROM ${s}.migrations`,
    recordVersion: `INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`,
    probe: `SELECT 1 FROM ${s}.jobs LIMIT 0`,
    // A lock on the jobs table (ALTER, VACUUM FULL, LOCK TABLE) holds up a read of it, not this:
    // the dashboard's status said "database unreachable" behind one (outside review 249).
    catalogProbe: 'SELECT to_regclass($1) IS NOT NULL AS migrated',
    outboxProbe: `SELECT 1 FROM ${s}.outbox LIMIT 0`,
    workerPrivileges: `SELECT current_user AS role, coalesce((
        SELECT string_agg(priv || coalesce(' (' || cols || ')', '') || ' on ' || object, ', ' ORDER BY n)
        FROM (SELECT min(n) AS n, object, priv, string_agg(col, ', ' ORDER BY n) AS cols
              FROM (VALUES (1, 'jobs', NULL, 'SELECT', 'always'), (2, 'jobs', 'status', 'UPDATE', 'always'),
                           (3, 'jobs', 'attempts', 'UPDATE', 'always'), (4, 'jobs', 'run_at', 'UPDATE', 'always'),
                           (5, 'jobs', 'locked_at', 'UPDATE', 'always'), (6, 'jobs', 'locked_by', 'UPDATE', 'always'),
                           (7, 'jobs', 'started_at', 'UPDATE', 'always'), (8, 'jobs', 'finished_at', 'UPDATE', 'always'),
                           (9, 'jobs', 'updated_at', 'UPDATE', 'always'), (10, 'jobs', 'last_error', 'UPDATE', 'always'),
                           (11, 'jobs', 'errors', 'UPDATE', 'always'), (12, 'jobs', 'result', 'UPDATE', 'always'),
                           (13, 'jobs', 'progress', 'UPDATE', 'always'), (14, 'jobs', 'key_scope', 'UPDATE', 'always'),
                           (15, 'jobs', NULL, 'DELETE', 'deleting'),
                           (20, 'queues', NULL, 'SELECT', 'always'), (21, 'queues', 'updated_at', 'UPDATE', 'always'),
                           (22, 'queues', 'group_cursor', 'UPDATE', 'always'), (23, 'queues', 'group_turn_taken', 'UPDATE', 'always'),
                           (24, 'queues', 'tokens', 'UPDATE', 'always'), (25, 'queues', 'tokens_at', 'UPDATE', 'always'),
                           (30, 'job_groups', NULL, 'SELECT', 'always'), (31, 'job_groups', 'queue', 'INSERT', 'always'),
                           (32, 'job_groups', 'group_key', 'INSERT', 'always'),
                           (33, 'job_groups', 'tokens', 'UPDATE', 'always'), (34, 'job_groups', 'tokens_at', 'UPDATE', 'always'),
                           (40, 'mark_queue_grouped(text, text)', NULL, 'EXECUTE', 'always'),
                           (41, 'claim_limited(text, text, text[], integer, bigint[])', NULL, 'EXECUTE', 'always'),
                           (42, 'claim_queue(text, text, text[], integer, integer, integer, bigint[])', NULL, 'EXECUTE', 'always'),
                           (43, 'running_jobs(text, text, text, bigint[])', NULL, 'EXECUTE', 'always'),
                           (44, 'refill_tokens(double precision, timestamptz, integer, integer, integer, timestamptz)', NULL,
                            'EXECUTE', 'always'),
                           (45, 'wake_payload(text, timestamptz)', NULL, 'EXECUTE', 'always'),
                           (50, 'leader', NULL, 'SELECT', 'maintenance'), (51, 'leader', NULL, 'INSERT', 'maintenance'),
                           (52, 'leader', NULL, 'UPDATE', 'maintenance'), (53, 'leader', NULL, 'DELETE', 'maintenance'),
                           (60, 'cron_schedules', NULL, 'SELECT', 'schedules'), (61, 'cron_schedules', NULL, 'INSERT', 'schedules'),
                           (62, 'cron_schedules', NULL, 'UPDATE', 'schedules'),
                           (63, 'enqueue_job(text, jsonb, timestamptz, integer, text, integer, text, text, boolean, text)', NULL,
                            'EXECUTE', 'schedules')) AS need (n, object, col, priv, used)
              CROSS JOIN LATERAL (SELECT to_regclass($1 || '.' || object) AS rel, to_regprocedure($1 || '.' || object) AS fn) found
              WHERE (used = 'always' OR (used = 'maintenance' AND $2) OR (used = 'schedules' AND $3)
                     OR (used = 'deleting' AND $4)) AND NOT CASE
                WHEN priv = 'EXECUTE' THEN fn IS NULL OR has_function_privilege(fn, priv)
                WHEN rel IS NULL THEN true
                WHEN col IS NULL THEN has_table_privilege(rel, priv)
                WHEN NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = col AND NOT a.attisdropped) THEN true
                ELSE has_column_privilege(rel, col, priv) END
              GROUP BY object, priv) missing), '') AS missing
      WHERE ($1 || '.jobs')::regclass IS NOT NULL`,
  };
});
