// First, so that pg loads without Node's fetch (see load-pg.ts), as through src/index.ts.
import '../db/drivers/load-pg.js';
import { VERSION } from '../version.js';
import { Command, CommanderError } from 'commander';
import { ConfigError, isInsufficientPrivilege, SluiceError } from '../errors.js';
import { registerDashboard } from './commands/dashboard.js';
import { registerDemo } from './commands/demo.js';
import { registerMigrate } from './commands/migrate.js';
import { registerDoctor } from './commands/doctor.js';
import { registerCron } from './commands/cron.js';
import { registerDeadLetters } from './commands/dead-letters.js';
import { registerEnqueue } from './commands/enqueue.js';
import { registerJobs } from './commands/jobs.js';
import { registerQueues } from './commands/queues.js';
import { registerRelay } from './commands/relay.js';
import { registerStats } from './commands/stats.js';
import { registerWorker } from './commands/worker.js';
import { LISTEN_REFUSED, loginProblem } from '../db/connection.js';
import { CommandFailed, ExitStatus, terminalText, UsageError } from './output.js';
import { ROLE_HINT } from './database.js';

/** Exit codes: 0 success, 1 runtime failure, 2 usage error. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

export function buildProgram(): Command {
  const program = new Command('sluice')
    .description('A transactional job queue that lives inside PostgreSQL')
    .version(VERSION, '-v, --version', 'print the version of sluice')
    .option('--database-url <url>', 'Postgres connection string (env: DATABASE_URL)')
    .option(
      '--schema <name>',
      'Postgres schema holding Sluice tables (env: SLUICE_SCHEMA)',
      process.env.SLUICE_SCHEMA ?? 'sluice',
    )
    // The error itself is one line; the full help would bury it.
    .showHelpAfterError('(add --help for usage)')
    .exitOverride();
  registerMigrate(program);
  registerWorker(program);
  registerEnqueue(program);
  registerJobs(program);
  registerStats(program);
  registerDemo(program);
  registerDoctor(program);
  registerDashboard(program);
  registerCron(program);
  registerDeadLetters(program);
  registerQueues(program);
  registerRelay(program);
  for (const command of program.commands) command.exitOverride();
  return program;
}

/**
 * Runs the command line and returns the exit code. A user mistake prints one
 * line, never a stack trace; anything unexpected keeps its stack for a bug report.
 */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  // Messages name what was given or stored (a queue, a schedule, a croner message
  // quoting the pattern): escape codes there reached the terminal (outside review 267).
  const say = (text: string) => process.stderr.write(`${terminalText(`sluice: ${text}`)}\n`);
  try {
    await program.parseAsync(argv);
    return EXIT_OK;
  } catch (err) {
    if (err instanceof ExitStatus) return err.exitCode;
    if (err instanceof CommanderError) {
      // --help and --version also come through here, with exit code 0.
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    if (err instanceof UsageError) {
      say(err.message);
      return EXIT_USAGE;
    }
    if (err instanceof CommandFailed) {
      say(err.message);
      return EXIT_FAILURE;
    }
    if (err instanceof ConfigError && err.message.startsWith(LISTEN_REFUSED)) {
      // Set here by --listen-url alone: the flag named, and not told as the database URL's
      // refusal (its cause is a refused login too; outside review 235).
      say(`--listen-url: ${err.message.slice(LISTEN_REFUSED.length)}`);
      return EXIT_USAGE;
    }
    const refused = loginProblem(err, program.opts<{ databaseUrl?: string }>().databaseUrl ?? process.env.DATABASE_URL);
    if (refused) {
      say(refused);
      return EXIT_FAILURE;
    }
    if (err instanceof SluiceError) {
      // The table a refusal names may be one the command reads on the way (outside review 156:
      // a pause refused for jobs_history); what to do about it is the same for all.
      const hint = isInsufficientPrivilege(err) ? ` (the role lacks a privilege for this: grant it ${ROLE_HINT})` : '';
      say(`${err.message}${hint}`);
      return err.code === 'CONFIG' || err.code === 'VALIDATION' ? EXIT_USAGE : EXIT_FAILURE;
    }
    say(`unexpected error: ${err instanceof Error ? err.stack : String(err)}`);
    return EXIT_FAILURE;
  }
}
