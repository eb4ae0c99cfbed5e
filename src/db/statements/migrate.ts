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
  readonly createSchema: string;
  readonly createMigrationsTable: string;
  readonly appliedVersions: string;
  /** $1 version, $2 name. */
  readonly recordVersion: string;
  /** Fails (42P01 or 3F000) unless the schema has been migrated; reads no rows. */
  readonly probe: string;
  /**
   * The worker's probe: fails as `probe` does ($1: the jobs table's qualified name);
   * else one row, whether the role may read and claim jobs, and its name.
   */
  readonly mayClaim: string;
}

/** The migration statements for one schema, built once per schema. */
export const migrateStatements = perSchema((schema: string): MigrateStatements => {
  const s = quoteSchema(schema);
  return {
    lock: 'SELECT pg_advisory_xact_lock(hashtext($1))',
    createSchema: `CREATE SCHEMA IF NOT EXISTS ${s}`,
    createMigrationsTable: `CREATE TABLE IF NOT EXISTS ${s}.migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`,
    appliedVersions: `SELECT version FROM ${s}.migrations`,
    recordVersion: `INSERT INTO ${s}.migrations (version, name) VALUES ($1, $2)`,
    probe: `SELECT 1 FROM ${s}.jobs LIMIT 0`,
    mayClaim: `SELECT has_table_privilege($1::regclass, 'SELECT') AND has_any_column_privilege($1::regclass, 'UPDATE') AS may_claim,
      current_user AS role`,
  };
});
