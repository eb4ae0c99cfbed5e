import { InvalidArgumentError, type Command } from 'commander';
import { databaseUrlProblem } from '../db/database-url.js';

/** The flags for a database URL that is a transaction-mode pooler (PgBouncer). */
export interface PoolerFlags {
  listenUrl?: string;
  preparedStatements: boolean;
}

/**
 * Adds --listen-url and --no-prepared-statements, the two settings a
 * transaction-mode PgBouncer needs, to `sluice relay` and `sluice worker` alike
 * (outside review 129: the worker had neither, and failed behind PgBouncer 1.18).
 */
export function addPoolerOptions(command: Command): Command {
  return addListenUrlOption(command).option(
    '--no-prepared-statements',
    'no named prepared statements (PgBouncer before 1.21 in transaction mode)',
  );
}

/**
 * --listen-url alone, for a command whose statements are all unnamed (the
 * dashboard: outside review 230 found it without live updates behind PgBouncer,
 * and no flag to give it a direct connection).
 */
export function addListenUrlOption(command: Command): Command {
  return command.option(
    '--listen-url <url>',
    'LISTEN on this direct connection (when the database URL is a transaction-mode PgBouncer)',
    listenUrl,
  );
}

/** Checked as a flag: the Worker's message named listenConnectionString and "the database URL" (outside review 130). */
function listenUrl(value: string): string {
  const problem = databaseUrlProblem(value);
  if (problem) throw new InvalidArgumentError(problem.replace(/^the database URL/, 'it'));
  return value;
}
