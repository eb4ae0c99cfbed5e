import type { Command } from 'commander';
import { DEMO_SCHEMA, DemoRunningError, runDemo } from '../../demo/run-demo.js';
import { DataDirInUseError, startEmbeddedPostgres } from '../../dev/embedded-postgres.js';
import { checkDatabaseUrl, globalOptions, DEMO_DATA_DIR } from '../database.js';
import { CommandFailed, printJson, UsageError } from '../output.js';
import { integer } from '../parse.js';

interface DemoFlags {
  jobs: number;
  workers: number;
  concurrency: number;
  json?: boolean;
}

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('enqueue jobs in a transaction and watch several workers drain them (embedded Postgres when no DATABASE_URL)')
    .option('--jobs <n>', 'jobs to enqueue', integer(1, 1_000_000), 2000)
    .option('--workers <n>', 'worker instances', integer(1, 32), 2)
    .option('--concurrency <n>', 'jobs each worker runs at once', integer(1, 1_000), 10)
    .option('--json', 'print the summary as JSON')
    .action(async (flags: DemoFlags, command: Command) => {
      const { jobs, workers, concurrency } = flags;
      const global = globalOptions(command);
      const { schema } = global;
      let { databaseUrl } = global;
      if (schemaGiven(command) && schema !== DEMO_SCHEMA) {
        throw new UsageError(
          `the demo drops and recreates its own schema, so it only ever uses "${DEMO_SCHEMA}", not "${schema}" (drop --schema / SLUICE_SCHEMA)`,
        );
      }
      // A URL that is none is a usage error, as for every other command (outside review
      // 267: "cannot reach Postgres at the configured database: getaddrinfo ENOTFOUND base").
      if (databaseUrl) checkDatabaseUrl(databaseUrl);
      let stop: (() => Promise<void>) | undefined;
      const out = flags.json ? process.stderr : process.stdout;
      if (!databaseUrl) {
        const embedded = await startEmbeddedPostgres({
          dataDir: DEMO_DATA_DIR,
          persistent: true,
          onStarting: () => out.write(`no DATABASE_URL: starting an embedded Postgres in ${DEMO_DATA_DIR}\n`),
        }).catch((err: unknown) => {
          // Another demo's, as with a DATABASE_URL: exit 1 (review 251: the second shut the first's down).
          throw err instanceof DataDirInUseError ? new CommandFailed(`another sluice demo is running: ${err.message}`) : err;
        });
        databaseUrl = embedded.url;
        stop = embedded.stop;
      }
      // Without an embedded Postgres to stop, `stop?.().finally(...)` was skipped whole,
      // and the first Ctrl-C did nothing (outside review 174).
      const interrupted = () => void (stop ? stop() : Promise.resolve()).finally(() => process.exit(130));
      process.once('SIGINT', interrupted);
      process.once('SIGTERM', interrupted);
      try {
        const result = await runDemo({ connectionString: databaseUrl, jobs, workers, concurrency, out }).catch((err: unknown) => {
          throw err instanceof DemoRunningError ? new CommandFailed(err.message) : err;
        });
        if (flags.json) printJson(result);
        if (!result.ranExactlyOnce) process.exitCode = 1;
      } finally {
        process.off('SIGINT', interrupted);
        process.off('SIGTERM', interrupted);
        await stop?.();
      }
    });
}

/** Whether --schema or SLUICE_SCHEMA named a schema (rather than the default applying). */
function schemaGiven(command: Command): boolean {
  if (process.env.SLUICE_SCHEMA !== undefined) return true;
  for (let c: Command | null = command; c; c = c.parent) {
    if (c.getOptionValueSource('schema') === 'cli') return true;
  }
  return false;
}
