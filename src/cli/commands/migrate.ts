import type { Command } from 'commander';
import { migrate } from '../../migrate.js';
import { globalOptions, requireDatabaseUrl } from '../database.js';
import { MigrationError, isInsufficientPrivilege } from '../../errors.js';
import { printJson, terminalText, UsageError } from '../output.js';

export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description('apply Sluice migrations (safe to run from many hosts at once)')
    .option('--json', 'print the result as JSON')
    .action(async (opts: { json?: boolean }, command: Command) => {
      const global = globalOptions(command);
      const result = await migrate({ connectionString: requireDatabaseUrl(global), schema: global.schema }).catch(
        (err: unknown) => {
          // A role that may not use the schema (or create it) at all exits 2, as every
          // other command's start check does (outside review 266: migrate exited 1).
          if (!(err instanceof MigrationError && err.message.startsWith('migration setup') && isInsufficientPrivilege(err.cause)))
            throw err;
          throw new UsageError(err.message);
        },
      );
      if (opts.json) return printJson(result);
      if (result.applied.length === 0) {
        process.stdout.write(terminalText(`schema ${JSON.stringify(result.schema)} is up to date (version ${result.version})\n`));
      }
      for (const m of result.applied) process.stdout.write(`applied ${String(m.version).padStart(4, '0')}_${m.name}\n`);
    });
}
