import type { Command } from 'commander';
import { join } from 'node:path';
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

/** Where `sluice demo` keeps its embedded Postgres between runs. */
export const DEMO_DATA_DIR = join(process.cwd(), '.sluice', 'demo-pg');
