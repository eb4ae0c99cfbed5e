import type { Command } from 'commander';
import { join } from 'node:path';
import pg from 'pg';
import { connectionError, describeTarget } from '../db/connection.js';
import { migrateStatements } from '../db/statements/migrate.js';
import { DatabaseError, SluiceError, wrapDatabaseError } from '../errors.js';
import { CommandFailed, UsageError } from './output.js';

export interface GlobalOptions {
  databaseUrl?: string;
  schema: string;
}

/** The options every command shares, from flags or the environment. */
export function globalOptions(command: Command): GlobalOptions {
  const opts = command.optsWithGlobals<GlobalOptions>();
  return { databaseUrl: opts.databaseUrl ?? process.env.DATABASE_URL, schema: opts.schema };
}

/** The connection string, or a usage error naming both ways to give one. */
export function requireDatabaseUrl(options: GlobalOptions): string {
  if (!options.databaseUrl) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  return options.databaseUrl;
}

/** Where `sluice demo` keeps its embedded Postgres between runs. */
export const DEMO_DATA_DIR = join(process.cwd(), '.sluice', 'demo-pg');

// A command line must not hang on a host that drops packets.
const CONNECT_TIMEOUT_MS = 10_000;

// undefined_table, invalid_schema_name: the schema was never migrated.
const NOT_MIGRATED = new Set(['42P01', '3F000']);

export interface CommandDatabase {
  pool: pg.Pool;
  url: string;
  schema: string;
}

/**
 * Opens a small pool for one command, checks that Postgres answers and that the
 * schema holds Sluice's tables, runs `fn`, and always ends the pool. Failures
 * become one line: where the database is (never the password), and what to do.
 */
export async function withDatabase<T>(command: Command, fn: (db: CommandDatabase) => Promise<T>): Promise<T> {
  const global = globalOptions(command);
  const url = requireDatabaseUrl(global);
  const { probe } = migrateStatements(global.schema);
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    application_name: 'sluice-cli',
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
  });
  pool.on('error', () => {});
  try {
    try {
      const client = await pool.connect();
      client.release();
    } catch (err) {
      throw connectionError(err, url);
    }
    try {
      await pool.query(probe);
      return await fn({ pool, url, schema: global.schema });
    } catch (err) {
      throw explain(err, global.schema, url);
    }
  } finally {
    await pool.end();
  }
}

function explain(err: unknown, schema: string, url: string): unknown {
  // Only driver errors (they carry a SQLSTATE or errno `code`) are wrapped;
  // Sluice's own errors already say what went wrong, and a bug keeps its stack.
  const fromDriver = !(err instanceof SluiceError) && typeof (err as { code?: unknown } | null)?.code === 'string';
  const wrapped = fromDriver ? wrapDatabaseError(err, 'query failed') : err;
  if (wrapped instanceof DatabaseError && wrapped.sqlState && NOT_MIGRATED.has(wrapped.sqlState)) {
    return new CommandFailed(`no Sluice tables in schema "${schema}" at ${describeTarget(url)}: run \`sluice migrate\` first`);
  }
  return wrapped;
}
