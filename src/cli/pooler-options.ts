import type { Command } from 'commander';

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
  return command
    .option('--listen-url <url>', 'LISTEN on this direct connection (when the database URL is a transaction-mode PgBouncer)')
    .option('--no-prepared-statements', 'no named prepared statements (PgBouncer before 1.21 in transaction mode)');
}
