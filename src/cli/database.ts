import type { Command } from 'commander';
import { join } from 'node:path';
import pg from 'pg';
import { connectionError } from '../db/connection.js';
import { UsageError } from './output.js';

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

/**
 * Runs `fn` with one connection to the command's database (from --database-url or
 * DATABASE_URL) and the schema; a refused connection is a one-line ConnectionError.
 */
export async function withDatabase<T>(command: Command, fn: (client: pg.Client, schema: string) => Promise<T>): Promise<T> {
  const global = globalOptions(command);
  const url = requireDatabaseUrl(global);
  const client = new pg.Client({ connectionString: url, application_name: 'sluice-cli' });
  try {
    await client.connect();
  } catch (err) {
    throw connectionError(err, url);
  }
  try {
    return await fn(client, global.schema);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Where `sluice demo` keeps its embedded Postgres between runs. */
export const DEMO_DATA_DIR = join(process.cwd(), '.sluice', 'demo-pg');
